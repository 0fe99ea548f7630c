"""What the gdrcopy role leaves in a container (image mode), on Debian 12 (apt) and the Amazon
Linux 2023 stand-in (dnf): DKMS and the toolchain by the package manager's own names; libgdrapi
and the tools in the prefix, resolvable by the loader at the release's API version; gdrdrv built
and installed through DKMS for the image's kernel, in the family's module folder;
gdrcopy.service enabled, not started, behind a GPU gate that decides from a faked sysfs; the
build record; no build directory. And inputs that must stop the role (a tarball whose sha256
does not match, no NVIDIA driver source) before it changes a thing."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeforge.local.playbook import expect_failure
from nodeforge.probes import file_text, package_status, unit_state, uses_rpm

REPO = Path(__file__).resolve().parents[3]
VERSION = "2.5.1"
API = "2.5"
PREFIX = "/usr/local"
SONAME = "libgdrapi.so.2"
TOOLS = ["copybw", "sanity", "copylat", "apiperf", "pplat"]
UNIT = "gdrcopy.service"
GATE = "/usr/local/libexec/nodeforge/hardware-gate"
LOADER = "/usr/local/libexec/nodeforge/gdrcopy"
TARBALL = f"github.com/NVIDIA/gdrcopy/archive/v{VERSION}.tar.gz"
FAKE = "/tmp/nodeforge-gdrcopy-sysfs"
# PCI functions as sysfs shows them: (address, vendor, device, class).
TREES: dict[str, list[tuple[str, str, str, str]]] = {
    # a sysfs with a PCI bus and nothing on it
    "empty": [],
    # a builder: ENA and NVMe, no NVIDIA device
    "builder": [
        ("0000:00:05.0", "0x1d0f", "0xec20", "0x020000"),
        ("0000:00:04.0", "0x1d0f", "0x8061", "0x010802"),
    ],
    # NVIDIA functions that are no GPU: an NVSwitch (bridge class 0x0680)
    "nvswitch-only": [("0000:05:00.0", "0x10de", "0x22a3", "0x068000")],
    # p5: an H100, a 3D controller (class 0x0302)
    "h100": [
        ("0000:53:00.0", "0x10de", "0x2330", "0x030200"),
        ("0000:05:00.0", "0x10de", "0x22a3", "0x068000"),
    ],
    # g5: an A10G, a VGA controller (class 0x0300)
    "a10g": [("0000:00:1e.0", "0x10de", "0x2237", "0x030000")],
}
GPU_TREES = {"h100", "a10g"}
# What the role asks each package manager for (the tools are built: pkg-config and libcheck too).
PACKAGES = {
    "apt": ("dkms", "build-essential", "pkg-config", "check"),
    "dnf": ("dkms", "gcc", "gcc-c++", "make", "pkgconf-pkg-config", "check-devel"),
}


def _image_kernel(host: Any) -> str:
    kernels: list[str] = host.run("ls -d /lib/modules/*/build").stdout.split()
    assert len(kernels) == 1, kernels
    return kernels[0].split("/")[3]


def test_toolchain_installed_by_the_package_manager(host: Any) -> None:
    # on the stand-in rpm's database knows the dnf names only if the role's dnf installed them
    names = PACKAGES["dnf" if uses_rpm(host) else "apt"]
    missing = [name for name in names if package_status(host, name) != "installed"]
    assert not missing, missing


def test_library_installed_with_upstreams_links(host: Any) -> None:
    lib = f"{PREFIX}/lib"
    assert host.file(f"{lib}/libgdrapi.so.{API}").is_file
    assert host.file(f"{lib}/{SONAME}").linked_to == f"{lib}/libgdrapi.so.{API}"
    assert host.file(f"{lib}/libgdrapi.so").linked_to == f"{lib}/libgdrapi.so.{API}"
    assert host.file(f"{PREFIX}/include/gdrapi.h").contains("GDR_API_MINOR_VERSION")
    soname = host.run("objdump -p %s", f"{lib}/libgdrapi.so.{API}").stdout
    assert re.search(rf"SONAME\s+{re.escape(SONAME)}$", soname, re.M), soname


def test_loader_resolves_the_library(host: Any) -> None:
    cache = host.run("ldconfig -p").stdout
    assert re.search(rf"^\s*{re.escape(SONAME)} \([^)]*\) => {PREFIX}/lib/{SONAME}$", cache, re.M)
    conf = file_text(host, "/etc/ld.so.conf.d/nodeforge-gdrcopy.conf") or ""
    assert f"{PREFIX}/lib" in conf.splitlines()


def test_loaded_library_answers_the_release(host: Any) -> None:
    probe = host.run(
        'python3 -c \'import ctypes; lib = ctypes.CDLL("%s"); a, b = ctypes.c_int(), '
        "ctypes.c_int(); lib.gdr_runtime_get_version(ctypes.byref(a), ctypes.byref(b)); "
        "print(a.value, b.value)'",
        SONAME,
    )
    assert probe.stdout.split() == API.split("."), probe.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_installed_and_resolvable(host: Any, tool: str) -> None:
    binary = host.file(f"{PREFIX}/bin/gdrcopy_{tool}")
    assert binary.is_file and binary.mode == 0o755
    linked = host.run("ldd %s", binary.path)
    assert linked.rc == 0 and "not found" not in linked.stdout, linked.stdout
    assert f"{SONAME} => {PREFIX}/lib/{SONAME}" in linked.stdout


def test_upstreams_short_names(host: Any) -> None:
    for name in ("copybw", "copylat", "apiperf", "sanity"):
        assert host.file(f"{PREFIX}/bin/{name}").linked_to == f"{PREFIX}/bin/gdrcopy_{name}"


def test_sanity_runs_and_stops_without_the_driver(host: Any) -> None:
    run = host.run("gdrcopy_sanity")
    # no gdrdrv in a container: the tool loads libgdrapi, then stops at /dev/gdrdrv
    assert f"libgdrapi {API}" in run.stdout
    assert "/dev/gdrdrv" in run.stderr
    assert run.rc != 0


def test_dkms_built_for_the_image_kernel_not_the_builder(host: Any) -> None:
    kernel = _image_kernel(host)
    assert kernel != host.run("uname -r").stdout.strip()
    status = host.run("dkms status -m gdrdrv -v %s -k %s", VERSION, kernel).stdout
    assert f"gdrdrv/{VERSION}, {kernel}, x86_64: installed" in status
    # one gdrdrv only: no other version registered beside it
    assert host.run("dkms status -m gdrdrv").stdout.strip().splitlines() == [status.strip()]


def test_module_installed_where_dkms_puts_it(host: Any) -> None:
    kernel = _image_kernel(host)
    filename = host.run("modinfo -k %s -F filename gdrdrv", kernel).stdout.strip()
    # dkms picks the folder by distribution family, over dkms.conf's DEST_MODULE_LOCATION: extra
    # on the Red Hat family (the stand-in's os-release says Amazon Linux to Debian's dkms too)
    folder = "extra" if uses_rpm(host) else "updates/dkms"
    assert re.fullmatch(
        rf"/lib/modules/{re.escape(kernel)}/{folder}/gdrdrv\.ko(\.xz|\.zst|\.gz)?", filename
    ), filename
    assert host.file(filename).is_file
    # gdrdrv's MODULE_VERSION is the release's major.minor (gdrdrv.h)
    assert host.run("modinfo -F version %s", filename).stdout.strip() == API


def test_dkms_source_registered_as_the_package_does(host: Any) -> None:
    conf = file_text(host, f"/usr/src/gdrdrv-{VERSION}/dkms.conf") or ""
    assert 'PACKAGE_NAME="gdrdrv"' in conf
    assert f'PACKAGE_VERSION="{VERSION}"' in conf
    assert 'AUTOINSTALL="yes"' in conf
    assert host.file(f"/usr/src/gdrdrv-{VERSION}/gdrdrv.c").is_file


def test_unit_enabled_not_active(host: Any) -> None:
    assert unit_state(host, UNIT) == "enabled"
    assert host.run("systemctl is-active %s", UNIT).stdout.strip() == "inactive"
    assert host.run("systemctl is-failed %s", UNIT).stdout.strip() != "failed"
    assert not host.file("/dev/gdrdrv").exists


def test_unit_runs_the_gate_then_loads_gdrdrv(host: Any) -> None:
    shown = host.run("systemctl show -p ExecCondition -p ExecStart %s", UNIT).stdout
    assert f"path={GATE} ; argv[]={GATE} gpu ;" in shown, shown
    assert f"argv[]={LOADER} start ;" in shown, shown
    gate = host.file(GATE)
    assert gate.is_file and gate.mode == 0o755 and gate.user == "root"
    assert host.file(LOADER).contains("modprobe")


@pytest.fixture(scope="module")
def fake_sysfs(host: Any) -> Iterator[str]:
    script = [f"rm -rf {FAKE}"]
    for tree, devices in TREES.items():
        script.append(f"mkdir -p {FAKE}/{tree}/bus/pci/devices")
        for address, vendor, device, pci_class in devices:
            folder = f"{FAKE}/{tree}/bus/pci/devices/{address}"
            script.append(f"mkdir -p {folder}")
            script += [
                f"echo {value} > {folder}/{name}"
                for name, value in (("vendor", vendor), ("device", device), ("class", pci_class))
            ]
    script.append(f"mkdir -p {FAKE}/nothing")
    made = host.run(" && ".join(script))
    assert made.rc == 0, made.stderr
    yield FAKE
    host.run("systemctl unset-environment NODEFORGE_SYSFS_ROOT")
    host.run(f"rm -rf {FAKE}")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_gate_decides_from_the_pci_ids(host: Any, fake_sysfs: str, tree: str) -> None:
    result = host.run("NODEFORGE_SYSFS_ROOT=%s %s gpu", f"{fake_sysfs}/{tree}", GATE)
    expected = 0 if tree in GPU_TREES else 1
    assert result.rc == expected, (tree, result.stdout, result.stderr)
    assert ("starting" if expected == 0 else "skipping") in result.stdout


def test_gate_starts_when_sysfs_cannot_be_read(host: Any, fake_sysfs: str) -> None:
    # no answer is no reason to skip: the unit then fails loudly where gdrdrv cannot load
    result = host.run("NODEFORGE_SYSFS_ROOT=%s %s gpu", f"{fake_sysfs}/nothing", GATE)
    assert result.rc == 0 and "cannot read" in result.stdout, result.stdout


def test_gate_reads_a_root_argument(host: Any, fake_sysfs: str) -> None:
    assert host.run("%s --sysfs-root %s gpu", GATE, f"{fake_sysfs}/h100").rc == 0
    assert host.run("%s --sysfs-root %s gpu", GATE, f"{fake_sysfs}/builder").rc == 1


def test_start_without_a_gpu_is_skipped_cleanly(host: Any, fake_sysfs: str) -> None:
    # Only the GPU-less start is tried: with a GPU the unit would modprobe into the host's kernel.
    env = host.run("systemctl set-environment NODEFORGE_SYSFS_ROOT=%s", f"{fake_sysfs}/empty")
    assert env.rc == 0, env.stderr
    started = host.run("systemctl start %s", UNIT)
    assert started.rc == 0, started.stderr  # a skipped start is a successful one
    shown = host.run("systemctl show -p ActiveState,Result %s", UNIT).stdout
    state = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    assert state == {"ActiveState": "inactive", "Result": "exec-condition"}, state
    journal = host.run("journalctl -u %s -n 20 --no-pager", UNIT).stdout
    assert "no NVIDIA GPU" in journal, journal
    assert not host.file("/dev/gdrdrv").exists


def test_record_names_what_the_build_used(host: Any) -> None:
    record = json.loads(file_text(host, f"{PREFIX}/share/gdrcopy/nodeforge-build.json") or "{}")
    assert record["version"] == VERSION
    assert record["kernel"] == _image_kernel(host)
    assert record["nvidia_source"] == "/usr/src/nvidia-580.95.05/nvidia"
    assert record["prefix"] == PREFIX
    assert record["tools"] is True
    assert record["cuda_home"] == "/usr/local/cuda"
    served = os.environ.get("NODEFORGE_TEST_MIRROR_SHA256")
    if served:
        assert record["sha256"] == json.loads(served)[TARBALL]
    assert re.fullmatch(r"[0-9a-f]{64}", record["sha256"])


def test_no_build_directory_left(host: Any) -> None:
    assert not host.file("/var/tmp/nodeforge-gdrcopy").exists


def _negative(host: Any, **role_vars: Any) -> str:
    """Run negative.yml against the scenario's container; the role must fail. Its output."""
    mirror = os.environ.get("NODEFORGE_TEST_MIRROR")
    if not mirror:
        pytest.skip("needs the served test mirror (NODEFORGE_TEST_MIRROR)")
    extra = {"gdrcopy_version": VERSION, "gdrcopy_url": f"{mirror}{TARBALL}", **role_vars}
    playbook = Path(__file__).resolve().parents[1] / "negative.yml"
    return expect_failure(playbook, host.backend.name, extra, repo_root=REPO)


def _installed(host: Any) -> dict[str, str]:
    """What a failed run must leave exactly as it was."""
    return {
        "library": host.run("sha256sum %s", f"{PREFIX}/lib/libgdrapi.so.{API}").stdout,
        "record": file_text(host, f"{PREFIX}/share/gdrcopy/nodeforge-build.json") or "",
        "dkms": host.run("dkms status -m gdrdrv").stdout,
        "source": host.run("ls -l --time-style=+%%s /usr/src/gdrdrv-%s", VERSION).stdout,
    }


def test_checksum_mismatch_stops_before_anything_is_unpacked(host: Any) -> None:
    before = _installed(host)
    output = _negative(host, gdrcopy_sha256="0" * 64, gdrcopy_force_reinstall=True)
    assert "did not match" in output and "0" * 64 in output, output
    # the download failed: nothing unpacked, built or removed, and no build directory left
    assert "Build | unpack" not in output
    assert "Build | remove the earlier library" not in output
    assert _installed(host) == before
    assert not host.file("/var/tmp/nodeforge-gdrcopy").exists


def test_missing_nvidia_source_stops_in_preflight(host: Any) -> None:
    before = _installed(host)
    output = _negative(
        host, gdrcopy_nvidia_src_dir="/usr/src/nvidia-0.0", gdrcopy_force_reinstall=True
    )
    assert "nv-p2p.h, and /usr/src/nvidia-0.0 has none" in output, output
    assert "enable the nvidia_driver layer" in output, output
    assert "Packages | DKMS and the toolchain" not in output  # before anything is installed
    assert _installed(host) == before
