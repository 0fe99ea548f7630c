"""What the base role leaves on the node, asked of the node itself: Debian 12 and 13 through
apt, the Amazon Linux 2023 stand-in through dnf."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from nodeforge.probes import (
    file_text,
    held_packages,
    local_fact,
    package_status,
    unit_state,
    uses_rpm,
)


@dataclass(frozen=True)
class Family:
    kernel: tuple[str, ...]
    packages: tuple[str, ...]
    background_units: tuple[str, ...]
    initramfs_listing: str
    """The command that lists the initramfs of kernel {release}."""
    chrony_conf: str
    chrony_sources: str
    chrony_unit: str


APT = Family(
    kernel=("linux-image-cloud-amd64", "linux-headers-cloud-amd64"),
    packages=("chrony", "dkms", "pciutils", "python3-apt"),
    background_units=("apt-daily.timer", "apt-daily-upgrade.timer", "unattended-upgrades.service"),
    initramfs_listing="lsinitramfs /boot/initrd.img-{release}",
    chrony_conf="/etc/chrony/chrony.conf",
    chrony_sources="/etc/chrony/sources.d",
    chrony_unit="chrony.service",
)
# AL2023: kernel6.12 (images/os/al2023.yml), dracut's initramfs, Red Hat's chrony layout.
DNF = Family(
    kernel=("kernel6.12", "kernel6.12-devel", "kernel6.12-headers"),
    packages=("dracut", "pciutils", "python3-dnf-plugin-versionlock"),
    background_units=("dnf-makecache.timer",),
    # lsinitrd finds the image where its dracut writes it (/boot/initramfs-<release>.img on
    # AL2023, Debian's name on the stand-in)
    initramfs_listing="lsinitrd -k {release}",
    chrony_conf="/etc/chrony.conf",
    chrony_sources="/etc/chrony.d",
    chrony_unit="chronyd.service",
)


@pytest.fixture
def family(host: Any) -> Family:
    return DNF if uses_rpm(host) else APT


def _kernels(host: Any) -> list[str]:
    releases: list[str] = host.run("ls /lib/modules").stdout.split()
    assert releases, "no kernel installed in the image"
    return releases


def test_packages_installed(host: Any, family: Family) -> None:
    for package in (*family.packages, *family.kernel):
        assert package_status(host, package) == "installed", package


def test_kernel_held(host: Any, family: Family) -> None:
    assert set(family.kernel) <= held_packages(host)


def test_headers_match_an_installed_kernel(host: Any) -> None:
    # where DKMS looks: /usr/src/linux-headers-<release> on Debian, /usr/src/kernels/<release>
    # on AL2023, both behind the build link
    for release in _kernels(host):
        assert host.file(f"/lib/modules/{release}/build/Makefile").is_file, release


def test_background_units_masked(host: Any, family: Family) -> None:
    for unit in family.background_units:
        assert unit_state(host, unit) == "masked", unit


def test_nouveau_blacklisted_in_the_initramfs(host: Any, family: Family) -> None:
    text = file_text(host, "/etc/modprobe.d/blacklist-nouveau.conf")
    assert text is not None
    assert "blacklist nouveau" in text
    assert "options nouveau modeset=0" in text
    if uses_rpm(host):
        dracut = file_text(host, "/etc/dracut.conf.d/90-nodeforge-nouveau.conf") or ""
        assert 'omit_drivers+=" nouveau "' in dracut
    for release in _kernels(host):
        listing = host.run(family.initramfs_listing.format(release=release))
        assert listing.rc == 0, listing.stderr
        assert "etc/modprobe.d/blacklist-nouveau.conf" in listing.stdout, release


def test_limits(host: Any) -> None:
    limits = file_text(host, "/etc/security/limits.d/90-nodeforge.conf") or ""
    assert "*    hard memlock unlimited" in limits
    assert "*    soft nofile 1048576" in limits
    manager = file_text(host, "/etc/systemd/system.conf.d/90-nodeforge.conf") or ""
    assert "DefaultLimitMEMLOCK=infinity" in manager.splitlines()


def test_sysctl(host: Any) -> None:
    text = file_text(host, "/etc/sysctl.d/90-nodeforge.conf") or ""
    assert "kernel.yama.ptrace_scope = 0" in text.splitlines()


def test_chrony_uses_amazon_time_sync(host: Any, family: Family) -> None:
    text = file_text(host, f"{family.chrony_sources}/amazon-time-sync.sources") or ""
    assert "server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4" in text
    assert unit_state(host, family.chrony_unit) == "enabled"
    # chrony must actually read the sources directory the role writes into
    conf = file_text(host, family.chrony_conf) or ""
    assert f"sourcedir {family.chrony_sources}" in conf.splitlines()


def test_fact_counts_the_faked_p5(host: Any) -> None:
    fact = local_fact(host, "nodeforge")
    assert fact == {
        "efa_count": 32,
        "gpu_count": 8,
        "gpu_device_ids": ["0x2330"],
        "nvswitch_count": 4,
        "switch_management_bridges": 1,
        "sysfs_root": "/opt/fake-sysfs",
    }
