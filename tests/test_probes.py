"""Probes read the node's own tools; here with canned command output."""

from __future__ import annotations

from nodeforge.probes import (
    UNIT_TEXT,
    exec_conditions,
    held_packages,
    package_version,
    runs_hardware_gate,
)
from tests.canned import CannedHost, CannedResult

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


class _UnitFiles:
    """A host whose unit files (the unit and its drop-ins, as unit_text reads them) are `text`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.commands: list[str] = []

    def run(self, command: str, *args: str) -> CannedResult:
        self.commands.append(command % args)
        return CannedResult(0, self.text)


GATE = "ExecCondition=/usr/local/libexec/nodeforge/hardware-gate gpu\n"


def test_gate_read_from_the_unit_and_its_drop_ins() -> None:
    host = _UnitFiles("[Unit]\nDescription=x\n[Service]\nExecStart=/bin/x\n" + GATE)
    assert runs_hardware_gate(host, "x.service", "gpu") is None
    # read from the files: an image that never booted has no systemd to ask
    assert host.commands == [UNIT_TEXT % ("x.service", "x.service", "x.service")]
    assert "systemctl" not in UNIT_TEXT


def test_a_drop_in_that_resets_the_condition_drops_the_gate() -> None:
    text = GATE + "[Service]\nExecCondition=\nExecCondition=-/bin/true\n"
    assert exec_conditions(text) == [["/bin/true"]]
    assert runs_hardware_gate(_UnitFiles(text), "x.service", "gpu") == "/bin/true"


def test_a_unit_without_the_gate_or_with_another_check_is_named() -> None:
    assert runs_hardware_gate(_UnitFiles("[Service]\nExecStart=/bin/x\n"), "x", "gpu") == (
        "no ExecCondition="
    )
    assert runs_hardware_gate(_UnitFiles(GATE), "x", "fabricmanager") == (
        "/usr/local/libexec/nodeforge/hardware-gate gpu"
    )
