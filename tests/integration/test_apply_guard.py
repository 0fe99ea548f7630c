"""`nodeforge apply` on nodes of a real Slurm cluster (Debian's slurmctld and slurmd, in
containers booted from the local image), and of a Kubernetes cluster through a kubectl stand-in:
the busy guard, drain and resume, and the health check that ends a rollout.

Each node's manifest is edited to name another driver, so the run replaces the driver stack as
far as the guard can tell, which is when it acts. A stand-in `nvidia-smi` lists a process as a
GPU compute app while that process lives, as the real one lists a training job."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from nodeforge.local.podman import SystemdContainer
from nodeforge.local.podman import run as podman
from tests.conftest import REPO
from tests.integration.conftest import LOCAL_IMAGE, local_image_group, nodeforge_cli
from tests.integration.slurm import SlurmCluster, slurm_cluster, slurm_image

pytestmark = local_image_group
MANIFEST = "/etc/nodeforge/manifest.json"
OLDER_DRIVER = 's/"version": "550.163.01"/"version": "535.261.03"/'
NEWER_DRIVER = 's/"version": "535.261.03"/"version": "550.163.01"/'
STANDIN_NVIDIA_SMI = """#!/bin/sh
# stand-in for `nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader`: the
# processes named in /run/standin-gpu-pids that are alive
for pid in $(cat /run/standin-gpu-pids 2>/dev/null); do
  [ -r "/proc/$pid/comm" ] && echo "$pid, $(cat "/proc/$pid/comm")"
done
exit 0
"""
A, B, C = "nf-node-a", "nf-node-b", "nf-node-c"


@pytest.fixture
def slurm_node_image(local_image: str) -> str:
    return slurm_image(local_image)


@pytest.fixture
def cluster(slurm_node_image: str, tmp_path: Path) -> Iterator[SlurmCluster]:
    folder = tmp_path / "slurm"
    folder.mkdir()
    with slurm_cluster(slurm_node_image, [A, B, C], folder) as booted:
        for node in booted.names:
            podman(["exec", booted.container(node), "sed", "-i", OLDER_DRIVER, MANIFEST])
        yield booted


def _gpu_process(container: str, seconds: int, folder: Path) -> str:
    """A python3 process the stand-in nvidia-smi lists as a GPU compute app; its pid."""
    standin = folder / "nvidia-smi"
    standin.write_text(STANDIN_NVIDIA_SMI)
    standin.chmod(0o755)
    podman(["cp", str(standin), f"{container}:/usr/local/bin/nvidia-smi"])
    unit = "standin-training.service"
    sleeper = f"import time; time.sleep({seconds})"
    podman(["exec", container, "systemd-run", f"--unit={unit}", "python3", "-c", sleeper])
    pid = podman(["exec", container, "systemctl", "show", "-P", "MainPID", unit]).stdout.strip()
    podman(["exec", container, "sh", "-c", f"echo {pid} > /run/standin-gpu-pids"])
    return pid


def _apply(cluster: SlurmCluster, nodes: list[str], work: Path, *extra: str) -> dict[str, Any]:
    overrides = work / "vars.yml"
    overrides.write_text(
        "vars:\n  nodeforge_scheduler: slurm\n  nodeforge_drain_poll_s: 2\n"
        "  nodeforge_drain_timeout_s: 120\n"
    )
    hosts = ",".join(f"podman://{cluster.container(n)}" for n in nodes)
    result = nodeforge_cli(
        "apply", LOCAL_IMAGE, "--hosts", hosts, "--vars", str(overrides), "--json",
        "--work-dir", str(work / "apply"), *extra,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr[-3000:]
    summary: dict[str, Any] = json.loads(result.stdout)
    summary["returncode"] = result.returncode
    summary["stderr"] = result.stderr
    return summary


def _driver(cluster: SlurmCluster, node: str) -> str:
    shown = podman(["exec", cluster.container(node), "cat", MANIFEST]).stdout
    return str(json.loads(shown)["stack"]["driver"]["version"])


def test_a_busy_node_is_skipped_and_an_idle_one_drained_changed_and_resumed(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    job = cluster.submit(A, 600)
    pid = _gpu_process(cluster.container(A), 600, tmp_path)
    # C runs a job too, but already has the image's driver stack: the run leaves it in service
    podman(["exec", cluster.container(C), "sed", "-i", NEWER_DRIVER, MANIFEST])
    cluster.submit(C, 600)
    summary = _apply(cluster, [A, B, C], tmp_path, "--batch", "2")
    busy_node, idle_node, same_stack = (cluster.container(n) for n in (A, B, C))
    # the busy node: left alone, with what was running, and as it was in Slurm
    assert summary["returncode"] == 1
    assert summary["busy"] == {
        busy_node: f"skipped: busy (Slurm jobs {job}; GPU processes {pid} python3); "
        "nothing was changed"
    }
    assert cluster.state(A) == "allocated"
    assert _driver(cluster, A) == "535.261.03"
    assert summary["nodes"][busy_node]["failures"] == 0
    # the idle node: drained for the change, healthy after it, back in service
    assert summary["nodes"][idle_node]["failures"] == 0
    assert summary["nodes"][idle_node]["notices"] == ["healthy; back in service"]
    assert _driver(cluster, B) == "550.163.01"
    assert cluster.state(B) == "idle"
    log = cluster.log()
    drained = log.index(f"update_node: node {B} reason set to: nodeforge apply {LOCAL_IMAGE}")
    assert f"update_node: node {B} state set to IDLE" in log[drained:]
    assert f"{busy_node}: skipped: busy" in summary["stderr"]
    # the node whose driver stack stays: converged under its running job, never drained
    assert summary["nodes"][same_stack]["failures"] == 0
    assert summary["nodes"][same_stack]["notices"] == ["healthy"]
    assert cluster.state(C) == "allocated"
    assert f"update_node: node {C}" not in log


def test_drain_waits_for_the_work_and_a_sick_node_stops_the_rollout(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    job = cluster.submit(A, 15)
    pid = _gpu_process(cluster.container(A), 15, tmp_path)
    # B fails its health check after the change: a unit of the driver stack has failed
    broken = "nvidia-persistenced-standin.service"
    podman(["exec", cluster.container(B), "systemd-run", f"--unit={broken}", "false"])
    summary = _apply(cluster, [A, B, C], tmp_path, "--drain", "--canary", "1", "--batch", "1")
    first, sick, later = (cluster.container(n) for n in (A, B, C))
    assert summary["returncode"] == 1
    # A: drained, waited for until the job and the GPU process ended, changed, resumed
    assert summary["nodes"][first]["notices"] == [
        f"waited for Slurm jobs {job}; GPU processes {pid} python3 to end",
        "healthy; back in service",
    ]
    assert _driver(cluster, A) == "550.163.01"
    assert cluster.state(A) == "idle"
    # B: changed, then found sick: it stays drained with the reason, and the rollout stops
    [failure] = summary["failures"]
    assert failure.startswith("Health | the node is not healthy on " + sick)
    assert f"failed units: {broken}" in failure
    assert cluster.state(B) == "drained"
    assert cluster.reason(B).startswith(f"nodeforge apply {LOCAL_IMAGE}: health check failed")
    # C: never reached
    assert summary["untouched"] == [later]
    assert later not in (tmp_path / "apply" / "ansible.log").read_text()
    assert cluster.state(C) == "idle"
    assert cluster.reason(C) == "none"
    assert _driver(cluster, C) == "535.261.03"


def _kubectl(folder: Path, state: dict[str, Any]) -> tuple[Path, Path]:
    """(a kubectl for nodeforge_kubectl, its state file): tests/kubectl_standin.py."""
    state_file = folder / "kube-state.json"
    state_file.write_text(json.dumps(state))
    wrapper = folder / "kubectl"
    standin = REPO / "tests" / "kubectl_standin.py"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{standin}" "{state_file}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, state_file


def _kube_apply(containers: list[str], kubectl: Path, work: Path, *extra: str) -> dict[str, Any]:
    work.mkdir()
    overrides = work / "vars.yml"
    overrides.write_text(
        f"vars:\n  nodeforge_scheduler: kubernetes\n  nodeforge_kubectl: {kubectl}\n"
        "  nodeforge_drain_poll_s: 2\n  nodeforge_drain_timeout_s: 60\n"
    )
    result = nodeforge_cli(
        "apply", LOCAL_IMAGE, "--hosts", ",".join(f"podman://{c}" for c in containers),
        "--vars", str(overrides), "--json", "--batch", "2", "--work-dir", str(work), *extra,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr[-3000:]
    summary: dict[str, Any] = json.loads(result.stdout)
    summary["returncode"] = result.returncode
    return summary


def test_kubernetes_gpu_pods_skip_a_node_and_drain_evicts_them(
    slurm_node_image: str, tmp_path: Path
) -> None:
    """The Kubernetes hooks through a kubectl stand-in (command line, output, exit codes):
    a node running a GPU pod is cordoned, found busy and uncordoned; a node with only pods that
    use no GPU is cordoned, changed and uncordoned; with --drain the GPU pod is evicted
    (the DaemonSet's pod stays) and the node changed and uncordoned."""
    x, y = "nf-kube-x", "nf-kube-y"
    pods = [
        {"namespace": "ml", "name": "train-0", "node": x, "gpus": 8},
        {"namespace": "kube-system", "name": "dcgm-exporter-x", "node": x, "daemonset": True},
        {"namespace": "web", "name": "api-0", "node": y},
    ]
    state = {"nodes": {x: {"unschedulable": False}, y: {"unschedulable": False}}, "pods": pods}
    kubectl, state_file = _kubectl(tmp_path, state)
    with ExitStack() as stack:
        busy, idle = (
            # the Slurm test image: its node_exporter has a port of its own (integration/slurm.py)
            stack.enter_context(SystemdContainer(slurm_node_image, hostname=name)).name
            for name in (x, y)
        )
        for container in (busy, idle):
            podman(["exec", container, "sed", "-i", OLDER_DRIVER, MANIFEST])
        first = _kube_apply([busy, idle], kubectl, tmp_path / "skip")
        seen = json.loads(state_file.read_text())
        assert first["returncode"] == 1
        assert first["busy"] == {busy: "skipped: busy (GPU pods ml/train-0); nothing was changed"}
        assert first["nodes"][idle]["notices"] == ["healthy; back in service"]
        hooks = [c for c in seen["calls"] if c[0] in ("cordon", "uncordon", "drain")]
        assert sorted(hooks) == [["cordon", x], ["cordon", y], ["uncordon", x], ["uncordon", y]]
        assert seen["nodes"] == {x: {"unschedulable": False}, y: {"unschedulable": False}}

        second = _kube_apply([busy], kubectl, tmp_path / "drain", "--drain")
        seen = json.loads(state_file.read_text())
        assert second["returncode"] == 0, second["failures"]
        assert second["nodes"][busy]["notices"] == [
            "waited for GPU pods ml/train-0 to end",
            "healthy; back in service",
        ]
        assert [x, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"] in [
            c[1:] for c in seen["calls"] if c[0] == "drain"
        ]
        assert [p["name"] for p in seen["pods"]] == ["dcgm-exporter-x", "api-0"]
        assert seen["nodes"][x] == {"unschedulable": False}
