"""The kubectl stand-in answers as kubectl does: the custom-columns table (three spaces between
columns, `<none>` for a missing field, values of a [*] joined with commas), NotFound with exit 1,
and exit 1 for what it does not know."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kubectl_standin import main

COLUMNS = (
    "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,"
    "GPUS:.spec.containers[*].resources.limits.nvidia\\.com/gpu"
)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state.json"
    pods = [
        {"namespace": "ml", "name": "train-0", "node": "n1", "gpus": 8},
        {"namespace": "kube-system", "name": "coredns-5d78c9869d-x2k8f", "node": "n1"},
        {"namespace": "ml", "name": "elsewhere", "node": "n2", "gpus": 1},
    ]
    nodes = {"n1": {"unschedulable": False}, "n2": {"unschedulable": True}}
    path.write_text(json.dumps({"nodes": nodes, "pods": pods}))
    return path


def test_custom_columns_as_kubectl_prints_them(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["get", "pods", "--all-namespaces", "--field-selector",
            "spec.nodeName=n1,status.phase=Running", "-o", COLUMNS]  # fmt: skip
    assert main([str(state), *argv]) == 0
    assert capsys.readouterr().out == (
        "NAMESPACE     NAME                       GPUS\n"
        "ml            train-0                    8\n"
        "kube-system   coredns-5d78c9869d-x2k8f   <none>\n"
    )


def test_unknown_node_and_unknown_command_exit_1(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(state), "cordon", "n9"]) == 1
    assert 'Error from server (NotFound): nodes "n9" not found' in capsys.readouterr().err
    assert main([str(state), "taint", "nodes", "n1", "k=v:NoSchedule"]) == 1
    assert main([str(state), "get", "node", "n2", "-o", "jsonpath={.spec.unschedulable}"]) == 0
    assert capsys.readouterr().out == "true"
    assert json.loads(state.read_text())["calls"][0] == ["cordon", "n9"]
