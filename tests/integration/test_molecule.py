"""Every role's Molecule scenario: converge, idempotence (zero changes), testinfra verify."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.mirror import build_mirror, default_spec, molecule_env, serve
from tests.mirror.pypi import pypi_env, serve_pypi, served_locks

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
# Minutes in CI (three workers on two cores) of the scenarios that take longest: real DKMS
# builds, several platforms.
LONG_SCENARIOS = {
    "nvidia_driver": 17,
    "gdrcopy": 8,
    "base": 7,
    "nvidia_fabric": 6,
    "cuda_toolkit": 6,
}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What says why a scenario failed: Ansible's failed tasks and the verifier's failed checks, which
# the destroy step's output pushes out of any tail.
_CAUSE = re.compile(r"fatal: |failed: \[|FAILED |^\s*E\s|Error|error:|msg")
_CREATE_FAILED = "create: Executed: Failed"


def _molecule_test(
    scenario: str, env: dict[str, str], log: Path
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "molecule"), "test", "--scenario-name", scenario],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    log.write_text(result.stdout + result.stderr, encoding="utf-8")
    return result


def _failure_excerpt(output: str, limit: int = 150) -> str:
    """The lines of a Molecule run that say why it failed, then its last 15 lines."""
    lines = [_ANSI.sub("", line) for line in output.splitlines()]
    causes = [line for line in lines if _CAUSE.search(line)]
    return "\n".join([*causes[:limit], "[...]", *lines[-15:]])


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    assert roles == SCENARIOS


@pytest.fixture(scope="session")
def test_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The stub NVIDIA/EFA mirror and the locks' PyPI index on loopback, for scenarios of
    layers Debian cannot serve."""
    mirror = build_mirror(tmp_path_factory.mktemp("mirror"), default_spec())
    locks = served_locks()
    with serve(mirror) as served, serve_pypi(tmp_path_factory.mktemp("pypi"), locks) as pypi:
        yield {**molecule_env(served.mirror), **pypi_env(pypi)}


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=pytest.mark.runs_long(LONG_SCENARIOS[s]))
        if s in LONG_SCENARIOS
        else s
        for s in SCENARIOS
    ],
)
def test_scenario(
    scenario: str, base_images: dict[str, str], test_mirror: dict[str, str], tmp_path: Path
) -> None:
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        **base_images,
        **test_mirror,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
        # Molecule keeps `created: true` in ~/.ansible/tmp between runs; a run killed earlier
        # on the same machine would make this one skip create and converge nothing.
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule-state"),
    }
    log = tmp_path / f"molecule-{scenario}.log"
    result = _molecule_test(scenario, env, log)
    if result.returncode != 0 and _CREATE_FAILED in _ANSI.sub("", result.stdout + result.stderr):
        # `podman run` of a platform failing under a loaded CI machine is the harness's
        # trouble, not the role's: one more try, from destroy; converge and verify never retry.
        log = tmp_path / f"molecule-{scenario}-retry.log"
        result = _molecule_test(scenario, env, log)
    assert result.returncode == 0, (
        f"molecule test -s {scenario} failed; log {log}\n"
        + _failure_excerpt(result.stdout + result.stderr)
    )
    assert "idempotence" in result.stdout + result.stderr
