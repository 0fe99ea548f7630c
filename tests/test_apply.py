"""nodeforge.apply without nodes: batch sizes, the inventory made from host URLs, the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeforge.apply import (
    SSM_CONNECTION,
    ApplyResult,
    batch_size,
    inventory_of,
    serial,
    split_hosts,
    version_changes,
    versions,
)
from nodeforge.errors import InputError
from nodeforge.local.playbook import PlaybookResult, _follow
from tests.conftest import REPO


def test_the_canary_batch_comes_first() -> None:
    assert serial(None, None) == [1, "10%"]
    assert serial("4", "2") == [2, 4]
    assert serial("25%", None) == [1, "25%"]


@pytest.mark.parametrize("value", ["0", "-1", "101%", "0%", "ten", "5.5", ""])
def test_a_batch_size_is_a_count_or_a_percentage(value: str) -> None:
    with pytest.raises(InputError, match="is not a batch size") as error:
        batch_size(value, "--batch")
    assert error.value.field == "--batch"


def test_host_urls_become_an_inventory() -> None:
    inventory = inventory_of(["ssh://ubuntu@10.0.0.5:2222", "ssh://node2", "podman://c1"])
    assert inventory == {
        "all": {
            "hosts": {
                "10.0.0.5": {
                    "ansible_host": "10.0.0.5",
                    "ansible_user": "ubuntu",
                    "ansible_port": 2222,
                },
                "node2": {"ansible_host": "node2"},
                "c1": {"ansible_connection": "nodeforge_podman"},
            }
        }
    }
    with pytest.raises(InputError, match="not a node apply can reach"):
        inventory_of(["kubectl://pod"])


def _result(hosts: dict[str, dict[str, int]], code: int, untouched: list[str]) -> ApplyResult:
    playbook = PlaybookResult(returncode=code, hosts=hosts, host_changes={"a": ["t"]})
    return ApplyResult("img", "p", False, playbook, Path("log"), untouched)


def test_a_run_is_ok_only_when_every_node_converged() -> None:
    converged = {"ok": 70, "changed": 1, "failures": 0, "unreachable": 0, "skipped": 3}
    assert _result({"a": converged}, 0, []).ok
    assert not _result({"a": {**converged, "failures": 1}}, 2, ["b"]).ok
    assert not _result({"a": {**converged, "unreachable": 1}}, 4, []).ok
    assert not _result({"a": converged}, 0, ["b"]).ok
    shown = _result({"a": converged}, 0, []).to_json()
    assert shown["nodes"]["a"] == {
        "ok": 70,
        "changed": 1,
        "failures": 0,
        "unreachable": 0,
        "skipped": 3,
        "changes": ["t"],
        "versions": [],
        "notices": [],
    }


def test_a_node_skipped_as_busy_leaves_the_run_not_ok() -> None:
    """node/guard.yml's notice (a debug of nodeforge_notice in Ansible's JSON stream) is read
    per node; a busy node was not brought to the image, so the run is not ok."""
    playbook = PlaybookResult(returncode=0)
    shown: list[str] = []
    for host, notice in (("a", "skipped: busy (Slurm jobs 12); nothing was changed"),
                         ("b", "healthy; back in service")):  # fmt: skip
        event = {
            "_event": "v2_runner_on_ok",
            "task": {"name": "Guard | notice"},
            "hosts": {host: {"nodeforge_notice": notice, "changed": False}},
        }
        _follow(json.dumps(event), playbook, shown.append)
    converged = {"ok": 9, "changed": 0, "failures": 0, "unreachable": 0, "skipped": 1}
    playbook.hosts = {"a": converged, "b": converged}
    result = ApplyResult("img", "p", False, playbook, Path("log"))
    assert not result.ok
    assert result.busy == {"a": "skipped: busy (Slurm jobs 12); nothing was changed"}
    assert result.to_json()["nodes"]["b"]["notices"] == ["healthy; back in service"]
    assert "      a: skipped: busy (Slurm jobs 12); nothing was changed" in shown


def test_versions_are_every_version_leaf_of_the_manifest() -> None:
    manifest = {
        "image": "p5-ubuntu24.04",
        "aws_ofi_nccl_version": "1.18.0",
        "stack": {
            "driver": {"version": "580.95.05", "branch": 580},
            "frameworks": {"pytorch": {"version": "2.15.0", "variant": "cu132"}},
            "nccl": {"version": None},
        },
    }
    assert versions(manifest) == {
        "image": "p5-ubuntu24.04",
        "aws_ofi_nccl_version": "1.18.0",
        "stack.driver.version": "580.95.05",
        "stack.frameworks.pytorch.version": "2.15.0",
    }
    assert versions(None) == {}


def test_version_changes_name_the_old_and_the_new() -> None:
    before = {"stack.driver.version": "570.1", "image": "a", "gone.version": "1"}
    after = {"stack.driver.version": "580.2", "image": "a", "new.version": "2"}
    assert version_changes(before, after) == [
        "gone.version: 1 -> -",
        "new.version: - -> 2",
        "stack.driver.version: 570.1 -> 580.2",
    ]


def test_ssm_nodes_use_systems_manager_through_a_bucket() -> None:
    inventory = inventory_of(["ssm://i-0123456789abcdef0", "ssm://i-01234567"], "nf-transfer")
    assert inventory["all"]["hosts"]["i-0123456789abcdef0"] == {
        "ansible_connection": SSM_CONNECTION,
        "ansible_aws_ssm_instance_id": "i-0123456789abcdef0",
        "ansible_aws_ssm_bucket_name": "nf-transfer",
    }
    with pytest.raises(InputError, match="moves files through S3") as error:
        inventory_of(["ssm://i-0123456789abcdef0"])
    assert error.value.field == "--ssm-bucket"


@pytest.mark.parametrize("spec", ["ssm://web1", "ssm://i-0123", "ssm://i-0123456789ABCDEF0"])
def test_an_ssm_node_is_an_instance_id(spec: str) -> None:
    with pytest.raises(InputError, match="does not name an EC2 instance") as error:
        split_hosts(f"podman://c1,{spec}")
    assert error.value.field == "--hosts"
    assert split_hosts("ssm://i-0123456789abcdef0, podman://c1") == [
        "ssm://i-0123456789abcdef0",
        "podman://c1",
    ]


def test_ssm_nodes_are_driven_by_the_aws_ssm_connection(tmp_path: Path) -> None:
    """The whole path up to the session: the inventory names amazon.aws.aws_ssm, Ansible loads
    it, and it stops where AWS's session-manager-plugin binary is missing (as on a controller
    without it), which the run reports against the node, exiting 1."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_SESSION_MANAGER_PLUGIN": str(tmp_path / "session-manager-plugin"),
    }
    node = "i-0123456789abcdef0"
    result = subprocess.run(
        [sys.executable, "-m", "nodeforge.cli", "apply", "local-debian13",
         "--hosts", f"ssm://{node}", "--ssm-bucket", "nf-transfer", "--json",
         "--work-dir", str(tmp_path / "work")],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["nodes"][node]["failures"] == 1
    [failure] = summary["failures"]
    assert failure.startswith(f"Gathering Facts on {node}: ")
    assert "session-manager-plugin" in failure
