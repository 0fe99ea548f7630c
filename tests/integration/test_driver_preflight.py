"""A driver the profile or the stack's CUDA rules out is refused by the playbook's preflight,
with the message of `nodeforge check`'s rule, before the base layer touches a package.

The vars are the repo's resolution of the B200 image, edited as a hand-made vars file (or a
stack that skipped `nodeforge check`) would have them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import load_catalog
from nodeforge.local.podman import SystemdContainer
from nodeforge.render import render
from nodeforge.target import target_for
from tests.conftest import REPO
from tests.integration.conftest import require_podman, run_playbook

PLAYBOOK = "- ansible.builtin.import_playbook: {}\n".format(REPO / "playbooks" / "image.yml")


@pytest.fixture(scope="module")
def node(base_images: dict[str, str]) -> Iterator[SystemdContainer]:
    require_podman()
    with SystemdContainer(base_images["NODEFORGE_BASE_DEBIAN13"]) as container:
        yield container


@pytest.fixture(scope="module")
def b200_vars() -> dict[str, Any]:
    catalog = load_catalog(REPO / "images")
    document = render(catalog, target_for(catalog, "p6-ubuntu24.04", "p6-b200.48xlarge"))
    # the layers this playbook has roles for, so that preflight is what stops it
    document["nodeforge"]["layers"] = {
        name: name in ("base", "nvidia_driver") for name in document["nodeforge"]["layers"]
    }
    return document


def _older_branch(doc: dict[str, Any]) -> None:
    doc["nodeforge"]["stack"]["driver"].update(branch=535, version="535.261.03")


def _proprietary(doc: dict[str, Any]) -> None:
    doc["nodeforge"]["driver_flavour"] = "proprietary"


def _newer_cuda(doc: dict[str, Any]) -> None:
    doc["nodeforge"]["stack"]["cuda"]["toolkits"] = ["13.0.2", "13.1.1"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _older_branch,
            "driver branch 535 is older than p6-b200.48xlarge's floor 570 (B200 is not "
            "supported before R570). Fix: use a stack with driver branch 570 or newer.",
        ),
        (
            _proprietary,
            "B200 needs the open kernel modules but the stack installs the proprietary driver. "
            "Fix: set the stack's driver.flavour to open (or profile).",
        ),
        (
            _newer_cuda,
            "CUDA toolkit 13.1.1 is newer than driver branch 580 runs (at most CUDA 13.0). "
            "Fix: use CUDA 13.0 or older, or a driver branch that runs CUDA 13.1.",
        ),
    ],
    ids=["below-floor", "proprietary-on-blackwell", "cuda-newer-than-driver"],
)
def test_refused_before_any_package_is_touched(
    node: SystemdContainer,
    b200_vars: dict[str, Any],
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    document = copy.deepcopy(b200_vars)
    edit(document)
    before = node.exec(["sh", "-c", "dpkg -l; ls -l /etc/apt/sources.list.d"]).stdout
    result = run_playbook(node.name, PLAYBOOK, tmp_path, document)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert message in output, output[-3000:]
    assert node.exec(["sh", "-c", "dpkg -l; ls -l /etc/apt/sources.list.d"]).stdout == before
