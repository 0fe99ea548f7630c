"""What the base role leaves on the node, asked of the node itself."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import file_text, held_packages, local_fact, package_status, unit_state

KERNEL = ["linux-image-cloud-amd64", "linux-headers-cloud-amd64"]


@pytest.mark.parametrize("package", ["chrony", "dkms", "pciutils", "python3-apt", *KERNEL])
def test_packages_installed(host: Any, package: str) -> None:
    assert package_status(host, package) == "installed"


def test_kernel_held(host: Any) -> None:
    assert set(KERNEL) <= held_packages(host)


def test_headers_match_an_installed_kernel(host: Any) -> None:
    kernels = host.run("ls /lib/modules").stdout.split()
    assert kernels, "no kernel installed in the image"
    for release in kernels:
        assert host.file(f"/usr/src/linux-headers-{release}").is_directory, release


@pytest.mark.parametrize(
    "unit", ["apt-daily.timer", "apt-daily-upgrade.timer", "unattended-upgrades.service"]
)
def test_apt_background_units_masked(host: Any, unit: str) -> None:
    assert unit_state(host, unit) == "masked"


def test_nouveau_blacklisted_in_the_initramfs(host: Any) -> None:
    text = file_text(host, "/etc/modprobe.d/blacklist-nouveau.conf")
    assert text is not None
    assert "blacklist nouveau" in text
    assert "options nouveau modeset=0" in text
    listing = host.run("lsinitramfs /boot/initrd.img-$(ls /lib/modules | head -n1)")
    assert listing.rc == 0, listing.stderr
    assert "etc/modprobe.d/blacklist-nouveau.conf" in listing.stdout


def test_limits(host: Any) -> None:
    limits = file_text(host, "/etc/security/limits.d/90-nodeforge.conf") or ""
    assert "*    hard memlock unlimited" in limits
    assert "*    soft nofile 1048576" in limits
    manager = file_text(host, "/etc/systemd/system.conf.d/90-nodeforge.conf") or ""
    assert "DefaultLimitMEMLOCK=infinity" in manager.splitlines()


def test_sysctl(host: Any) -> None:
    text = file_text(host, "/etc/sysctl.d/90-nodeforge.conf") or ""
    assert "kernel.yama.ptrace_scope = 0" in text.splitlines()


def test_chrony_uses_amazon_time_sync(host: Any) -> None:
    text = file_text(host, "/etc/chrony/sources.d/amazon-time-sync.sources") or ""
    assert "server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4" in text
    assert unit_state(host, "chrony.service") == "enabled"
    # chrony must actually read the sources directory the role writes into
    conf = file_text(host, "/etc/chrony/chrony.conf") or ""
    assert "sourcedir /etc/chrony/sources.d" in conf


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
