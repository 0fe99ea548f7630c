"""gpu_health layer: DCGM 4 at the stack's version, held, its host engine enabled behind the GPU
gate; node_exporter enabled with the watcher's textfile folder; the node tools' environment equal
to the lock the repository names; the Xid watcher and the health gate enabled, the gate required
by every gated unit and expecting what the catalog says of each instance type. At target stage
the gate has passed, the watcher runs, and node_exporter serves a healthy node.

Expected values come from the resolved vars: the stack's `dcgm` section, `health_expectations`
and the role inputs `gpu_health_tools_lock` and `gpu_health_gated_units`, never from what the
role wrote on the node."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from nodeforge.node_tools import TOOLS_PREFIX as TOOLS
from nodeforge.probes import (
    file_text,
    held_packages,
    package_status,
    package_version,
    runs_hardware_gate,
    unit_state,
)
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("gpu_health")
DCGM_UNIT = "nvidia-dcgm.service"
WATCHER = "nodeforge-xid-watch.service"
HEALTH_GATE = "nodeforge-health-gate.service"
NODE_EXPORTER = "prometheus-node-exporter.service"
EXPECT = "/etc/nodeforge/health-expect.json"
DEFAULT_GATED = ["slurmd.service", "kubelet.service"]


def _dcgm(nodeforge: dict[str, Any]) -> tuple[str, list[str]]:
    section: dict[str, Any] | None = nodeforge["stack"].get("dcgm")
    if section is None:
        not_applicable(f"stack {nodeforge['stack']['name']} installs no DCGM (no dcgm section)")
    major = str(nodeforge["stack"]["cuda"]["default"]).split(".")[0]
    return str(section["version"]), [
        "datacenter-gpu-manager-4-core",
        f"datacenter-gpu-manager-4-cuda{major}",
    ]


def _installed_set(host: Any) -> dict[str, str]:
    listed = host.run(f"{TOOLS}/bin/python -m pip list --format=json --disable-pip-version-check")
    assert listed.rc == 0, f"the node tools' environment does not answer: {listed.stderr}"
    return {
        re.sub(r"[-_.]+", "-", item["name"]).lower(): item["version"]
        for item in json.loads(listed.stdout)
    }


def test_dcgm_at_the_stack_version_and_held(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    version, packages = _dcgm(nodeforge)
    actual = {package: package_version(host, package) for package in packages}
    record_property("declared", version)
    record_property("actual", actual)
    for package, found in actual.items():
        assert package_status(host, package) == "installed", f"{package} is not installed"
        # NVIDIA's epoch (1:) is the repository's business, the version is the stack's
        assert re.fullmatch(rf"(\d+:)?{re.escape(version)}-\S+", found or ""), (package, found)
    missing = set(packages) - held_packages(host)
    assert not missing, f"not held: {sorted(missing)}"


def test_dcgm_host_engine_enabled_behind_the_gate(host: Any, nodeforge: dict[str, Any]) -> None:
    _dcgm(nodeforge)
    assert unit_state(host, DCGM_UNIT) == "enabled", DCGM_UNIT
    shown = runs_hardware_gate(host, DCGM_UNIT, "gpu")
    assert shown is None, f"{DCGM_UNIT} does not run the GPU gate: {shown}"


def test_node_exporter_enabled_with_the_textfile_folder(host: Any) -> None:
    assert package_status(host, "prometheus-node-exporter") == "installed"
    assert unit_state(host, NODE_EXPORTER) == "enabled", NODE_EXPORTER
    args = file_text(host, "/etc/default/prometheus-node-exporter") or ""
    assert "--collector.textfile.directory=" in args, "node_exporter reads no textfile folder"


def test_node_tools_equal_the_lock(
    host: Any, resolved: dict[str, Any], record_property: Any
) -> None:
    declared: dict[str, str] = resolved["gpu_health_tools_lock"]["requirements"]
    installed = _installed_set(host)
    record_property("declared", declared)
    record_property("actual", installed)
    off = {
        name: f"{installed.get(name) or 'missing'} (lock: {version})"
        for name, version in declared.items()
        if installed.get(name) != version
    }
    assert not off, f"the node tools' environment is not its lock: {off}"
    extra = set(installed) - set(declared) - {"pip", "setuptools"}
    assert not extra, f"the environment holds what the lock does not: {sorted(extra)}"
    answered = host.run(f"{TOOLS}/bin/python {TOOLS}/nodeforge.pyz health-gate --help")
    assert answered.rc == 0, f"nodeforge.pyz does not run: {answered.stderr}"


def test_watcher_and_gate_enabled_before_the_gated_units(
    host: Any, resolved: dict[str, Any]
) -> None:
    for unit in (WATCHER, HEALTH_GATE):
        assert unit_state(host, unit) == "enabled", unit
        shown = runs_hardware_gate(host, unit, "gpu")
        assert shown is None, f"{unit} does not run the GPU gate: {shown}"
    for unit in resolved.get("gpu_health_gated_units", DEFAULT_GATED):
        dropin = file_text(host, f"/etc/systemd/system/{unit}.d/nodeforge-health-gate.conf")
        assert dropin is not None, f"{unit} does not require the gate"
        assert f"Requires={HEALTH_GATE}" in dropin and f"After={HEALTH_GATE}" in dropin, dropin


def test_gate_expects_what_the_catalog_says(host: Any, nodeforge: dict[str, Any]) -> None:
    text = file_text(host, EXPECT)
    assert text is not None, f"{EXPECT} is missing"
    driver = nodeforge["stack"]["driver"]["version"]
    assert json.loads(text) == {
        instance_type: {**expected, "driver_version": driver}
        for instance_type, expected in nodeforge["health_expectations"].items()
    }


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_gate_passed_and_watcher_runs(host: Any) -> None:
    said = host.run("journalctl -u %s -b --no-pager -n 40", HEALTH_GATE).stdout
    assert host.run("systemctl is-active %s", HEALTH_GATE).stdout.strip() == "active", said
    assert host.run("systemctl is-active %s", WATCHER).stdout.strip() == "active", WATCHER


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_node_exporter_serves_a_healthy_node(host: Any) -> None:
    served = host.run(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen("
        '"http://127.0.0.1:9100/metrics", timeout=10).read().decode())\''
    )
    assert served.rc == 0, f"node_exporter does not answer on 9100: {served.stderr}"
    assert "nodeforge_node_health 1" in served.stdout, "the node is not reported healthy"
