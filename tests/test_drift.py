"""nodeforge.drift without containers: which checks it runs, how it names nodes (an inventory
expands to its hosts), how it reads a manifest, and how a report's failures become drift."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeforge.drift import (
    INSTALLED_STATE,
    Node,
    NodeDrift,
    _attribute,
    expand,
    node_image,
    parse_urls,
)
from nodeforge.errors import InputError
from nodeforge.validate import CAPABILITIES, ValidationRun


def test_drift_leaves_out_every_hardware_check() -> None:
    assert INSTALLED_STATE == "not (gpu or nvswitch or efa or multinode)"
    assert all(capability in INSTALLED_STATE for capability in CAPABILITIES)


@pytest.mark.parametrize(
    ("hosts", "inventory", "limit", "said"),
    [
        (None, None, None, "with --hosts or with --inventory"),
        ("ssh://a", Path("inv.ini"), None, "with --hosts or with --inventory"),
        ("ssh://a", None, "gpu", "--limit selects hosts of an --inventory"),
        ("node1", None, None, "'node1' is not a testinfra host URL"),
    ],
)
def test_bad_node_arguments_are_refused(
    hosts: str | None, inventory: Path | None, limit: str | None, said: str
) -> None:
    with pytest.raises(InputError, match=said):
        parse_urls(hosts, inventory, limit)


def test_an_inventory_and_its_limit_become_an_ansible_url(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu]\nnode1\n")
    assert parse_urls(None, inventory, "gpu") == [
        f"ansible://gpu?ansible_inventory={inventory.resolve()}"
    ]
    with pytest.raises(InputError, match="no such inventory"):
        parse_urls(None, tmp_path / "missing.ini", None)


def test_an_inventory_pattern_expands_to_one_node_per_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # testinfra lists an inventory with ansible-inventory, found on PATH
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[gpu]\nnode1 ansible_connection=local\nnode2 ansible_connection=local\n"
        "[cpu]\nnode3 ansible_connection=local\n"
    )
    url = f"ansible://gpu?ansible_inventory={inventory}"
    nodes = expand([url, "local://"])
    assert [n.url for n in nodes] == [
        f"ansible://node1?ansible_inventory={inventory}",
        f"ansible://node2?ansible_inventory={inventory}",
        "local://",
    ]
    assert [n.hostname for n in nodes][:2] == ["node1", "node2"]


def test_an_inventory_pattern_without_hosts_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu]\nnode1 ansible_connection=local\n")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(InputError, match="names no host") as error:
        expand([f"ansible://trainers?ansible_inventory={inventory}"])
    assert error.value.field == "--limit"
    # without ansible-inventory, testinfra cannot list an inventory at all (a new file:
    # testinfra keeps what it listed per inventory)
    other = tmp_path / "other.ini"
    other.write_text(inventory.read_text())
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match="could not list the hosts of ansible://"):
        expand([f"ansible://gpu?ansible_inventory={other}"])


def test_the_manifest_names_the_image(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    here = Node("local://", "local")
    manifest.write_text('{"image": "p5-ubuntu24.04", "schema": 3}')
    assert node_image(here, str(manifest)) == "p5-ubuntu24.04"
    manifest.write_text("not json")
    with pytest.raises(ValueError, match="is not a nodeforge manifest"):
        node_image(here, str(manifest))
    with pytest.raises(ValueError, match="not a node nodeforge built"):
        node_image(here, str(tmp_path / "absent.json"))


def _run(checks: list[dict[str, Any]], tmp_path: Path) -> ValidationRun:
    return ValidationRun(
        ok=False,
        returncode=1,
        report={"checks": checks},
        junit=tmp_path / "v.xml",
        json_report=tmp_path / "v.json",
        log=tmp_path / "v.log",
    )


def test_each_failed_check_is_drift_of_its_own_node(tmp_path: Path) -> None:
    a, b = NodeDrift(Node("ssh://a", "a"), "img"), NodeDrift(Node("ssh://b", "b"), "img")
    checks = [
        {
            "id": "test_layer_base.py::test_kernel_installed_and_held[ssh://a]",
            "host": "a",
            "outcome": "failed",
            "message": "AssertionError: not held:\n  linux-image",
        },
        {"id": "t.py::test_ok[ssh://b]", "host": "b", "outcome": "passed", "message": ""},
        {
            "id": "t.py::test_unit[ssh://b]",
            "host": "b",
            "outcome": "failed",
            "message": "ssh: connect to host b port 22: Connection refused",
            "unreachable": "ssh: connect to host b port 22: Connection refused",
        },
    ]
    _attribute(_run(checks, tmp_path), [a, b])
    assert a.drifted == [
        {"check": "test_kernel_installed_and_held[ssh://a]", "found": "not held: linux-image"}
    ]
    assert not a.clean
    assert b.drifted == []
    assert b.error == "unreachable: ssh: connect to host b port 22: Connection refused"
    assert not b.clean
