"""nodeforge installed as a user installs it: `pip install .` into a fresh virtual environment,
no extras. Every command must start (`--help`), and the catalog commands must run, with only
the runtime dependencies: the boto3 type stubs and the other dev tools are not there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

COMMANDS = (
    "list",
    "show",
    "check",
    "render",
    "build",
    "validate",
    "promote",
    "prune",
    "lock",
    "matrix",
    "outdated",
    "diagnose",
    "xid-watch",
    "health-gate",
)
DEV_ONLY = ("mypy_boto3_ec2", "mypy_boto3_ssm", "moto", "molecule", "mypy")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv holding nodeforge from a copy of the checkout (pip builds in the
    source tree, and the checkout must stay as it is)."""
    root = tmp_path_factory.mktemp("install")
    source = root / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", ".*_cache", "*.egg-info"),
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv / "bin"


def nodeforge(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "nodeforge"), *argv], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_no_dev_dependency_is_installed(installed: Path, tmp_path: Path) -> None:
    for module in DEV_ONLY:
        # away from the checkout, whose molecule/ folder would import as a namespace package
        found = subprocess.run(
            [str(installed / "python"), "-c", f"import {module}"],
            cwd=tmp_path,
            capture_output=True,
            check=False,
        )
        assert found.returncode != 0, f"{module} is installed: the test proves nothing"


def test_package_data_is_installed(installed: Path, tmp_path: Path) -> None:
    # the Xid policy is data beside the code: a wheel without it classifies nothing
    loaded = subprocess.run(
        [
            str(installed / "python"), "-c",
            "from nodeforge.xid_policy import action_for; print(action_for(79).action)",
        ],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "reboot_node"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_starts(installed: Path, command: str, tmp_path: Path) -> None:
    run = nodeforge(installed, command, "--help", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"usage: nodeforge {command}" in run.stdout
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("--version",),
        ("list",),
        ("list", "stacks", "--json"),
        ("check",),
        ("render", "local-debian13"),
        ("show", "local-debian13"),
        ("matrix",),
    ],
)
def test_catalog_commands_run(installed: Path, argv: tuple[str, ...]) -> None:
    # from a project folder holding images/, as a user runs it
    run = nodeforge(installed, *argv, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert "Traceback" not in run.stderr


def test_no_catalog_is_a_named_error(installed: Path, tmp_path: Path) -> None:
    run = nodeforge(installed, "list", cwd=tmp_path)
    assert run.returncode == 2
    assert "no images/ folder" in run.stderr
    assert "--catalog DIR" in run.stderr
    assert "Traceback" not in run.stderr
