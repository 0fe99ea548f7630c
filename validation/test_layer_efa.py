"""EFA layer: the installer version the stack pins, its packages held, libfabric reachable by the
loader; at target stage every EFA interface of the profile seen by the efa provider, with
GPUDirect RDMA (FI_HMEM) possible where the profile requires it."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.parsers.fi_info import NoFabricDataError, parse_fi_info
from nodeforge.probes import file_text, held_packages, package_status
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("efa")
FI_INFO = "/opt/amazon/efa/bin/fi_info"
# What every full (not --minimal) install leaves, by its Debian/Ubuntu package names.
PACKAGES = ["libfabric1-aws", "libfabric-aws-bin", "efa-config", "efa-profile", "libnccl-ofi"]


def test_installer_version_is_the_stacks(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    # The installer's version exists only in its record (as AWS's efa-versions.py reads it);
    # the expected value comes from the repository's resolved vars.
    declared = nodeforge["stack"]["efa"]["installer_version"]
    record = file_text(host, "/opt/amazon/efa_installed_packages") or ""
    actual = record.splitlines()[0].removeprefix("# EFA installer version: ") if record else None
    record_property("declared", declared)
    record_property("actual", actual)
    assert actual == declared


@pytest.mark.stage("build")
def test_packages_installed_and_held(host: Any) -> None:
    for package in PACKAGES:
        assert package_status(host, package) == "installed", package
    assert set(PACKAGES) <= held_packages(host)


def test_libfabric_resolves_through_the_efa_prefix(host: Any) -> None:
    assert "/opt/amazon/efa/lib/libfabric.so.1" in host.run("ldconfig -p").stdout
    version = host.run("%s --version", FI_INFO)
    assert version.rc == 0, version.stderr


@pytest.mark.efa
@pytest.mark.stage("target")
def test_every_efa_interface_seen(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    expected = nodeforge["profile"]["network"]["efa_interfaces"]
    listing = host.run("%s -p efa -t FI_EP_RDM", FI_INFO)
    try:
        devices = parse_fi_info(listing.stdout + listing.stderr).devices("efa")
    except NoFabricDataError:
        devices = ()
    record_property("declared", expected)
    record_property("actual", len(devices))
    assert len(devices) == expected, f"fi_info -p efa sees {list(devices)}"


@pytest.mark.efa
@pytest.mark.stage("target")
def test_gpudirect_rdma_possible(host: Any, nodeforge: dict[str, Any]) -> None:
    if nodeforge["profile"]["network"]["gpudirect_rdma"] != "required":
        not_applicable(f"{nodeforge['profile']['name']} does not require GPUDirect RDMA")
    # FI_HMEM: the provider can register device (CUDA) memory, which is what GDR needs
    listing = host.run("%s -p efa -t FI_EP_RDM -c FI_HMEM", FI_INFO)
    try:
        devices = parse_fi_info(listing.stdout + listing.stderr).devices("efa")
    except NoFabricDataError:
        devices = ()
    assert devices, "no EFA device offers FI_HMEM: GPUDirect RDMA is not possible"
