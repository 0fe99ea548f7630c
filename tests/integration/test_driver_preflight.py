"""A driver the profile or the stack's CUDA rules out is refused by the playbook's preflight,
with the message of `nodeforge check`'s rule, before the base layer touches a package.

The vars are `nodeforge render`'s for the B200 image with a stack that skipped `nodeforge
check`: the rules' verdicts reach the playbook as data (`<layer>_refusals`), in their words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from nodeforge.catalog.loader import load_catalog
from nodeforge.check import check_targets
from nodeforge.local.podman import SystemdContainer
from nodeforge.render import render
from nodeforge.target import Target, target_for
from tests.conftest import REPO
from tests.integration.conftest import require_podman, run_playbook

PLAYBOOK = "- ansible.builtin.import_playbook: {}\n".format(REPO / "playbooks" / "image.yml")


@pytest.fixture(scope="module")
def node(base_images: dict[str, str]) -> Iterator[SystemdContainer]:
    require_podman()
    with SystemdContainer(base_images["NODEFORGE_BASE_DEBIAN13"]) as container:
        yield container


B200 = ("p6-ubuntu24.04", "p6-b200.48xlarge")


def _older_branch(target: Target) -> Target:
    driver = target.stack.driver.model_copy(update={"branch": 535, "version": "535.261.03"})
    return replace(target, stack=target.stack.model_copy(update={"driver": driver}))


def _proprietary(target: Target) -> Target:
    driver = target.stack.driver.model_copy(update={"flavour": "proprietary"})
    return replace(target, stack=target.stack.model_copy(update={"driver": driver}))


def _newer_cuda(target: Target) -> Target:
    # driver 595 runs CUDA 13.2 natively: 13.5 is newer
    cuda = target.stack.cuda.model_copy(update={"toolkits": ["13.2.2", "13.5.0"]})
    return replace(target, stack=target.stack.model_copy(update={"cuda": cuda}))


@pytest.mark.parametrize(
    ("edit", "rule"),
    [(_older_branch, "driver-floor"), (_proprietary, "open-modules"), (_newer_cuda, "cuda-driver")],
    ids=["below-floor", "proprietary-on-blackwell", "cuda-newer-than-driver"],
)
def test_refused_before_any_package_is_touched(
    node: SystemdContainer,
    tmp_path: Path,
    edit: Callable[[Target], Target],
    rule: str,
) -> None:
    catalog = load_catalog(REPO / "images")
    target = edit(target_for(catalog, *B200))
    [finding] = [f for f in check_targets([target]).errors if f.rule == rule]
    document = render(catalog, target)
    before = node.exec(["sh", "-c", "dpkg -l; ls -l /etc/apt/sources.list.d"]).stdout
    result = run_playbook(node.name, PLAYBOOK, tmp_path, document)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "Preflight | nothing the compatibility rules refuse" in output
    assert f"[{rule}] {finding.message}. Fix: {finding.fix}." in output, output[-3000:]
    assert node.exec(["sh", "-c", "dpkg -l; ls -l /etc/apt/sources.list.d"]).stdout == before
