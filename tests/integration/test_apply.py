"""`nodeforge apply` against containers booted from the locally built image: check mode says
what would change and changes nothing; a rollout stops at the first failed batch and leaves the
later nodes untouched; a node lost during the run is reported and fails the run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from nodeforge.local.podman import SystemdContainer
from nodeforge.local.podman import run as podman
from tests.conftest import REPO
from tests.integration.conftest import LOCAL_IMAGE, local_image_group, nodeforge_cli

pytestmark = local_image_group
HOLD = "package_hold : Apt | hold"


@pytest.fixture
def nodes(local_image: str) -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [stack.enter_context(SystemdContainer(local_image)).name for _ in range(3)]


def _held(node: str) -> set[str]:
    return set(podman(["exec", node, "apt-mark", "showhold"]).stdout.split())


def test_check_mode_shows_the_change_and_makes_none(nodes: list[str], tmp_path: Path) -> None:
    node = nodes[0]
    podman(["exec", node, "apt-mark", "unhold", "linux-image-cloud-amd64"])
    # as if the node had been built from a stack with another driver
    older = 's/"version": "550.163.01"/"version": "535.261.03"/'
    podman(["exec", node, "sed", "-i", older, "/etc/nodeforge/manifest.json"])
    result = nodeforge_cli(
        "apply", LOCAL_IMAGE, "--hosts", f"podman://{node}", "--check", "--json",
        "--work-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["check"] is True
    assert summary["nodes"][node]["failures"] == 0
    assert HOLD in summary["nodes"][node]["changes"]
    assert "linux-image-cloud-amd64" not in _held(node)
    # the versions the node has against those the run would write
    assert summary["nodes"][node]["versions"] == ["stack.driver.version: 535.261.03 -> 550.163.01"]
    # the run was in node mode: the vars it used say so
    rendered = json.loads((tmp_path / "vars.json").read_text())
    assert rendered["nodeforge_mode"] == "node"


def test_a_failed_canary_stops_the_rollout(nodes: list[str], tmp_path: Path) -> None:
    canary, *later = nodes
    # a node Ansible cannot run a module on: fact gathering fails there
    podman(["exec", canary, "sh", "-c", "rm -f /usr/bin/python3*"])
    hosts = ",".join(f"podman://{n}" for n in nodes)
    result = nodeforge_cli(
        "apply", LOCAL_IMAGE, "--hosts", hosts, "--canary", "1", "--batch", "1",
        "--work-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"untouched (a batch before theirs failed): {', '.join(later)}" in result.stdout
    assert "FAILED: " in result.stderr and f" on {canary}" in result.stderr
    log = (tmp_path / "ansible.log").read_text()
    assert all(node not in log for node in later)


def test_a_node_lost_mid_run_is_reported_and_the_run_fails(
    nodes: list[str], tmp_path: Path
) -> None:
    kept, lost, _ = nodes
    run = subprocess.Popen(
        [sys.executable, "-m", "nodeforge.cli", "apply", LOCAL_IMAGE,
         "--hosts", f"podman://{kept},podman://{lost}", "--canary", "2", "--json",
         "--work-dir", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stderr is not None
    for line in run.stderr:
        if "] base : " in line:  # the layers have started on both nodes
            podman(["kill", lost])
            break
    out, err = run.communicate(timeout=900)
    assert run.returncode == 1, err[-3000:]
    summary = json.loads(out)
    shown = summary["nodes"][lost]
    assert shown["unreachable"] + shown["failures"] == 1
    assert [f for f in summary["failures"] if f" on {lost}: " in f]
    assert summary["ok"] is False
