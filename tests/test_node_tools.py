"""The node tools: their requirements, shipped locks, and the archive the node runs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from nodeforge.lock import canonical, read_lock
from nodeforge.node_tools import (
    LOCKS_DIR,
    NODE_REQUIREMENTS,
    NodeToolsRequest,
    lock_node_tools,
    lock_path,
    main,
    tools_python,
    write_pyz,
)
from tests.conftest import REPO, SHIPPED
from tests.fake_pip import fake_pip, report_item

KERNEL_LOG = REPO / "tests" / "fixtures" / "outputs" / "kernel_log"
SHIPPED_LOCKS = sorted((SHIPPED / LOCKS_DIR).glob("*.txt"))


def test_requirements_are_pyprojects_own() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {Requirement(r).name.lower(): r for r in project["project"]["dependencies"]}
    for requirement in NODE_REQUIREMENTS:
        assert declared[Requirement(requirement).name.lower()] == requirement


@pytest.mark.parametrize(
    ("os_python", "tools"),
    [("3.9", "3.11"), ("3.11", "3.11"), ("3.12", "3.12"), ("3.13.1", "3.13")],
)
def test_tools_python(os_python: str, tools: str) -> None:
    assert tools_python(os_python) == tools


def test_lock_path() -> None:
    assert lock_path("3.12", "arm64") == "locks/nodeforge-tools/py3.12-arm64.txt"


@pytest.mark.parametrize("path", SHIPPED_LOCKS, ids=lambda p: p.name)
def test_shipped_locks_satisfy_the_requirements(path: Path) -> None:
    lock = read_lock(path)
    arch = "arm64" if lock.header.platform.endswith("aarch64") else "x86_64"
    assert path.name == f"py{lock.header.python}-{arch}.txt"
    assert lock.header.torch_variant is None
    versions = lock.versions()
    for requirement in map(Requirement, NODE_REQUIREMENTS):
        assert requirement.specifier.contains(versions[canonical(requirement.name)]), requirement
    assert all(r.hashes for r in lock.requirements)


def test_locks_for_the_shipped_oses() -> None:
    assert {p.name for p in SHIPPED_LOCKS} >= {
        "py3.11-x86_64.txt",
        "py3.12-x86_64.txt",
        "py3.12-arm64.txt",
    }


def test_lock_from_pips_report(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pip(monkeypatch, {"install": [report_item("pydantic", "2.14.4", "b" * 64)]})
    request = NodeToolsRequest(python="3.12", arch="arm64")
    lock = lock_node_tools(request, now=datetime(2026, 12, 5, tzinfo=UTC))
    assert lock.header.platform == "manylinux_2_34_aarch64"
    assert lock.header.environment == "node-tools"
    assert lock.header.locked == "2026-12-05T00:00:00Z"
    assert lock.versions() == {"pydantic": "2.14.4"}


def test_cli_lock_failure_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_pip(monkeypatch, None)
    code = main(["lock", "--python", "3.12", "--arch", "x86_64", "--catalog", str(tmp_path)])
    assert code == 1
    assert "nodeforge: error:" in capsys.readouterr().err
    assert not (tmp_path / LOCKS_DIR).exists()


def test_cli_lock_writes_the_catalogs_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_pip(monkeypatch, {"install": [report_item("pyyaml", "6.0.4", "c" * 64)]})
    assert main(["lock", "--python", "3.11", "--arch", "x86_64", "--catalog", str(tmp_path)]) == 0
    written = tmp_path / lock_path("3.11", "x86_64")
    assert read_lock(written).versions() == {"pyyaml": "6.0.4"}
    assert str(written) in capsys.readouterr().out


def test_pyz_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "nodeforge.pyz", tmp_path / "b" / "nodeforge.pyz"
    write_pyz(first)
    write_pyz(second)
    assert first.read_bytes() == second.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert names[0] == "__main__.py"
    assert {"nodeforge/cli.py", "nodeforge/health_gate.py", "nodeforge/py.typed"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not list(first.parent.glob("*.partial"))


def test_pyz_runs_the_commands_from_the_archive(tmp_path: Path) -> None:
    pyz = tmp_path / "nodeforge.pyz"
    write_pyz(pyz)
    where = subprocess.run(
        [sys.executable, "-c", "import nodeforge; print(nodeforge.__file__)"],
        env={"PYTHONPATH": str(pyz)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(pyz))
    diagnosed = subprocess.run(
        [sys.executable, str(pyz), "diagnose", str(KERNEL_LOG / "bare_xid63_row_remapper.log")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert "Xid 63" in diagnosed.stdout, diagnosed.stderr
