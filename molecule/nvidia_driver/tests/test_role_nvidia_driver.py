"""The driver the role leaves: pinned, held, built for the image kernel, one version throughout.

Debian 12 carries Debian's own 535 packages, Debian 13 NVIDIA's repository's 580 compute-only
set from the stub mirror, the Amazon Linux 2023 stand-in the same from the stub amzn2023 rpm
repository's 580-open stream, version-locked in dnf (molecule.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from nodeforge.probes import held_packages, package_status, package_version, uses_rpm


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
    "amzn": Driver(
        "580.95.05",
        ("kmod-nvidia-open-dkms", "nvidia-driver-cuda", "nvidia-driver-cuda-libs"),
        "nvidia",
        "kmod-nvidia-latest-dkms",
    ),
}


@pytest.fixture
def driver(host: Any) -> Driver:
    return DRIVERS["amzn" if uses_rpm(host) else host.system_info.codename]


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
    if not uses_rpm(host):
        return
    # locked at the exact epoch:version-release
    locks = host.run("dnf --quiet versionlock list")
    assert locks.rc == 0, locks.stderr
    for package in driver.packages:
        assert f"{package}-3:{driver.version}-1.amzn2023.*" in locks.stdout.split(), locks.stdout


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
    # dkms installs where the distribution family wants it: updates/dkms on Debian, extra on
    # the Red Hat family, Amazon Linux among it (the stand-in's os-release says so to dkms too)
    folder = "extra" if uses_rpm(host) else "updates/dkms"
    assert _modinfo(host, driver, "filename").startswith(
        f"/lib/modules/{_image_kernel(host)}/{folder}/"
    )


def test_open_flavour_only(host: Any, driver: Driver) -> None:
    assert _modinfo(host, driver, "license") == "Dual MIT/GPL"
    assert package_status(host, driver.other_flavour) != "installed"


def test_nouveau_still_blacklisted(host: Any) -> None:
    if uses_rpm(host):
        pytest.skip("the base layer (which blacklists nouveau) has no dnf path yet")
    assert host.file("/etc/modprobe.d/blacklist-nouveau.conf").contains("blacklist nouveau")
