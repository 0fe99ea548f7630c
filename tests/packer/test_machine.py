from __future__ import annotations

from pathlib import Path

from nodeforge.packer.machine import Event, Output, parse_line, unescape
from tests.packer.conftest import FIXTURES

SAMPLES = FIXTURES / "machine"


def _read(name: str) -> Output:
    output = Output()
    for line in (SAMPLES / name).read_text().splitlines():
        output.feed(line)
    return output


def test_escapes() -> None:
    assert unescape("a%!(PACKER_COMMA) b\\nc\\r") == "a, b\nc\r"
    assert parse_line("1469940573,,ui,message,    x: priorities%!(PACKER_COMMA) motd\n") == Event(
        1469940573, "", "ui", ("message", "    x: priorities, motd")
    )
    assert parse_line("not machine readable, at all") is None
    assert parse_line("2026/12/02 10:00:00 [INFO] Packer version: 1.14.2") is None


def test_successful_ebs_build() -> None:
    output = _read("build-success-ebs.txt")
    assert output.artifacts == {"ubuntu18-ami": {"us-east-1": "ami-00000000000000000"}}
    assert output.amis == {"us-east-1": "ami-00000000000000000"}
    assert output.error_count == 0
    assert ("say", "==> ubuntu18-ami: No volumes to clean up, skipping") in output.ui
    assert ("say", "\n==> Builds finished. The artifacts of successful builds are:") in output.ui


def test_chroot_build_keeps_commas_inside_messages() -> None:
    output = _read("build-success-chroot.txt")
    assert output.amis == {"us-east-1": "ami-9640d681"}
    assert (
        "message",
        "    amazon-chroot: Loaded plugins: priorities, update-motd, upgrade-helper",
    ) in (output.ui)


def test_multi_region_artifact() -> None:
    assert _read("build-multi-region.txt").amis == {
        "us-east-1": "ami-0a1b2c3d4e5f60718",
        "us-west-2": "ami-0f1e2d3c4b5a69788",
    }


def test_failed_build() -> None:
    output = _read("build-failed.txt")
    assert output.error_count == 1
    assert output.amis == {}
    assert output.build_errors == {
        "amazon-ebs": [
            "Error executing Chef: Non-zero exit status: 1",
            "Error executing Chef: Non-zero exit status: 2",
        ]
    }
    assert output.error_lines() == [
        "amazon-ebs: Error executing Chef: Non-zero exit status: 1",
        "amazon-ebs: Error executing Chef: Non-zero exit status: 2",
    ]


def test_version() -> None:
    assert _read("version.txt").version == "0.2.4"


def test_plain_lines_are_kept_for_errors() -> None:
    output = Output()
    output.feed("panic: runtime error\n")
    output.feed("goroutine 1 [running]:\n")
    assert output.error_lines() == ["panic: runtime error", "goroutine 1 [running]:"]


def test_samples_have_a_source_note() -> None:
    note = (SAMPLES / "SOURCES.md").read_text()
    for sample in sorted(Path(SAMPLES).glob("*.txt")):
        assert f"`{sample.name}`" in note
