"""Probes read the node's own tools; here with canned command output."""

from __future__ import annotations

from nodeforge.probes import held_packages, package_version
from tests.canned import CannedHost

DEBIAN = "debian"
# the AL2023 stand-in's os-release: ID amzn, ID_LIKE fedora
AMAZON = "amzn fedora"


def test_held_packages_drop_the_architecture() -> None:
    selections = (
        "libcuda1:amd64\t\t\t\t\thold\n"
        "linux-image-cloud-amd64\t\t\t\thold\n"
        "nvidia-smi\t\t\t\t\tinstall\n"
    )
    host = CannedHost({"dpkg --get-selections": selections}, DEBIAN)
    assert held_packages(host) == {"libcuda1", "linux-image-cloud-amd64"}


def test_held_packages_on_dnf_are_the_version_locks() -> None:
    # `dnf versionlock list`: name-[epoch:]version-release.arch glob, one per line
    locks = (
        "nvidia-driver-cuda-3:580.95.05-1.amzn2023.*\n"
        "kmod-nvidia-open-dkms-3:580.95.05-1.amzn2023.*\n"
        "cuda-toolkit-12-9-0:12.9.1-1.*\n"
        "nvlsm-2025.06.10-1.*\n"
    )
    host = CannedHost({"dnf --quiet versionlock list": locks}, AMAZON)
    assert held_packages(host) == {
        "nvidia-driver-cuda",
        "kmod-nvidia-open-dkms",
        "cuda-toolkit-12-9",
        "nvlsm",
    }


def test_package_version_on_rpm_is_version_release() -> None:
    host = CannedHost(
        {
            "rpm --query --queryformat '%{VERSION}-%{RELEASE}' nvidia-imex": "580.95.05-1.amzn2023",
        },
        AMAZON,
    )
    assert package_version(host, "nvidia-imex") == "580.95.05-1.amzn2023"
