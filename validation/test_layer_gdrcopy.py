"""gdrcopy layer: libgdrapi at the stack's release resolvable by the loader, the tools linked
against it, gdrdrv at the stack's version built through DKMS for every kernel of the image,
gdrcopy.service enabled behind its GPU gate; at target stage gdrdrv loaded and /dev/gdrdrv there."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodeforge.probes import HARDWARE_GATE, runs_hardware_gate, unit_state
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("gdrcopy")
UNIT = "gdrcopy.service"
DEVICE = "/dev/gdrdrv"
RUNTIME_VERSION = (
    "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); a, b = ctypes.c_int(), ctypes.c_int(); "
    "lib.gdr_runtime_get_version(ctypes.byref(a), ctypes.byref(b)); print(f'{a.value}.{b.value}')"
)


def _version(nodeforge: dict[str, Any]) -> str:
    gdrcopy = nodeforge["stack"].get("gdrcopy")
    if gdrcopy is None:
        pytest.skip(f"stack {nodeforge['stack']['name']} has no gdrcopy")
    return str(gdrcopy["version"])


def _api(version: str) -> str:
    """A release X.Y.Z is libgdrapi and gdrdrv X.Y (include/gdrapi.h, src/gdrdrv/gdrdrv.h)."""
    return ".".join(version.split(".")[:2])


def _soname(version: str) -> str:
    return f"libgdrapi.so.{version.split('.', maxsplit=1)[0]}"


def _prefix(resolved: dict[str, Any]) -> str:
    return str(resolved.get("gdrcopy_prefix", "/usr/local"))


def _image_kernels(host: Any) -> list[str]:
    """Kernels the image can boot and DKMS builds for: those installed with their headers."""
    found = host.run("ls -d /lib/modules/*/build").stdout.split()
    return [path.split("/")[3] for path in found]


def test_programs_load_the_stacks_libgdrapi(
    host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any], record_property: Any
) -> None:
    version = _version(nodeforge)
    soname = _soname(version)
    probe = host.run("python3 -c %s %s", RUNTIME_VERSION, soname)
    record_property("declared", _api(version))
    record_property("actual", probe.stdout.strip() or probe.stderr.strip())
    assert probe.rc == 0, probe.stderr
    assert probe.stdout.strip() == _api(version)
    cache = host.run("ldconfig -p").stdout
    lib = f"{_prefix(resolved)}/lib/{soname}"
    assert re.search(rf"^\s*{re.escape(soname)} \([^)]*\) => {re.escape(lib)}$", cache, re.M), (
        f"the loader's cache does not resolve {soname} to {lib}"
    )


def test_tools_link_that_library(
    host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any]
) -> None:
    if resolved.get("gdrcopy_tools") is False:
        not_applicable("the image builds no GDRCopy tools (gdrcopy_tools: false)")
    soname = _soname(_version(nodeforge))
    prefix = _prefix(resolved)
    linked = host.run("ldd %s", f"{prefix}/bin/gdrcopy_sanity")
    assert linked.rc == 0, linked.stderr
    assert "not found" not in linked.stdout, linked.stdout
    assert f"{soname} => {prefix}/lib/{soname}" in linked.stdout, linked.stdout


def test_gdrdrv_built_for_every_image_kernel(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    version = _version(nodeforge)
    kernels = _image_kernels(host)
    assert kernels, "no kernel with headers under /lib/modules"
    status = host.run("dkms status -m gdrdrv").stdout
    record_property("declared", dict.fromkeys(kernels, version))
    record_property("actual", status.strip())
    for kernel in kernels:
        assert re.search(
            rf"^gdrdrv(/|, ){re.escape(version)}, {re.escape(kernel)}, [^:]+: installed",
            status,
            re.M,
        ), f"gdrdrv/{version} is not installed for {kernel}: {status.strip()}"
    # one gdrdrv: another registered version would shadow the stack's for some kernel
    registered = set(re.findall(r"^gdrdrv(?:/|, )([^,:]+)", status, re.M))
    assert registered == {version}, f"gdrdrv versions in DKMS: {sorted(registered)}"


def test_unit_enabled_behind_the_gate(host: Any) -> None:
    assert unit_state(host, UNIT) == "enabled"
    gate = host.file(HARDWARE_GATE)
    assert gate.is_file and gate.mode & 0o111, f"{HARDWARE_GATE} is missing or not executable"
    shown = runs_hardware_gate(host, UNIT, "gpu")
    assert shown is None, f"{UNIT} does not run the gate: {shown}"


def test_unit_not_failed(host: Any) -> None:
    # a node without GPUs skips it (condition not met), it never leaves it failed
    assert host.run("systemctl is-failed %s", UNIT).stdout.strip() != "failed"


@pytest.mark.stage("build")
def test_not_started_at_build(host: Any) -> None:
    # build mode installs and enables; the node loads gdrdrv at boot, through the gate
    assert host.run("systemctl is-active %s", UNIT).stdout.strip() != "active"


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_gdrdrv_loaded_and_device_ready(host: Any, nodeforge: dict[str, Any]) -> None:
    version = _version(nodeforge)
    state = host.run("systemctl is-active %s", UNIT).stdout.strip()
    gate = host.run("%s gpu", HARDWARE_GATE).stdout.strip()
    assert state == "active", f"{UNIT} is {state}; the gate said: {gate}"
    device = host.file(DEVICE)
    assert device.exists and device.is_character_device, f"{DEVICE} is missing"
    assert device.mode == 0o666, f"{DEVICE} has mode {device.mode:o}, not 666"
    loaded = host.run("cat /sys/module/gdrdrv/version").stdout.strip()
    assert loaded == _api(version), f"gdrdrv {loaded} is loaded, not {_api(version)}"
