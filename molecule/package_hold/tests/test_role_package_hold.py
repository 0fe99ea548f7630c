"""What package_hold leaves: the converge's package held at its installed version, the one
prepare held released, on apt (Debian 12) and dnf (the AL2023 stand-in), and what the
`missing` probe answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeforge.probes import held_packages, package_version, uses_rpm


@pytest.fixture
def packages(host: Any) -> tuple[str, str]:
    """(held by the converge, released by it), as molecule.yml's host_vars name them."""
    return ("jq", "rsync") if uses_rpm(host) else ("tar", "gzip")


def test_held(host: Any, packages: tuple[str, str]) -> None:
    assert packages[0] in held_packages(host)


def test_released(host: Any, packages: tuple[str, str]) -> None:
    assert packages[1] not in held_packages(host)
    assert package_version(host, packages[1]) is not None  # released, not removed


def test_locked_at_the_installed_version(host: Any, packages: tuple[str, str]) -> None:
    if not uses_rpm(host):
        pytest.skip("apt-mark hold names no version")
    version = package_version(host, packages[0])
    locks = host.run("dnf --quiet versionlock list").stdout.split()
    assert f"{packages[0]}-0:{version}.*" in locks, locks


def test_missing_names_what_is_absent_or_at_another_version(
    host: Any, packages: tuple[str, str]
) -> None:
    """The `missing` entry point: the installed package, by name and at its own version, is
    found; the same package at another version and an unknown package are missing."""
    answer = json.loads(host.file("/var/tmp/nodeforge-missing.json").content_string)
    assert answer == [f"{packages[0]}=0.0-nodeforge-not-this", "nodeforge-no-such-package"]
