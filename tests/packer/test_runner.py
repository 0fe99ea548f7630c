"""The wrapper against the test double: commands, progress, failures, parallel builds, Ctrl-C."""

from __future__ import annotations

import os
import shlex
import signal
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeforge.errors import BuildFailedError, InputError
from nodeforge.packer.runner import PackerFailedError, check_version
from nodeforge.packer.template import TEMPLATE_DIR
from tests.packer.conftest import DOUBLE, SOURCE_AMI, Build, Calls


def test_double_is_executable() -> None:
    assert DOUBLE.stat().st_mode & stat.S_IXUSR


def test_success(build: Build, calls: Calls, tmp_path: Path) -> None:
    lines: list[str] = []
    [result] = build(progress=lines.append)
    assert result.amis == {"us-east-1": "ami-0123456789abcdef0"}
    assert (result.image, result.profile, result.dry_run) == (
        "p5-ubuntu24.04",
        "p5.48xlarge",
        False,
    )
    argvs = [c["argv"] for c in calls() if "argv" in c]
    var_file = tmp_path / "work" / "p5-ubuntu24.04" / "us-east-1.pkrvars.json"
    assert argvs == [
        ["-machine-readable", "version"],
        ["init", "-machine-readable", str(TEMPLATE_DIR)],
        ["validate", "-machine-readable", f"-var-file={var_file}", str(TEMPLATE_DIR)],
        ["build", "-machine-readable", f"-var-file={var_file}", str(TEMPLATE_DIR)],
    ]
    assert lines[0].startswith("Packer 1.14.2 at ")
    ssh = "==> nodeforge.amazon-ebs.node: Waiting for SSH to become available..."
    assert f"[p5-ubuntu24.04 us-east-1] {ssh}" in lines
    region = result.regions["us-east-1"]
    log = Path(region.log).read_text()
    assert "artifact,0,id,us-east-1:ami-0123456789abcdef0" in log
    assert f'"source_ami": "{SOURCE_AMI}"' in Path(region.var_file).read_text()
    assert '"image": "p5-ubuntu24.04"' in Path(region.manifest).read_text()
    assert result.to_json()["amis"] == result.amis


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("init", "Plugin host rate limited the plugin getter"),
        ("validate", 'Error: Unset variable "region"'),
        ("build", "nodeforge.amazon-ebs.node: Error executing Ansible: Non-zero exit status"),
    ],
)
def test_failing_step(
    build: Build, calls: Calls, monkeypatch: pytest.MonkeyPatch, step: str, message: str
) -> None:
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_FAIL", step)
    with pytest.raises(PackerFailedError) as caught:
        build()
    error = caught.value
    assert isinstance(error, BuildFailedError)  # the CLI's exit code 1
    assert (error.step, error.returncode) == (step, 1)
    assert any(message in line for line in error.errors), error.errors
    assert error.log is not None and error.log.exists()
    assert message.split(":", maxsplit=1)[0] in str(error)
    commands = [
        c["argv"][0] for c in calls() if "argv" in c and c["argv"][0] != "-machine-readable"
    ]
    assert commands[-1] == step  # nothing runs after the failed step


def test_missing_binary(build: Build, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not installed or not on PATH") as caught:
        build(packer=str(tmp_path / "no-packer"))
    assert caught.value.fix is not None and "install Packer" in caught.value.fix


def test_too_old(build: Build, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.14.0 cannot `packer init` the official plugins from HashiCorp's release site
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_VERSION", "1.14.0")
    with pytest.raises(InputError, match=r"Packer 1\.14\.0.*>= 1\.14\.1"):
        build()


def test_version_from_human_output(tmp_path: Path) -> None:
    fake = tmp_path / "packer"
    fake.write_text("#!/bin/sh\necho 'Packer v1.14.2'\n")
    fake.chmod(0o755)
    assert str(check_version(str(fake))) == "1.14.2"
    fake.write_text("#!/bin/sh\necho 'hello'\n")
    with pytest.raises(InputError, match="cannot read the version"):
        check_version(str(fake))


def test_parallel_regions(build: Build, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    # a build of several seconds: a loaded machine still starts all three before one ends
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_DELAY", "0.2")
    [result] = build(regions=["us-east-1", "us-west-2", "eu-west-1"], max_workers=3)
    regions = ("us-east-1", "us-west-2", "eu-west-1")
    assert result.amis == dict.fromkeys(regions, "ami-0123456789abcdef0")
    assert len({b.log for b in result.regions.values()}) == 3
    records = calls()
    starts = {c["pid"]: c["time"] for c in records if c.get("argv", [""])[0] == "build"}
    ends = {c["pid"]: c["time"] for c in records if c.get("command") == "build"}
    assert len(starts) == 3
    # every build started before the first one ended: they ran side by side
    assert max(starts.values()) < min(ends.values())


def test_dry_run_prints_the_exact_commands(build: Build, calls: Calls, tmp_path: Path) -> None:
    lines: list[str] = []
    resolved: list[str] = []

    def resolve(parameter: str, _region: str) -> str:
        resolved.append(parameter)
        return SOURCE_AMI

    [result] = build(
        dry_run=True,
        progress=lines.append,
        regions=["us-east-1", "us-west-2"],
        only=["nodeforge.amazon-ebs.node"],
        resolve_ami=resolve,
    )
    assert calls() == [] and resolved == []  # neither Packer nor AWS
    work = tmp_path / "work"
    var = {r: work / "p5-ubuntu24.04" / f"{r}.pkrvars.json" for r in ("us-east-1", "us-west-2")}
    packer = shlex.quote(str(DOUBLE))
    expected = [
        f"{packer} init -machine-readable {TEMPLATE_DIR}",
        *(f"{packer} validate -machine-readable -var-file={var[r]} {TEMPLATE_DIR}" for r in var),
        *(
            f"{packer} build -machine-readable -only=nodeforge.amazon-ebs.node "
            f"-var-file={var[r]} {TEMPLATE_DIR}"
            for r in var
        ),
    ]
    assert lines == expected
    assert result.commands == expected
    assert result.dry_run and result.amis == {}
    assert all(v.exists() for v in var.values())


def test_unknown_only_name(build: Build) -> None:
    with pytest.raises(InputError, match=r"use one of: nodeforge\.amazon-ebs\.node"):
        build(only=["amazon-ebs.nope"], dry_run=True)


def test_bad_region(build: Build) -> None:
    with pytest.raises(InputError, match="not an AWS region"):
        build(regions=["us_east_1"], dry_run=True)


def _interrupt_when_ssh(lines: list[str], builds: int) -> Callable[[str], None]:
    """Ctrl-C once every build waits for SSH (a builder instance would be running)."""
    lock = threading.Lock()

    def progress(line: str) -> None:
        with lock:
            lines.append(line)
            if sum("Waiting for SSH" in seen for seen in lines) == builds and "SSH" in line:
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does to nodeforge

    return progress


@pytest.mark.parametrize("ignores_sigint", [False, True])
def test_ctrl_c_stops_packer(
    build: Build, calls: Calls, monkeypatch: pytest.MonkeyPatch, ignores_sigint: bool
) -> None:
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_HANG", "30")
    if ignores_sigint:
        monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_IGNORE_SIGINT", "1")
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        build(
            progress=_interrupt_when_ssh(lines, 2), regions=["us-east-1", "us-west-2"], grace_s=1.0
        )
    records = calls()
    pids = [c["pid"] for c in records if c.get("argv", [""])[0] == "build"]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # gone (and reaped)
    interrupted = [c for c in records if c.get("event") == "interrupted"]
    assert len(interrupted) == (0 if ignores_sigint else 2)
