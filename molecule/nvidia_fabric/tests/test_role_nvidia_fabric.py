"""What the nvidia_fabric role leaves in a container (image mode, every switch on): the packages
at the stub driver's exact version, pinned (apt) or from the driver's stream (dnf), and held;
the units enabled, not started; and the boot-time gate deciding from a faked sysfs whether each
unit starts or is skipped cleanly. Debian 13 through apt, the AL2023 stand-in through dnf."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodeforge.probes import (
    file_text,
    held_packages,
    package_status,
    package_version,
    uses_rpm,
)

DRIVER = "580.95.05"
GATE = "/usr/local/libexec/nodeforge/hardware-gate"
VERSIONED = ["nvidia-fabricmanager", "libnvsdm", "nvidia-imex", "nvidia-persistenced"]
UNITS = {
    "nvidia-fabricmanager.service": "fabricmanager",
    "nvidia-imex.service": "imex",
    "nvidia-persistenced.service": "gpu",
}
FAKE = "/tmp/nodeforge-fake-sysfs"
# PCI functions as sysfs shows them: (address, vendor, device, class[, vpd]).
TREES: dict[str, list[tuple[str, ...]]] = {
    # HGX H100 (p5): GPUs and NVSwitches on the host's PCI bus
    "hgx-h100": [
        ("0000:53:00.0", "0x10de", "0x2330", "0x030200"),
        ("0000:05:00.0", "0x10de", "0x22a3", "0x068000"),
        ("0000:00:04.0", "0x1d0f", "0x8061", "0x010802"),
    ],
    # HGX B200 (p6-b200): no NVSwitch on PCI, a ConnectX switch management bridge (SW_MNG)
    "hgx-b200": [
        ("0000:1b:00.0", "0x10de", "0x2901", "0x030200"),
        ("0000:73:00.0", "0x15b3", "0x1021", "0x020700", "PN MCX750500B-0D00 V0 SW_MNG"),
    ],
    # GB200 (p6e-gb200): switch trays managed off-host, IMEX on the host
    "gb200": [("0008:06:00.0", "0x10de", "0x2941", "0x030200")],
    # PCIe L40S (g6e): GPUs, no fabric; a ConnectX NIC without the bridge keyword
    "pcie-l40s": [
        ("0000:9e:00.0", "0x10de", "0x26b9", "0x030200"),
        ("0000:a0:00.0", "0x15b3", "0x1021", "0x020000", "PN MCX75310AAS-NEAT V0"),
    ],
    # a builder: no NVIDIA device at all
    "no-gpu": [("0000:00:05.0", "0x1d0f", "0xec20", "0x020000")],
}
# tree -> the checks whose hardware is there (the others must skip)
EXPECTED = {
    "hgx-h100": {"fabricmanager", "gpu"},
    "hgx-b200": {"fabricmanager", "nvlsm", "gpu"},
    "gb200": {"imex", "gpu"},
    "pcie-l40s": {"gpu"},
    "no-gpu": set(),
}


def _text(host: Any, path: str) -> str:
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    return text


def test_packages_at_the_driver_version(host: Any) -> None:
    for package in VERSIONED:
        version = package_version(host, package)
        assert version is not None and version.startswith(f"{DRIVER}-"), (package, version)
        assert package_status(host, package) == "installed", package
    assert package_version(host, "nvlsm") == "2025.06.10-1"
    # NVLSM's companions from the distribution: ibstat, which fabric manager's start script calls
    assert package_status(host, "infiniband-diags") == "installed"
    assert host.run("command -v ibstat").rc == 0


def test_pinned_to_the_exact_version(host: Any) -> None:
    if uses_rpm(host):
        pytest.skip("apt preferences; on dnf the driver's stream and the version locks pin")
    prefs = _text(host, "/etc/apt/preferences.d/nodeforge-10-nvidia-fabric-exact")
    assert f"Pin: version {DRIVER}-*" in prefs
    assert "Pin-Priority: 1001" in prefs
    pinned = next(line for line in prefs.splitlines() if line.startswith("Package:"))
    assert set(pinned.split()[1:]) == set(VERSIONED)
    policy = host.run("apt-cache policy nvidia-fabricmanager")
    assert f"*** {DRIVER}-1 1001" in policy.stdout, policy.stdout
    # the branch pin of the nvidia_repo dependency is there as well
    assert host.file("/etc/apt/preferences.d/nodeforge-90-nvidia-driver-branch").contains(
        "Pin: version 580.*"
    )


def test_from_the_drivers_stream_and_locked_at_its_version(host: Any) -> None:
    if not uses_rpm(host):
        pytest.skip("dnf module streams and version locks")
    enabled = host.run("dnf --quiet module list --enabled nvidia-driver")
    assert "580-open" in enabled.stdout, enabled.stdout + enabled.stderr
    # modular packages: dnf offers them from the enabled stream only, none of branch 575
    offered = host.run("dnf --quiet repoquery --available --queryformat '%{name}-%{version}'")
    assert f"nvidia-fabricmanager-{DRIVER}" in offered.stdout.split()
    assert not [p for p in offered.stdout.split() if "-575." in p], offered.stdout
    locks = host.run("dnf --quiet versionlock list").stdout.split()
    for package in VERSIONED:
        assert [
            lock for lock in locks if lock.startswith(f"{package}-") and f":{DRIVER}-" in lock
        ], (
            package,
            locks,
        )


def test_held(host: Any) -> None:
    assert {*VERSIONED, "nvlsm"} <= held_packages(host)
    # Debian's own package takes its security updates
    assert "infiniband-diags" not in held_packages(host)


def test_ib_umad_loaded_at_boot(host: Any) -> None:
    assert _text(host, "/etc/modules-load.d/nodeforge-nvlsm.conf").splitlines()[-1] == "ib_umad"


def test_units_enabled_not_started(host: Any) -> None:
    for unit in UNITS:
        assert host.run("systemctl is-enabled %s", unit).stdout.strip() == "enabled", unit
        assert host.run("systemctl is-active %s", unit).stdout.strip() == "inactive", unit
        assert host.run("systemctl is-failed %s", unit).stdout.strip() != "failed", unit


def test_every_unit_runs_the_gate(host: Any) -> None:
    gate = host.file(GATE)
    assert gate.is_file and gate.mode == 0o755 and gate.user == "root"
    for unit, check in UNITS.items():
        shown = host.run("systemctl show -p ExecCondition %s", unit).stdout
        assert f"path={GATE} ; argv[]={GATE} {check} " in shown, (unit, shown)


@pytest.fixture(scope="module")
def fake_sysfs(host: Any) -> Iterator[str]:
    script = [f"rm -rf {FAKE}"]
    for tree, devices in TREES.items():
        script.append(f"mkdir -p {FAKE}/{tree}/bus/pci/devices")
        for address, vendor, device, pci_class, *vpd in devices:
            folder = f"{FAKE}/{tree}/bus/pci/devices/{address}"
            script.append(f"mkdir -p {folder}")
            script += [
                f"echo {value} > {folder}/{name}"
                for name, value in (("vendor", vendor), ("device", device), ("class", pci_class))
            ]
            if vpd:
                script.append(f"printf '%s' '{vpd[0]}' > {folder}/vpd")
    made = host.run(" && ".join(script))
    assert made.rc == 0, made.stderr
    yield FAKE
    host.run("systemctl unset-environment NODEFORGE_SYSFS_ROOT")
    host.run("systemctl stop %s", " ".join(UNITS))
    host.run(f"rm -rf {FAKE}")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_gate_decides_from_the_pci_ids(host: Any, fake_sysfs: str, tree: str) -> None:
    for check in ("fabricmanager", "nvlsm", "imex", "gpu"):
        result = host.run("NODEFORGE_SYSFS_ROOT=%s %s %s", f"{fake_sysfs}/{tree}", GATE, check)
        expected = 0 if check in EXPECTED[tree] else 1
        assert result.rc == expected, (tree, check, result.stdout, result.stderr)
        assert ("starting" if expected == 0 else "skipping") in result.stdout


def test_gate_reads_a_root_argument(host: Any, fake_sysfs: str) -> None:
    shown = host.run("%s --sysfs-root %s show", GATE, f"{fake_sysfs}/hgx-h100")
    assert shown.rc == 0
    assert "gpus=1 nvswitches=1 switch_management_bridges=0" in shown.stdout


def test_gate_starts_when_sysfs_cannot_be_read(host: Any) -> None:
    # no answer is no reason to skip fabric manager on a node that may need it
    result = host.run("NODEFORGE_SYSFS_ROOT=/nonexistent %s fabricmanager", GATE)
    assert result.rc == 0 and "cannot read" in result.stdout


def _start(host: Any, root: str, unit: str) -> dict[str, str]:
    host.run("systemctl stop %s", unit)
    host.run("systemctl reset-failed %s", unit)
    env = host.run("systemctl set-environment NODEFORGE_SYSFS_ROOT=%s", root)
    assert env.rc == 0, env.stderr
    started = host.run("systemctl start %s", unit)
    assert started.rc == 0, started.stderr  # a skipped start is a successful one
    shown = host.run("systemctl show -p ActiveState,SubState,Result %s", unit).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def test_fabric_manager_starts_where_nvswitches_are(host: Any, fake_sysfs: str) -> None:
    state = _start(host, f"{fake_sysfs}/hgx-h100", "nvidia-fabricmanager.service")
    assert state["ActiveState"] == "active", state


def test_fabric_manager_skipped_cleanly_without_them(host: Any, fake_sysfs: str) -> None:
    state = _start(host, f"{fake_sysfs}/pcie-l40s", "nvidia-fabricmanager.service")
    assert state["ActiveState"] == "inactive", state
    # systemd's word for a start the ExecCondition declined: skipped, not failed
    assert state["Result"] == "exec-condition", state
    assert host.run("systemctl is-failed nvidia-fabricmanager.service").stdout.strip() != "failed"
    journal = host.run("journalctl -u nvidia-fabricmanager.service -n 20 --no-pager")
    assert "no NVSwitch fabric on this host" in journal.stdout, journal.stdout


def test_imex_and_persistenced_follow_the_gpus(host: Any, fake_sysfs: str) -> None:
    assert _start(host, f"{fake_sysfs}/gb200", "nvidia-imex.service")["ActiveState"] == "active"
    assert (
        _start(host, f"{fake_sysfs}/hgx-h100", "nvidia-imex.service")["ActiveState"] == "inactive"
    )
    assert (
        _start(host, f"{fake_sysfs}/pcie-l40s", "nvidia-persistenced.service")["ActiveState"]
        == "active"
    )
    skipped = _start(host, f"{fake_sysfs}/no-gpu", "nvidia-persistenced.service")
    assert skipped["ActiveState"] == "inactive" and skipped["Result"] == "exec-condition", skipped
