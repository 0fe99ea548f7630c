"""Base layer: kernel, holds, nouveau, limits, time, the hardware fact."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import (
    file_text,
    held_packages,
    local_fact,
    package_status,
    package_version,
    unit_state,
    uses_rpm,
)

pytestmark = pytest.mark.layer("base")


def _kernel_packages(nodeforge: dict[str, Any]) -> list[str]:
    kernel = nodeforge["os"]["arch"]["kernel"]
    return [kernel["image_package"], *kernel["headers_packages"]]


def test_kernel_installed_and_held(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    packages = _kernel_packages(nodeforge)
    record_property("declared", packages)
    record_property("actual", {p: package_version(host, p) for p in packages})
    for package in packages:
        assert package_status(host, package) == "installed", package
    assert set(packages) <= held_packages(host)


def test_headers_for_every_image_kernel(host: Any) -> None:
    releases = host.run("ls /lib/modules").stdout.split()
    assert releases
    # where DKMS builds: /usr/src/linux-headers-<release> (Debian, Ubuntu) or
    # /usr/src/kernels/<release> (AL2023), behind the build link either way
    for release in releases:
        assert host.file(f"/lib/modules/{release}/build/Makefile").is_file, release


def test_nouveau_off(host: Any) -> None:
    text = file_text(host, "/etc/modprobe.d/blacklist-nouveau.conf") or ""
    assert "blacklist nouveau" in text.splitlines()


def test_memlock_unlimited(host: Any) -> None:
    manager = file_text(host, "/etc/systemd/system.conf.d/90-nodeforge.conf") or ""
    assert "DefaultLimitMEMLOCK=infinity" in manager.splitlines()


def test_package_manager_timers_masked(host: Any) -> None:
    timers = (
        ["dnf-makecache.timer"]
        if uses_rpm(host)
        else ["apt-daily.timer", "apt-daily-upgrade.timer"]
    )
    for timer in timers:
        assert unit_state(host, timer) == "masked", timer


def test_chrony_enabled(host: Any) -> None:
    unit = "chronyd.service" if uses_rpm(host) else "chrony.service"
    assert unit_state(host, unit) == "enabled"


def test_hardware_fact_runs(host: Any) -> None:
    fact = local_fact(host, "nodeforge")
    assert set(fact) == {
        "gpu_count",
        "gpu_device_ids",
        "nvswitch_count",
        "switch_management_bridges",
        "efa_count",
        "sysfs_root",
    }


@pytest.mark.gpu
def test_fact_sees_the_profile_gpus(host: Any, nodeforge: dict[str, Any]) -> None:
    fact = local_fact(host, "nodeforge")
    profile = nodeforge["profile"]
    assert fact["gpu_count"] == profile["gpu"]["count"]
    assert set(fact["gpu_device_ids"]) <= set(profile["gpu"]["pci_device_ids"])


@pytest.mark.efa
def test_fact_sees_the_profile_efa(host: Any, nodeforge: dict[str, Any]) -> None:
    assert (
        local_fact(host, "nodeforge")["efa_count"]
        == nodeforge["profile"]["network"]["efa_interfaces"]
    )
