"""nvidia_driver layer at build stage: every driver-versioned package at the stack's version and
held, and the kernel module built through DKMS, at that version, for every kernel the image
boots. The target stage (nvidia-smi against the profile) is validation/test_gpu.py.

The packages are found by their version, not by a list of names: the names differ by source,
OS and branch (the role's vars/main.yml), the version never does."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodeforge.probes import held_packages, uses_rpm

pytestmark = [pytest.mark.layer("nvidia_driver"), pytest.mark.stage("build")]
# `dkms status` lines: "nvidia/580.95.05, 6.8.0-1021-aws, x86_64: installed" (dkms 3), with
# an optional "(WARNING ...)" tail.
DKMS_LINE = re.compile(
    r"^(?P<module>[^/\s]+)/(?P<version>[^,\s]+), (?P<kernel>[^,\s]+), \S+: (?P<state>\w+)"
)


# Debian builds these from source packages of their own, versioned apart from the driver (Debian
# 12: nvidia-modprobe 535.161.07 beside driver 535.261.03); NVIDIA's repositories version them
# with the driver.
DISTRO_OWN_VERSIONS = frozenset(
    {"nvidia-modprobe", "nvidia-persistenced", "nvidia-settings", "nvidia-xconfig"}
)


def _driver(nodeforge: dict[str, Any]) -> tuple[str, str]:
    driver = nodeforge["stack"]["driver"]
    return str(driver["branch"]), str(driver["version"])


def _branch_packages(host: Any, branch: str) -> dict[str, str]:
    """Installed packages whose version is on the driver's branch (NVIDIA's numbering); rpm's
    version-release stands where dpkg's version does."""
    listed = host.run(
        "rpm --query --all --queryformat '%{NAME} %{VERSION}-%{RELEASE} installed\\n'"
        if uses_rpm(host)
        else "dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Status}\\n'"
    )
    found = {}
    for line in listed.stdout.splitlines():
        name, version, status = [*line.split(" "), "", ""][:3]
        if status == "installed" and version.startswith(f"{branch}."):
            found[name] = version
    return found


def test_every_driver_package_at_the_stacks_version_and_held(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    branch, version = _driver(nodeforge)
    packages = _branch_packages(host, branch)
    if nodeforge["stack"]["driver"].get("source") == "distro":
        packages = {n: v for n, v in packages.items() if n not in DISTRO_OWN_VERSIONS}
    record_property("declared", version)
    record_property("actual", packages)
    assert packages, f"no package of driver branch {branch} is installed"
    off = {name: v for name, v in packages.items() if not v.startswith(f"{version}-")}
    assert off == {}, f"not at {version}: {off}"
    assert set(packages) <= held_packages(host)


def test_module_built_for_every_image_kernel(host: Any, nodeforge: dict[str, Any]) -> None:
    _, version = _driver(nodeforge)
    kernels = host.run("ls /lib/modules").stdout.split()
    status = host.run("dkms status")
    assert status.rc == 0, status.stderr
    built = {
        match["kernel"]
        for line in status.stdout.splitlines()
        if (match := DKMS_LINE.match(line))
        and match["version"] == version
        and match["state"] == "installed"
    }
    assert kernels and set(kernels) <= built, f"dkms status: {status.stdout.strip()}"
