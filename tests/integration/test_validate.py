"""`nodeforge validate` against a container booted from the locally built image."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeforge.local.podman import SystemdContainer
from tests.conftest import REPO
from tests.integration.conftest import local_image_group

pytestmark = local_image_group
GPU_LESS = {
    "test_fact_sees_the_profile_gpus",
    "test_fact_sees_the_profile_efa",
    "test_gate_passed_and_watcher_runs",
    "test_node_exporter_serves_a_healthy_node",
}
"""What the target stage fails on a GPU-less container of the local image: its hardware checks."""


@pytest.fixture(scope="module")
def node(local_image: str) -> Iterator[str]:
    """A booted instance of the local image: what a target-stage run meets on a GPU-less host."""
    with SystemdContainer(local_image) as container:
        yield container.name


def _validate(
    node: str, stage: str, report_dir: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeforge.cli",
            "validate",
            "local-debian13",
            "--stage",
            stage,
            "--hosts",
            f"podman://{node}",
            "--report-dir",
            str(report_dir),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_target_stage_without_hardware_fails_and_names_it(node: str, tmp_path: Path) -> None:
    result = _validate(node, "target", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "missing capabilities: efa, gpu" in result.stdout
    report = json.loads((tmp_path / "validation-target.json").read_text())
    assert report["ok"] is False
    assert report["image"] == "local-debian13"
    assert report["profile"] == "g6e.48xlarge"
    failed = {
        c["id"].split("::")[-1].split("[")[0]: c
        for c in report["checks"]
        if c["outcome"] == "failed"
    }
    assert set(failed) == GPU_LESS
    for name in GPU_LESS - {"test_fact_sees_the_profile_efa"}:
        assert failed[name]["message"] == (
            "target stage: missing capability gpu (nodeforge fact gpu_count=0)"
        )
    assert all(c["host"] == node for c in report["checks"])
    assert (tmp_path / "validation-target.xml").exists()


def test_target_stage_records_declared_and_actual(node: str, tmp_path: Path) -> None:
    result = _validate(node, "target", tmp_path, "--json")
    report = json.loads(result.stdout)
    kernel = next(c for c in report["checks"] if "test_kernel_installed_and_held" in c["id"])
    assert kernel["outcome"] == "passed"
    assert kernel["properties"]["declared"] == [
        "linux-image-cloud-amd64",
        "linux-headers-cloud-amd64",
    ]
    assert kernel["properties"]["actual"]["linux-image-cloud-amd64"]


def test_build_stage_hygiene_catches_a_booted_instance(node: str, tmp_path: Path) -> None:
    # a booted instance has a machine id: the image check must notice it
    result = _validate(node, "build", tmp_path)
    assert result.returncode == 1
    report = json.loads((tmp_path / "validation-build.json").read_text())
    failed = [c["id"] for c in report["checks"] if c["outcome"] == "failed"]
    assert len(failed) == 1
    assert "test_machine_id_empty" in failed[0]


def test_two_nodes_in_parallel(node: str, local_image: str, tmp_path: Path) -> None:
    with SystemdContainer(local_image) as second:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeforge.cli",
                "validate",
                "local-debian13",
                "--stage",
                "target",
                "--hosts",
                f"podman://{node},podman://{second.name}",
                "--parallel",
                "--report-dir",
                str(tmp_path),
                "--json",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    hosts = {c["host"] for c in report["checks"]}
    assert hosts == {node, second.name}
    failed_per_host = {
        h: sorted(
            c["id"].split("::")[-1].split("[")[0]
            for c in report["checks"]
            if c["outcome"] == "failed" and c["host"] == h
        )
        for h in hosts
    }
    assert all(failed == sorted(GPU_LESS) for failed in failed_per_host.values())
