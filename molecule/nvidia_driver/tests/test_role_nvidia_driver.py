"""The driver the role leaves: pinned, held, built for the image kernel, one version throughout."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import held_packages, package_version

VERSION = "535.261.03"
PACKAGES = [
    "nvidia-open-kernel-dkms",
    "nvidia-kernel-support",
    "nvidia-smi",
    "libcuda1",
    "libnvidia-ml1",
]


def _image_kernel(host: Any) -> str:
    releases: list[str] = host.run("ls /lib/modules").stdout.split()
    assert len(releases) == 1, releases
    return releases[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_pinned_version(host: Any, package: str) -> None:
    version = package_version(host, package)
    assert version is not None
    assert version.startswith(f"{VERSION}-")


def test_all_held(host: Any) -> None:
    assert set(PACKAGES) <= held_packages(host)


def test_dkms_built_for_the_image_kernel_not_the_builder(host: Any) -> None:
    kernel = _image_kernel(host)
    assert kernel != host.run("uname -r").stdout.strip()
    status = host.run("dkms status -m nvidia-current-open -v %s -k %s", VERSION, kernel).stdout
    assert f"nvidia-current-open/{VERSION}, {kernel}, x86_64: installed" in status


def test_module_version(host: Any) -> None:
    module = f"/lib/modules/{_image_kernel(host)}/updates/dkms/nvidia-current-open.ko"
    assert host.run("modinfo -F version %s", module).stdout.strip() == VERSION


def test_proprietary_module_not_built(host: Any) -> None:
    assert host.run("dkms status -m nvidia-current").stdout.strip() == ""


def test_nouveau_still_blacklisted(host: Any) -> None:
    assert host.file("/etc/modprobe.d/blacklist-nouveau.conf").contains("blacklist nouveau")
