"""container_runtime layer: the engine (containerd or docker from the distribution) enabled with
the nvidia runtime in its configuration; NVIDIA's container toolkit at the stack's exact
version, held; the unit that writes the CDI spec at boot enabled behind the GPU gate. At target
stage the spec is there and names every GPU of the profile.

The expected engine and version come from the stack's `container_runtime` section
(`{engine, toolkit_version}`); a stack without one leaves these checks not run, with that
reason (`nodeforge check` refuses an image that enables the layer on such a stack)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from nodeforge.probes import (
    HARDWARE_GATE,
    file_text,
    held_packages,
    package_status,
    package_version,
    runs_hardware_gate,
    unit_state,
)

pytestmark = pytest.mark.layer("container_runtime")
TOOLKIT = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
ENGINES = {
    "containerd": ("containerd", "containerd.service"),
    "docker": ("docker.io", "docker.service"),
}
SPEC = "/var/run/cdi/nvidia.yaml"
RUNTIME = "/usr/bin/nvidia-container-runtime"


def _runtime(nodeforge: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] | None = nodeforge["stack"].get("container_runtime")
    if section is None:
        pytest.skip(
            f"stack {nodeforge['stack']['name']} has no container_runtime section "
            "(engine, toolkit_version): nothing to compare the node with"
        )
    return section


def _engine(nodeforge: dict[str, Any]) -> tuple[str, str, str]:
    engine = str(_runtime(nodeforge).get("engine", "containerd"))
    package, unit = ENGINES[engine]
    return engine, package, unit


def _cdi_unit(version: str) -> str:
    """NVIDIA's nvidia-cdi-refresh.service from toolkit 1.18 on, the role's own unit before
    (a pre-release such as 1.18.0~rc.1 counts as before), as roles/container_runtime decides."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)(~)?", version)
    assert match, f"toolkit version {version} is not a Debian version"
    release = tuple(int(part) for part in match.groups()[:3])
    if release > (1, 18, 0) or (release == (1, 18, 0) and not match.group(4)):
        return "nvidia-cdi-refresh.service"
    return "nodeforge-nvidia-cdi-generate.service"


def test_toolkit_at_the_stack_version(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    declared = _runtime(nodeforge)["toolkit_version"]
    actual = {package: package_version(host, package) for package in TOOLKIT}
    record_property("declared", declared)
    record_property("actual", actual)
    for package, version in actual.items():
        assert package_status(host, package) == "installed", package
        assert version == declared, (package, version)


def test_toolkit_held(host: Any, nodeforge: dict[str, Any]) -> None:
    _runtime(nodeforge)
    missing = set(TOOLKIT) - held_packages(host)
    assert not missing, f"not held: {sorted(missing)}"


def test_engine_installed_and_enabled(host: Any, nodeforge: dict[str, Any]) -> None:
    engine, package, unit = _engine(nodeforge)
    assert package_status(host, package) == "installed", f"{engine}: {package} is not installed"
    assert unit_state(host, unit) == "enabled", unit


def test_nvidia_runtime_configured(host: Any, nodeforge: dict[str, Any]) -> None:
    engine, _, _ = _engine(nodeforge)
    if engine == "containerd":
        # the effective configuration, however the toolkit split it (drop-in + imports)
        dump = host.run("containerd config dump")
        assert dump.rc == 0, dump.stderr
        assert ".containerd.runtimes.nvidia]" in dump.stdout, "no nvidia runtime in containerd"
        assert f'BinaryName = "{RUNTIME}"' in dump.stdout
        return
    text = file_text(host, "/etc/docker/daemon.json")
    assert text is not None, "/etc/docker/daemon.json is missing"
    runtimes = json.loads(text).get("runtimes", {})
    assert "nvidia" in runtimes, f"no nvidia runtime in daemon.json: {sorted(runtimes)}"


def test_cdi_unit_enabled_behind_the_gate(host: Any, nodeforge: dict[str, Any]) -> None:
    unit = _cdi_unit(_runtime(nodeforge)["toolkit_version"])
    assert unit_state(host, unit) == "enabled", unit
    gate = host.file(HARDWARE_GATE)
    assert gate.is_file and gate.mode & 0o111, f"{HARDWARE_GATE} is missing or not executable"
    shown = runs_hardware_gate(host, unit, "gpu")
    assert shown is None, f"{unit} does not run the GPU gate: {shown}"
    # absent GPUs skip the unit (condition not met), they never leave it failed
    assert host.run("systemctl is-failed %s", unit).stdout.strip() != "failed", unit


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_cdi_spec_names_every_gpu(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    unit = _cdi_unit(_runtime(nodeforge)["toolkit_version"])
    expected = int(nodeforge["profile"]["gpu"]["count"])
    text = file_text(host, SPEC)
    if text is None:
        gate = host.run("%s gpu", HARDWARE_GATE).stdout.strip()
        journal = host.run("journalctl -u %s -b -n 10 --no-pager", unit).stdout
        pytest.fail(f"{SPEC} is missing; gate: {gate}; {unit}: {journal}", pytrace=False)
    spec = yaml.safe_load(text)
    # nvidia-ctk names each full GPU by its index ("0".."7"), besides UUIDs, MIG devices ("0:1")
    # and "all"
    indexes = sorted(
        str(device["name"])
        for device in spec.get("devices", [])
        if str(device.get("name", "")).isdigit()
    )
    record_property("declared", expected)
    record_property("actual", len(indexes))
    assert spec.get("kind") == "nvidia.com/gpu", spec.get("kind")
    assert len(indexes) == expected, f"{SPEC} names GPUs {indexes}; the profile has {expected}"
