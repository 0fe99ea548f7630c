"""The driver the role leaves: pinned, held, built for the image kernel, one version throughout.

Debian 12 carries Debian's own 535 packages, Debian 13 NVIDIA's repository's 580 compute-only
set from the stub mirror (molecule.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from nodeforge.probes import held_packages, package_version


@dataclass(frozen=True)
class Driver:
    version: str
    packages: tuple[str, ...]
    module: str
    other_flavour: str


DRIVERS = {
    "bookworm": Driver(
        "535.261.03",
        (
            "nvidia-open-kernel-dkms",
            "nvidia-kernel-support",
            "nvidia-smi",
            "libcuda1",
            "libnvidia-ml1",
        ),
        "nvidia-current-open",
        "nvidia-kernel-dkms",
    ),
    "trixie": Driver(
        "580.95.05",
        ("nvidia-kernel-open-dkms", "nvidia-driver-cuda", "libnvidia-ml1"),
        "nvidia",
        "nvidia-kernel-dkms",
    ),
}


@pytest.fixture
def driver(host: Any) -> Driver:
    return DRIVERS[host.system_info.codename]


def _image_kernel(host: Any) -> str:
    releases: list[str] = host.run("ls /lib/modules").stdout.split()
    assert len(releases) == 1, releases
    return releases[0]


def test_pinned_version(host: Any, driver: Driver) -> None:
    for package in driver.packages:
        version = package_version(host, package)
        assert version is not None and version.startswith(f"{driver.version}-"), package


def test_all_held(host: Any, driver: Driver) -> None:
    assert set(driver.packages) <= held_packages(host)


def test_dkms_built_for_the_image_kernel_not_the_builder(host: Any, driver: Driver) -> None:
    kernel = _image_kernel(host)
    assert kernel != host.run("uname -r").stdout.strip()
    status = host.run("dkms status -m %s -v %s -k %s", driver.module, driver.version, kernel)
    assert f"{driver.module}/{driver.version}, {kernel}, x86_64: installed" in status.stdout


def _modinfo(host: Any, driver: Driver, field: str) -> str:
    # by name through the image kernel's modules.dep: Debian 13 compresses modules (.ko.xz)
    found = host.run("modinfo -k %s -F %s %s", _image_kernel(host), field, driver.module)
    assert found.rc == 0, found.stderr
    return str(found.stdout.strip())


def test_module_version(host: Any, driver: Driver) -> None:
    assert _modinfo(host, driver, "version") == driver.version
    assert _modinfo(host, driver, "filename").startswith(
        f"/lib/modules/{_image_kernel(host)}/updates/dkms/"
    )


def test_open_flavour_only(host: Any, driver: Driver) -> None:
    assert _modinfo(host, driver, "license") == "Dual MIT/GPL"
    assert host.package(driver.other_flavour).is_installed is False


def test_nouveau_still_blacklisted(host: Any) -> None:
    assert host.file("/etc/modprobe.d/blacklist-nouveau.conf").contains("blacklist nouveau")
