"""nvidia_fabric layer: fabric manager, NVLSM, IMEX and nvidia-persistenced at the driver's exact
version, held, enabled, and behind the boot-time hardware gate; at target stage each service runs
where the profile's hardware is (fabric manager and NVLSM on NVSwitch profiles, IMEX on GB200,
persistenced on every GPU node)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import (
    HARDWARE_GATE,
    held_packages,
    package_status,
    package_version,
    runs_hardware_gate,
    unit_state,
)
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("nvidia_fabric")
NVLSM_PID = "/var/run/nvidia-fabricmanager/nvlsm.pid"
FABRIC_MANAGER = "nvidia-fabricmanager.service"
IMEX = "nvidia-imex.service"
PERSISTENCED = "nvidia-persistenced.service"


def _interconnect(nodeforge: dict[str, Any]) -> dict[str, Any]:
    interconnect: dict[str, Any] = nodeforge["profile"]["interconnect"]
    return interconnect


def _driver_versioned(nodeforge: dict[str, Any]) -> list[str]:
    """The packages that follow the driver's version, by the names the repository derives."""
    names = nodeforge.get("fabric_packages")
    if names is None:
        not_applicable(f"no fabric package names for {nodeforge['os']['name']} (compat.yml)")
    interconnect = _interconnect(nodeforge)
    branch = int(nodeforge["stack"]["driver"]["branch"])
    packages = []
    if interconnect["fabric_manager"]:
        packages.append(names["fabric_manager"])
    if interconnect["nvlsm"] and nodeforge["arch"] == "x86_64" and branch >= 570:
        packages.append("libnvsdm" if branch >= 580 else f"libnvsdm-{branch}")
    if interconnect["imex"]:
        packages.append(names["imex"])
    return packages


def _units(nodeforge: dict[str, Any]) -> dict[str, str]:
    """Each unit the profile needs, with the gate check that decides its start."""
    interconnect = _interconnect(nodeforge)
    units = {PERSISTENCED: "gpu"}
    if interconnect["fabric_manager"]:
        units[FABRIC_MANAGER] = "fabricmanager"
    if interconnect["imex"]:
        units[IMEX] = "imex"
    return units


def test_packages_at_the_driver_version(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    driver = nodeforge["stack"]["driver"]["version"]
    packages = _driver_versioned(nodeforge)
    actual = {package: package_version(host, package) for package in packages}
    record_property("declared", driver)
    record_property("actual", actual)
    for package, version in actual.items():
        assert package_status(host, package) == "installed", package
        assert version is not None and version.startswith(f"{driver}-"), (package, version)


def test_packages_held(host: Any, nodeforge: dict[str, Any]) -> None:
    expected = set(_driver_versioned(nodeforge))
    if _interconnect(nodeforge)["nvlsm"]:
        expected.add("nvlsm")
    missing = expected - held_packages(host)
    assert not missing, f"not held: {sorted(missing)}"


def test_nvlsm_prerequisites(host: Any, nodeforge: dict[str, Any]) -> None:
    if not _interconnect(nodeforge)["nvlsm"]:
        not_applicable(f"{nodeforge['profile']['name']} runs no NVLSM")
    assert package_status(host, "nvlsm") == "installed"
    # fabric manager's start script calls ibstat; NVLSM talks through ib_umad
    assert host.run("command -v ibstat").rc == 0, "ibstat (infiniband-diags) is missing"
    loaded = host.run("cat /etc/modules-load.d/*.conf").stdout.split()
    assert "ib_umad" in loaded


def test_units_enabled_behind_the_gate(host: Any, nodeforge: dict[str, Any]) -> None:
    gate = host.file(HARDWARE_GATE)
    assert gate.is_file and gate.mode & 0o111, f"{HARDWARE_GATE} is missing or not executable"
    for unit, check in _units(nodeforge).items():
        assert unit_state(host, unit) == "enabled", unit
        shown = runs_hardware_gate(host, unit, check)
        assert shown is None, f"{unit} does not run the gate: {shown}"


def test_no_hardware_service_failed(host: Any, nodeforge: dict[str, Any]) -> None:
    # absent hardware skips a unit (condition not met), it never leaves it failed
    for unit in _units(nodeforge):
        assert host.run("systemctl is-failed %s", unit).stdout.strip() != "failed", unit


@pytest.mark.stage("build")
def test_nothing_started_at_build(host: Any, nodeforge: dict[str, Any]) -> None:
    # build mode installs and enables; the node starts them at boot, through the gate
    for unit in _units(nodeforge):
        assert host.run("systemctl is-active %s", unit).stdout.strip() != "active", unit


def _active(host: Any, unit: str, check: str) -> None:
    gate = host.run("%s %s", HARDWARE_GATE, check)
    state = host.run("systemctl is-active %s", unit).stdout.strip()
    assert state == "active", f"{unit} is {state}; the gate said: {gate.stdout.strip()}"


@pytest.mark.nvswitch
@pytest.mark.stage("target")
def test_fabric_manager_active(host: Any, nodeforge: dict[str, Any]) -> None:
    if not _interconnect(nodeforge)["fabric_manager"]:
        not_applicable(f"{nodeforge['profile']['name']} has no host fabric manager")
    _active(host, FABRIC_MANAGER, "fabricmanager")


@pytest.mark.nvswitch
@pytest.mark.stage("target")
def test_nvlsm_running(host: Any, nodeforge: dict[str, Any]) -> None:
    if not _interconnect(nodeforge)["nvlsm"]:
        not_applicable(f"{nodeforge['profile']['name']} runs no NVLSM")
    gate = host.run("%s nvlsm", HARDWARE_GATE)
    assert gate.rc == 0, f"no NVLink 5 switch management bridge seen: {gate.stdout.strip()}"
    # fabric manager's start script launches NVLSM and records its pid
    running = host.run("kill -0 $(cat %s)", NVLSM_PID)
    assert running.rc == 0, f"NVLSM is not running ({NVLSM_PID}): {running.stderr.strip()}"


# GB200 hosts manage no NVSwitch (the switch trays do), so IMEX needs GPUs, not the nvswitch mark.
@pytest.mark.gpu
@pytest.mark.stage("target")
def test_imex_active(host: Any, nodeforge: dict[str, Any]) -> None:
    if not _interconnect(nodeforge)["imex"]:
        not_applicable(f"{nodeforge['profile']['name']} runs no IMEX")
    _active(host, IMEX, "imex")


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_persistenced_active(host: Any) -> None:
    _active(host, PERSISTENCED, "gpu")
    modes = host.run("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").stdout
    assert modes.split() and set(modes.split()) == {"Enabled"}, modes
