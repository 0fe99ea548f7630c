"""EFA installer record and console parsers on real captures (fixtures/outputs/efa/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.parsers import efa_installer

EFA = Path(__file__).parent / "fixtures" / "outputs" / "efa"


def _text(name: str) -> str:
    return (EFA / name).read_text(encoding="utf-8")


def _run(name: str) -> efa_installer.InstallerRun:
    return efa_installer.parse_installer_output(_text(name))


# --- /opt/amazon/efa_installed_packages ------------------------------------------------------


def test_record_1_5_1_debian_file_names() -> None:
    record = efa_installer.parse_installed_packages(
        _text("efa_installed_packages_1.5.1_ubuntu_deb.txt")
    )
    assert record.installer_version == "1.5.1"
    assert record.debug_packages is False
    assert len(record.packages) == 21
    efa = record.package("efa")
    assert efa == efa_installer.InstalledPackage(
        raw="efa_1.3.0-1.amzn1_amd64", name="efa", version="1.3.0-1.amzn1", arch="amd64"
    )
    assert record.names()[-1] == "rdma-core"


def test_record_1_17_2_debian_tilde_versions() -> None:
    record = efa_installer.parse_installed_packages(
        _text("efa_installed_packages_1.17.2_ubuntu_deb_tilde.txt")
    )
    libfabric = record.package("libfabric1-aws")
    assert libfabric is not None and libfabric.version == "1.16.0~amzn3.0"
    config = record.package("efa-config")
    assert config is not None and (config.version, config.arch) == ("1.10", "all")


def test_record_1_22_0_rpm_after_a_cat_prompt() -> None:
    record = efa_installer.parse_installed_packages(
        _text("efa_installed_packages_1.22.0_rhel8_rpm_cat.txt")
    )
    assert record.installer_version == "1.22.0"
    assert len(record.packages) == 16
    assert record.package("libfabric-aws") == efa_installer.InstalledPackage(
        raw="libfabric-aws-1.17.0-1.el8.x86_64",
        name="libfabric-aws",
        version="1.17.0-1.el8",
        arch="x86_64",
    )
    openmpi = record.package("openmpi40-aws")
    assert openmpi is not None and openmpi.version == "4.1.5-1"
    assert record.package("rdma-core-devel") is not None
    assert record.package("efa") is None


def test_record_one_name_per_line_with_debug_packages() -> None:
    record = efa_installer.parse_installed_packages(
        _text("efa_installed_packages_one_per_line.txt")
    )
    assert record.installer_version == "1.51.0"
    assert record.debug_packages is True
    assert record.names() == (
        "efa",
        "libfabric1-aws",
        "libfabric-aws-bin",
        "efa-config",
        "efa-profile",
        "libnccl-ofi",
    )
    assert all(p.version is None for p in record.packages)


def test_record_stops_at_trailing_prompt() -> None:
    text = (
        "# EFA installer version: 1.30.0\n# Packages installed:\nefa_2.6.0-1_amd64\n$ echo done\n"
    )
    record = efa_installer.parse_installed_packages(text)
    assert record.names() == ("efa",)
    assert record.debug_packages is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "efa libfabric1-aws\n",
        _text("efa_installer_1.5.4_alinux2_success.txt"),
    ],
)
def test_record_rejects_other_text(text: str) -> None:
    with pytest.raises(efa_installer.ParseError, match="no '# EFA installer version:' line"):
        efa_installer.parse_installed_packages(text)


# --- efa_installer.sh console output ---------------------------------------------------------


def test_success_1_5_4_with_ping_test() -> None:
    run = _run("efa_installer_1.5.4_alinux2_success.txt")
    assert run.installer_version == "1.5.4"
    assert run.status == "success" and run.succeeded
    assert run.reason is None
    assert run.relogin_required and not run.reboot_required
    assert run.efa_device_detected is True
    assert run.steps == ("Installing EFA dependencies", "Testing EFA device")
    assert run.installed_paths == (
        ("Libfabric", "/opt/amazon/efa"),
        ("Open MPI", "/opt/amazon/openmpi"),
    )


def test_minimal_install_skips_libfabric() -> None:
    run = _run("efa_installer_1.32_minimal_success.txt")
    assert run.status == "success"
    assert run.installed_paths == ()
    assert "libfabric1-aws_1.21.0amzn1.0_amd64" in run.skipped_packages
    assert run.efa_device_detected is None


def test_reboot_needed_when_the_old_module_stays_loaded() -> None:
    run = _run("efa_installer_1.34_reboot_needed.txt")
    assert run.status == "success"
    assert run.reboot_required and not run.relogin_required
    assert run.efa_device_detected is False
    assert run.packages == ("ibacm-52.0-1.amzn2023.x86_64",)
    assert ("Open MPI 5", "/opt/amazon/openmpi5") in run.installed_paths


def test_ping_test_failed_is_not_success() -> None:
    run = _run("efa_installer_1.30_ping_test_failed.txt")
    assert run.status == "test_failed" and not run.succeeded
    assert run.reason == "Error: fi_pingpong test returned 1."
    assert run.skipped_packages == ("efa-config_1.15_all",)


@pytest.mark.parametrize(
    ("name", "version", "reason"),
    [
        (
            "efa_installer_1.20_uninstall_not_installed.txt",
            "1.20.0",
            "Error: EFA is not installed, exiting.",
        ),
        (
            "efa_installer_1.20_unknown_package_wrapped.txt",
            "1.20.0",
            # the terminal wrapped the path; the parser folds the wrap's padding to one space
            "Error: unknown package found: DEBS/UBUNTU2204/aarch64/libfabric-aws-bin_1.16.0_a"
            " rm64.deb",
        ),
        (
            "efa_installer_1.40_buildkit_unknown_package.txt",
            "1.40.0",
            "Error: unknown package found: DEBS/UBUNTU2204/x86_64/debug/rdma-core/*.deb",
        ),
        (
            "efa_installer_1.26_kernel_headers_missing.txt",
            "1.26.1",
            "The kernel header of the current kernel version cannot be installed and is required",
        ),
        ("efa_installer_unsupported_os.txt", "1.24.0", "Unsupported operating system."),
        ("efa_test_pingpong_failed_103.txt", None, "Error: fi_pingpong test returned 103."),
    ],
)
def test_failures_name_their_reason(name: str, version: str | None, reason: str) -> None:
    run = _run(name)
    assert run.status == "failed"
    assert run.installer_version == version
    assert run.reason == reason


def test_packer_ubuntu_kernel_without_ib_uverbs() -> None:
    run = _run("efa_installer_packer_ubuntu1604_kernel_check.txt")
    assert run.status == "failed"
    assert run.reason is not None and run.reason.startswith(
        "Your Ubuntu AMI launches with a kernel"
    )
    assert run.reboot_required
    assert run.steps == (
        "Writing EFA profile.d configuration",
        "Writing /etc/ld.so.conf.d/efa.conf",
        "Kernel version checking",
    )


def test_yum_error_mid_run_is_not_a_failure() -> None:
    run = _run("efa_installer_1.12.1_centos8_in_progress.txt")
    assert run.status == "incomplete"
    assert run.reason is None
    assert run.errors == ("No matching Packages to list",)
    assert run.skipped_packages == ("efa-config", "dkms")
    assert run.packages == ("ibacm-32.1-1.el8.x86_64",)


def test_imagebuilder_stdout_prefix() -> None:
    run = _run("efa_installer_cloudwatch_stdout_prefix.txt")
    assert run.status == "incomplete"
    assert run.steps == ("Installing EFA dependencies",)
    assert run.warnings == (
        "apt does not have a stable CLI interface. Use with caution in scripts.",
    )


def test_uninstall() -> None:
    run = efa_installer.parse_installer_output(
        "= EFA Installer Version: 1.30.0 =\n== Uninstalling EFA packages ==\n\n"
        "EFA uninstall complete.\n"
    )
    assert run.status == "uninstalled"
    assert run.steps == ("Uninstalling EFA packages",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Reading package lists... Done\nE: Unable to locate package foo\n",
        _text("efa_installed_packages_1.22.0_rhel8_rpm_cat.txt"),
    ],
)
def test_console_rejects_other_text(text: str) -> None:
    with pytest.raises(efa_installer.ParseError, match=r"not efa_installer\.sh output"):
        efa_installer.parse_installer_output(text)
