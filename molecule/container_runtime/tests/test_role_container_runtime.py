"""What the container_runtime role leaves in a container (image mode, containerd): Debian's
containerd enabled, running with its CRI plugin loaded; the stub toolkit at the scenario's exact
version, pinned and held, from a source whose key passed the fingerprint check; the nvidia runtime
in containerd's effective configuration (NVIDIA's 1.18 drop-in, imported from config.toml, merged
by the real containerd) beside the default runtime; NVIDIA's nvidia-cdi-refresh unit enabled,
gated on GPU presence, not run in the container.

The expected values are the scenario's vars for the role over the role's defaults, never literals
of their own here. containerd runs in the scenario's systemd container (Debian's postinst starts
it, the role's handler restarts it on the new configuration): a containerd that does not run is
a failure, not a reason to skip."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from nodeforge.probes import file_text, held_packages, package_status, package_version

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]


def role_vars() -> dict[str, Any]:
    """The role's defaults under the vars the scenario's converge play gives the role."""
    defaults = yaml.safe_load(
        (REPO / "roles/container_runtime/defaults/main.yml").read_text(encoding="utf-8")
    )
    plays = yaml.safe_load((SCENARIO / "converge.yml").read_text(encoding="utf-8"))
    given = next(
        role.get("vars", {})
        for play in plays
        for role in play.get("roles", [])
        if role.get("role") == "container_runtime"
    )
    return {**defaults, **given}


VARS = role_vars()
TOOLKIT = VARS["container_runtime_toolkit_version"]
DROP_IN = VARS["container_runtime_containerd_drop_in"]
SPEC = VARS["container_runtime_cdi_spec"]
ENABLE_CDI = VARS["container_runtime_enable_cdi"]
DEFAULT_RUNTIME = "nvidia" if VARS["container_runtime_nvidia_default"] else "runc"
PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
GATE = "/usr/local/libexec/nodeforge/hardware-gate"
UNIT = "nvidia-cdi-refresh.service"
CONFIG = "/etc/containerd/config.toml"
CRI = "io.containerd.grpc.v1.cri"
RUNTIME = "/usr/bin/nvidia-container-runtime"
FAKE = "/tmp/nodeforge-fake-sysfs-cdi"
# PCI functions as sysfs shows them: (address, vendor, class).
TREES: dict[str, list[tuple[str, str, str]]] = {
    "empty": [],
    # a CPU instance: an ENA NIC and an NVMe controller, no NVIDIA device
    "no-gpu": [("0000:00:05.0", "0x1d0f", "0x020000"), ("0000:00:04.0", "0x1d0f", "0x010802")],
    # an NVIDIA device that is no GPU (an NVSwitch, class 0680)
    "nvswitch-only": [("0000:05:00.0", "0x10de", "0x068000")],
    # p5: H100 (3D controller, 0302)
    "h100": [("0000:53:00.0", "0x10de", "0x030200"), ("0000:64:00.0", "0x10de", "0x030200")],
    # g6e: L40S (VGA, 0300)
    "l40s": [("0000:9e:00.0", "0x10de", "0x030000")],
}
GPUS = {"empty": 0, "no-gpu": 0, "nvswitch-only": 0, "h100": 2, "l40s": 1}


def _text(host: Any, path: str) -> str:
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    return text


def installed_from(host: Any, package: str) -> set[str]:
    """The origins (Release files' `o=`) of the sources that offer the installed version of
    `package`, as apt's policy shows them; empty when only dpkg's status file has it."""
    policy = host.run("apt-cache policy %s", package).stdout
    sources, installed = set(), False
    for line in policy.splitlines():
        version = re.match(r"^ (\*\*\*|   ) \S+ -?\d+$", line)
        if version:
            installed = version.group(1) == "***"
        elif installed and (source := re.match(r"^\s+-?\d+ (\S+ .*Packages)$", line)):
            sources.add(source.group(1))
    files = host.run("apt-cache policy").stdout.splitlines()
    return {
        origin.group(1)
        for line, release in pairwise(files)
        if (source := re.match(r"^\s*-?\d+ (\S+ .*Packages)$", line)) and source.group(1) in sources
        if (origin := re.search(r"\bo=([^,]+)", release))
    }


def effective_config(host: Any) -> dict[str, Any]:
    """containerd's configuration as it merged it (config.toml and its imports)."""
    dump = host.run("containerd config dump")
    assert dump.rc == 0, f"containerd config dump: {dump.stderr.strip()}"
    config: dict[str, Any] = tomllib.loads(dump.stdout)
    return config


def test_containerd_from_debian_enabled(host: Any) -> None:
    assert package_status(host, "containerd") == "installed"
    assert host.run("systemctl is-enabled containerd.service").stdout.strip() == "enabled"
    # Debian's containerd, not a third-party build: the security updates come with the OS
    origins = installed_from(host, "containerd")
    assert origins == {"Debian"}, f"containerd comes from {origins or 'no apt source'}"


def test_containerd_runs_the_installed_build(host: Any) -> None:
    state = host.run("systemctl is-active containerd.service").stdout.strip()
    journal = host.run("journalctl -u containerd.service -n 5 --no-pager").stdout
    assert state == "active", f"containerd is {state}: {journal}"
    version = host.run("ctr version")
    assert version.rc == 0, version.stderr
    server = version.stdout.partition("Server:")[2]
    assert f"Revision: {package_version(host, 'containerd')}\n" in server, version.stdout


def test_cri_plugin_loads(host: Any) -> None:
    # the plugin that owns the runtimes: a configuration it rejects leaves containerd up, and
    # no pod (nor the nvidia runtime) can run
    plugins = host.run("ctr plugins ls")
    assert plugins.rc == 0, plugins.stderr
    status = next(
        (
            line.split()[-1]
            for line in plugins.stdout.splitlines()
            if line.split()[:2] == ["io.containerd.grpc.v1", "cri"]
        ),
        "missing",
    )
    if status != "ok":
        why = host.run("journalctl -u containerd.service --no-pager -g 'failed to load plugin'")
        pytest.fail(f"the CRI plugin is {status}: {why.stdout.strip()[-800:]}", pytrace=False)


def test_toolkit_at_the_stack_version(host: Any) -> None:
    for package in PACKAGES:
        assert package_version(host, package) == TOOLKIT, package
        assert package_status(host, package) == "installed", package
    shown = re.search(r"version (\S+)", host.run("nvidia-ctk --version").stdout)
    # the upstream part of the Debian version: 1.18.0-1 -> 1.18.0
    assert shown is not None and shown.group(1) == TOOLKIT.rsplit("-", 1)[0], shown


def test_toolkit_pinned_and_held(host: Any) -> None:
    assert set(PACKAGES) <= held_packages(host)
    prefs = _text(host, "/etc/apt/preferences.d/nodeforge-10-nvidia-container-toolkit")
    assert f"Pin: version {TOOLKIT}\n" in prefs and "Pin-Priority: 1001" in prefs
    policy = host.run("apt-cache policy nvidia-container-toolkit").stdout
    assert f"*** {TOOLKIT} 1001" in policy, policy
    # the engine comes from the distribution and takes its updates
    assert "containerd" not in held_packages(host)


def test_repository_signed_by_the_checked_key(host: Any) -> None:
    source = _text(host, "/etc/apt/sources.list.d/nodeforge-nvidia-container-toolkit.sources")
    assert "Signed-By: /etc/apt/keyrings/nodeforge-nvidia-container-toolkit.asc" in source
    assert "/nvidia.github.io/libnvidia-container/stable/deb/amd64/" in source
    assert "Suites: /" in source


def test_nvidia_runtime_in_the_drop_in(host: Any) -> None:
    # toolkit 1.18 writes a drop-in and makes the top-level config import its folder
    imports = tomllib.loads(_text(host, CONFIG)).get("imports", [])
    assert f"{PurePosixPath(DROP_IN).parent}/*.toml" in imports, imports
    cri = tomllib.loads(_text(host, DROP_IN))["plugins"][CRI]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == RUNTIME, nvidia
    assert cri.get("enable_cdi", False) is ENABLE_CDI, cri
    # runc stays the default unless the scenario asks for nvidia
    assert cri["containerd"].get("default_runtime_name", "runc") == DEFAULT_RUNTIME, cri


def test_nvidia_runtime_in_the_effective_configuration(host: Any) -> None:
    cri = effective_config(host)["plugins"][CRI]
    runtimes = cri["containerd"]["runtimes"]
    nvidia = runtimes.get("nvidia", {})
    assert nvidia.get("runtime_type") == "io.containerd.runc.v2", nvidia
    assert nvidia.get("options", {}).get("BinaryName") == RUNTIME, nvidia
    assert cri["enable_cdi"] is ENABLE_CDI
    default = cri["containerd"]["default_runtime_name"]
    assert default == DEFAULT_RUNTIME
    # the runtime every pod without a runtime class gets must still be defined
    assert default in runtimes, f"default runtime {default} is not among {sorted(runtimes)}"
    # Debian's own settings survive
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"


def test_cdi_unit_enabled_behind_the_gate(host: Any) -> None:
    assert host.run("systemctl is-enabled %s", UNIT).stdout.strip() == "enabled"
    gate = host.file(GATE)
    assert gate.is_file and gate.mode == 0o755 and gate.user == "root"
    shown = host.run("systemctl show -p ExecCondition %s", UNIT).stdout
    # NVIDIA's own condition (a driver in modules.dep) and the role's gate, both
    assert "argv[]=/usr/bin/grep" in shown, shown
    assert f"path={GATE} ; argv[]={GATE} gpu ;" in shown, shown
    env = host.run("systemctl show -p Environment %s", UNIT).stdout
    assert f"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH={SPEC}" in env


def test_cdi_unit_never_ran_here(host: Any) -> None:
    # the package's postinst starts it; without GPU and driver it is skipped, never failed
    assert host.run("systemctl is-active %s", UNIT).stdout.strip() == "inactive"
    assert host.run("systemctl is-failed %s", UNIT).stdout.strip() != "failed"
    assert not host.file(SPEC).exists


@pytest.fixture(scope="module")
def fake_sysfs(host: Any) -> Iterator[str]:
    script = [f"rm -rf {FAKE}"]
    for tree, devices in TREES.items():
        script.append(f"mkdir -p {FAKE}/{tree}/bus/pci/devices")
        for address, vendor, pci_class in devices:
            folder = f"{FAKE}/{tree}/bus/pci/devices/{address}"
            script += [
                f"mkdir -p {folder}",
                f"echo {vendor} > {folder}/vendor",
                f"echo {pci_class} > {folder}/class",
            ]
    made = host.run(" && ".join(script))
    assert made.rc == 0, made.stderr
    yield FAKE
    host.run(f"rm -rf {FAKE}")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_gate_decides_from_the_pci_ids(host: Any, fake_sysfs: str, tree: str) -> None:
    result = host.run("NODEFORGE_SYSFS_ROOT=%s %s gpu", f"{fake_sysfs}/{tree}", GATE)
    if GPUS[tree]:
        assert result.rc == 0, (tree, result.stdout, result.stderr)
        assert f"gpus={GPUS[tree]} " in result.stdout and "starting" in result.stdout
    else:
        assert result.rc == 1, (tree, result.stdout, result.stderr)
        assert "no NVIDIA GPU" in result.stdout and "skipping" in result.stdout


def test_gate_reads_a_root_argument(host: Any, fake_sysfs: str) -> None:
    assert host.run("%s --sysfs-root %s gpu", GATE, f"{fake_sysfs}/h100").rc == 0
    assert host.run("%s --sysfs-root %s gpu", GATE, f"{fake_sysfs}/empty").rc == 1


def test_gate_goes_on_when_sysfs_cannot_be_read(host: Any) -> None:
    result = host.run("NODEFORGE_SYSFS_ROOT=/nonexistent %s gpu", GATE)
    assert result.rc == 0 and "cannot read" in result.stdout


def test_unit_skipped_cleanly_without_gpus(host: Any, fake_sysfs: str) -> None:
    # started by hand with no GPU: a condition declines it, nothing fails, no spec appears
    host.run("systemctl set-environment NODEFORGE_SYSFS_ROOT=%s", f"{fake_sysfs}/no-gpu")
    try:
        assert host.run("systemctl start %s", UNIT).rc == 0
        shown = host.run("systemctl show -p ActiveState,Result %s", UNIT).stdout
        assert "ActiveState=inactive" in shown, shown
        assert not host.file(SPEC).exists
    finally:
        host.run("systemctl unset-environment NODEFORGE_SYSFS_ROOT")
        host.run("systemctl stop %s", UNIT)
