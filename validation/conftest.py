"""The validation suite's fixtures: the resolved vars from the repository and the stage.

Run against any testinfra host:
    pytest validation --hosts podman://CONTAINER --nodeforge-vars vars.json --stage build
    pytest validation --hosts ssh://node --nodeforge-vars vars.json --stage target
The expected values come from `--nodeforge-vars` (`nodeforge render`), never from the node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CAPABILITIES = ("gpu", "nvswitch", "efa", "multinode")


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


def pytest_configure(config: pytest.Config) -> None:
    for capability in CAPABILITIES:
        config.addinivalue_line("markers", f"{capability}: needs {capability} hardware")
    config.addinivalue_line("markers", "layer(name): checks the named layer (skipped if disabled)")


@pytest.fixture(scope="session")
def resolved(pytestconfig: pytest.Config) -> dict[str, Any]:
    path: Path = pytestconfig.getoption("--nodeforge-vars")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="session")
def nodeforge(resolved: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = resolved["nodeforge"]
    return section


@pytest.fixture(autouse=True)
def _layer_and_capabilities(request: pytest.FixtureRequest, nodeforge: dict[str, Any]) -> None:
    layer = request.node.get_closest_marker("layer")
    if layer is not None and not nodeforge["layers"].get(layer.args[0], False):
        pytest.skip(f"layer {layer.args[0]} is not enabled in image {nodeforge['image']}")
    stage = request.config.getoption("--stage")
    needed = [c for c in CAPABILITIES if request.node.get_closest_marker(c)]
    if needed and stage == "build":
        pytest.skip(f"build stage: needs {', '.join(needed)} hardware")
