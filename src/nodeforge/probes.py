"""Probes of a node through a testinfra host, shared by Molecule verifiers and validation/.

Each probe asks the node itself (dpkg, systemctl, the fact script), never a file nodeforge
wrote about what it installed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol


class CommandResult(Protocol):
    rc: int
    stdout: str
    stderr: str


class Host(Protocol):
    """The part of testinfra's Host the probes use."""

    def run(self, command: str, *args: str) -> CommandResult: ...


def uses_rpm(host: Host) -> bool:
    """Whether the node's packages are rpm's (Amazon Linux 2023), by /etc/os-release: the
    AL2023 stand-in of the tests has dpkg as well, so the tools alone do not tell."""
    release = host.run('. /etc/os-release && echo "$ID $ID_LIKE"')
    return bool({"amzn", "fedora", "rhel"} & set(release.stdout.split()))


def package_status(host: Host, package: str) -> str | None:
    """dpkg's status word for the package ('installed', 'config-files', ...), None if unknown;
    on rpm, 'installed' or None."""
    if uses_rpm(host):
        return "installed" if host.run("rpm --query %s", package).rc == 0 else None
    result = host.run("dpkg-query --show --showformat='${db:Status-Status}' %s", package)
    if result.rc != 0:
        return None
    return result.stdout.strip() or None


def package_version(host: Host, package: str) -> str | None:
    """dpkg's version, or rpm's version-release (no epoch)."""
    if uses_rpm(host):
        result = host.run("rpm --query --queryformat '%%{VERSION}-%%{RELEASE}' %s", package)
    else:
        result = host.run("dpkg-query --show --showformat='${Version}' %s", package)
    if result.rc != 0:
        return None
    return result.stdout.strip() or None


# A dnf versionlock entry: name-[epoch:]version-release.arch, with a glob for the arch.
_VERSIONLOCK = re.compile(r"^(?P<name>.+)-(?:\d+:)?[^-]+-[^-]+$")


def held_packages(host: Host) -> set[str]:
    """Packages held by apt-mark, or version-locked by dnf."""
    if uses_rpm(host):
        locks = host.run("dnf --quiet versionlock list")
        return {
            found["name"]
            for found in map(_VERSIONLOCK.match, locks.stdout.split())
            if found is not None
        }
    result = host.run("dpkg --get-selections")
    # multi-arch packages are listed as name:arch (libcuda1:amd64)
    return {
        fields[0].split(":")[0]
        for fields in (line.split() for line in result.stdout.splitlines())
        if len(fields) == 2 and fields[1] == "hold"
    }


def unit_state(host: Host, unit: str) -> str:
    """systemctl is-enabled's answer: enabled, disabled, masked, static, not-found..."""
    result = host.run("systemctl is-enabled %s", unit)
    return result.stdout.strip() or "not-found"


def local_fact(host: Host, name: str) -> dict[str, Any]:
    """Run an executable Ansible local fact the way fact gathering does and parse its JSON."""
    result = host.run("/etc/ansible/facts.d/%s.fact", name)
    if result.rc != 0:
        raise AssertionError(f"fact {name} exited {result.rc}: {result.stderr.strip()}")
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def loader_paths(host: Host, soname: str) -> list[str]:
    """The paths the dynamic loader's cache lists for a soname, in the loader's order."""
    listing = host.run("ldconfig -p").stdout
    return [
        line.split(" => ", 1)[1].strip()
        for line in listing.splitlines()
        if line.strip().startswith(f"{soname} ") and " => " in line
    ]


HARDWARE_GATE = "/usr/local/libexec/nodeforge/hardware-gate"
"""base's boot-time gate, the ExecCondition= of every unit that needs NVIDIA hardware."""


UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
"""Where systemd looks for system units, first to last (systemd.unit(5)); the first unit file
found wins, and drop-ins from every directory apply."""


_DIRS = " ".join(UNIT_DIRS)
UNIT_TEXT = (
    f"for d in {_DIRS}; do if [ -f $d/%s ]; then cat $d/%s; break; fi; done; "
    f"for d in {_DIRS}; do for f in $d/%s.d/*.conf; do [ -f $f ] && cat $f; done; done; true"
)
"""The shell command behind unit_text, the unit's name in each of its three places."""


def unit_text(host: Host, unit: str) -> str:
    """The unit's file and then its drop-ins, as systemd loads them, read from disk: an image
    that never booted (Packer's builder after cleanup, an unbooted container) has no manager
    for `systemctl show` or `systemctl cat` to ask."""
    return str(host.run(UNIT_TEXT, unit, unit, unit).stdout)


def exec_conditions(unit_text: str) -> list[list[str]]:
    """The command lines of a unit's ExecCondition= settings, in order; an empty assignment
    resets the list, and the command's prefixes (-, @, :, +, !) are dropped."""
    commands: list[list[str]] = []
    for line in unit_text.splitlines():
        key, _, value = line.strip().partition("=")
        if key.strip() != "ExecCondition":
            continue
        words = value.split()
        if not words:
            commands.clear()
            continue
        words[0] = words[0].lstrip("-@:+!")
        commands.append(words)
    return commands


def runs_hardware_gate(host: Host, unit: str, check: str) -> str | None:
    """None when the unit's ExecCondition= runs the hardware gate with `check` (gpu,
    fabricmanager, ...); else the ExecCondition= the unit has instead."""
    conditions = exec_conditions(unit_text(host, unit))
    if [HARDWARE_GATE, check] in conditions:
        return None
    return "; ".join(" ".join(c) for c in conditions) or "no ExecCondition="


def file_text(host: Host, path: str) -> str | None:
    result = host.run("cat %s", path)
    return result.stdout if result.rc == 0 else None


def run_python(host: Host, python: str, script: str) -> CommandResult:
    """`script` run by the node's `python`, from a file rather than stdin: multiprocessing's
    spawn re-imports the main module by its path."""
    return host.run(
        f"f=$(mktemp --suffix .py) && cat >$f <<'NODEFORGE_PY'\n{script}\nNODEFORGE_PY\n"
        f"{python} $f; rc=$?; rm -f $f; exit $rc"
    )


_FRAMEWORK_REPORT = """
import importlib, importlib.metadata as md, json
found = {}
for module, dist in %s:
    importlib.import_module(module)
    found[dist] = md.version(dist)
import torch
found["torch.version.cuda"] = torch.version.cuda
found["torch.cuda.nccl"] = (
    ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
)
print(json.dumps(found))
"""


def framework_report(host: Host, python: str, modules: list[tuple[str, str]]) -> dict[str, Any]:
    """Import each (module, distribution) in the node's `python`: the distributions' versions,
    torch's CUDA version and the NCCL torch carries (None for a CPU build)."""
    run = run_python(host, python, _FRAMEWORK_REPORT % repr(modules))
    assert run.rc == 0, f"{python}: the frameworks do not import: {run.stderr.strip()[-800:]}"
    found: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return found
