"""What the efa role leaves in a container: the installer run once with the build-mode flags,
its packages installed and held, real libfabric behind /opt/amazon/efa, nothing left over."""

from __future__ import annotations

from typing import Any

from nodeforge.probes import file_text, held_packages, package_status

STUB_LOG = "/var/log/nodeforge-efa-installer-stub.log"
PACKAGES = [
    "libfabric1-aws",
    "libfabric-aws-bin",
    "efa-config",
    "efa-profile",
    "libnccl-ofi",
    "openmpi40-aws",
]


def _text(host: Any, path: str) -> str:
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    return text


def test_installer_ran_once_with_the_container_build_flags(host: Any) -> None:
    # one line: the idempotence converge did not run the installer again
    assert _text(host, STUB_LOG).splitlines() == [
        "--yes --no-verify --skip-kmod --mpi=openmpi4 --check-signatures "
        "--disable-ngc --disable-build-ngc"
    ]


def test_installed_and_held(host: Any) -> None:
    for package in PACKAGES:
        assert package_status(host, package) == "installed", package
    assert set(PACKAGES) <= held_packages(host)
    # no kernel module in a container, no Open MPI 5 unless asked for
    assert package_status(host, "efa") is None
    assert package_status(host, "openmpi50-aws") is None


def test_record_names_the_version(host: Any) -> None:
    record = _text(host, "/opt/amazon/efa_installed_packages")
    assert record.splitlines()[0] == "# EFA installer version: 1.51.0"


def test_real_libfabric_behind_the_efa_prefix(host: Any) -> None:
    # Debian's libfabric answers through the installer's paths: the loader checks of the
    # aws_ofi_nccl and nccl layers run against a real library
    version = host.run("/opt/amazon/efa/bin/fi_info --version")
    assert version.rc == 0, version.stderr
    assert "libfabric:" in version.stdout
    resolved = host.run("ldconfig -p")
    assert "/opt/amazon/efa/lib/libfabric.so.1" in resolved.stdout
    # no EFA device in a container: the provider is not there, as on any builder
    assert host.run("/opt/amazon/efa/bin/fi_info -p efa").rc != 0


def test_plugin_path_published_for_the_loader(host: Any) -> None:
    assert _text(host, "/etc/ld.so.conf.d/100_ofinccl.conf").strip() == "/opt/amazon/ofi-nccl/lib"


def test_no_installer_leftovers(host: Any) -> None:
    assert not host.file("/var/tmp/nodeforge-efa").exists
    assert host.file("/etc/security/limits.d/01_efa.conf").contains("memlock unlimited")
