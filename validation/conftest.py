"""The validation suite's fixtures: the resolved vars from the repository and the stage.

Run against any testinfra host:
    pytest validation --hosts podman://CONTAINER --nodeforge-vars vars.json --stage build
    pytest validation --hosts ssh://node --nodeforge-vars vars.json --stage target
The expected values come from `--nodeforge-vars` (`nodeforge render`), never from the node.

A check that has nothing to verify on this target skips through `not_applicable()` (a disabled
layer, the other stage, a capability the build stage lacks by definition, a component the stack
or profile does not have); any other skip leaves a required check not run, and the run fails
(nodeforge.report).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeforge.acceptance import Verdict, baseline_verdict
from nodeforge.nccl_launch import LAUNCHERS
from nodeforge.probes import local_fact
from nodeforge.report import not_applicable
from nodeforge.validate import CAPABILITIES, UNJUDGED

# Also when pytest runs the suite by hand: without the plugin a skip would read as a pass.
pytest_plugins = ("nodeforge.report",)
Judge = Callable[[str, Sequence[float]], list[Verdict]]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nodeforge")
    group.addoption(
        "--nodeforge-vars",
        type=Path,
        required=True,
        help="resolved vars of the image and profile (nodeforge render ... -o FILE)",
    )
    group.addoption(
        "--stage",
        choices=("build", "target"),
        default="build",
        help="build: on a builder without the hardware (missing capabilities skip); "
        "target: on the instance type itself (missing capabilities fail)",
    )
    group.addoption(
        "--dcgm-level",
        type=int,
        choices=(1, 2, 3, 4),
        default=1,
        help="dcgmi diag level where dcgmi is present (1: seconds, 2: about two minutes)",
    )
    group.addoption(
        "--launcher",
        choices=LAUNCHERS,
        default="mpirun",
        help="multi-node NCCL launcher: the EFA installer's Open MPI with a hostfile of the "
        "hosts, or Slurm's srun (run from a node of an allocation)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for capability in CAPABILITIES:
        config.addinivalue_line("markers", f"{capability}: needs {capability} hardware")
    config.addinivalue_line("markers", "layer(name): checks the named layer (skipped if disabled)")
    config.addinivalue_line("markers", "stage(name): runs only at that stage (build or target)")


@pytest.fixture(scope="session")
def resolved(pytestconfig: pytest.Config) -> dict[str, Any]:
    path: Path = pytestconfig.getoption("--nodeforge-vars")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="session")
def nodeforge(resolved: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = resolved["nodeforge"]
    return section


@pytest.fixture
def judge(nodeforge: dict[str, Any], record_property: Any) -> Judge:
    """Verdicts of measurements against the profile's baseline NAME. A baseline nobody has
    measured (`status: unknown`, no value) judges nothing: the measurements are recorded as
    unjudged, under the baseline's and the profile's names, for the report to list."""

    def verdicts(name: str, measured: Sequence[float]) -> list[Verdict]:
        profile = nodeforge["profile"]
        baseline = profile["baselines"][name]
        found = [baseline_verdict(value, baseline) for value in measured]
        if baseline.get("value") is None:
            record_property(
                UNJUDGED,
                {
                    "baseline": name,
                    "profile": profile["name"],
                    "status": baseline.get("status"),
                    "measured": list(measured),
                    "unit": baseline.get("unit"),
                    "note": baseline.get("note"),
                },
            )
        return found

    return verdicts


@pytest.fixture(autouse=True)
def _record_host(request: pytest.FixtureRequest, record_property: Any) -> None:
    """Which node a verdict is about, for the JSON report (nodeforge.report)."""
    if "host" in request.fixturenames:
        record_property("host", request.getfixturevalue("host").backend.hostname)


@pytest.fixture(autouse=True)
def _layer_and_capabilities(
    request: pytest.FixtureRequest, nodeforge: dict[str, Any], _record_host: None
) -> None:
    layer = request.node.get_closest_marker("layer")
    if layer is not None and not nodeforge["layers"].get(layer.args[0], False):
        not_applicable(f"layer {layer.args[0]} is not enabled in image {nodeforge['image']}")
    only = request.node.get_closest_marker("stage")
    if only is not None and only.args[0] != request.config.getoption("--stage"):
        not_applicable(f"{only.args[0]} stage only")
    needed = [c for c in CAPABILITIES if request.node.get_closest_marker(c)]
    if not needed:
        return
    if request.config.getoption("--stage") == "build":
        not_applicable(f"build stage: needs {', '.join(needed)} hardware")
    missing = missing_capabilities(request, needed)
    if missing:
        pytest.fail(f"target stage: missing capability {'; '.join(missing)}", pytrace=False)


def missing_capabilities(request: pytest.FixtureRequest, needed: list[str]) -> list[str]:
    """Each needed capability the node lacks, with the evidence, read from the node itself."""
    host = request.getfixturevalue("host")
    try:
        fact = local_fact(host, "nodeforge")
    except (AssertionError, ValueError) as exc:
        return [f"{c} (the nodeforge fact did not run: {exc})" for c in needed]
    evidence = {
        "gpu": ("gpu_count", fact.get("gpu_count", 0)),
        # NVLink 5 (B200/B300): the switches are managed through ConnectX bridges, not PCI
        "nvswitch": (
            "nvswitch_count+switch_management_bridges",
            fact.get("nvswitch_count", 0) + fact.get("switch_management_bridges", 0),
        ),
        "efa": ("efa_count", fact.get("efa_count", 0)),
    }
    missing = [
        f"{c} (nodeforge fact {evidence[c][0]}={evidence[c][1]})"
        for c in needed
        if c in evidence and not evidence[c][1]
    ]
    if "multinode" in needed:
        hosts = [h for h in (request.config.getoption("hosts") or "").split(",") if h]
        if len(hosts) < 2:
            missing.append(f"multinode (--hosts names {len(hosts)} node)")
    return missing
