from __future__ import annotations

import pytest

from nodeforge.versions import Version, is_version


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("12.8", "12.9.1"),
        ("12.9.1", "13.0"),
        ("2.27.7-1", "2.27.7-2"),
        ("2.27.7", "2.27.7-1"),
        ("580.95.05", "580.126.09"),
        ("9.0", "10.0"),
        ("10.0", "10.3"),
    ],
)
def test_order(low: str, high: str) -> None:
    assert Version(low) < Version(high)
    assert Version(high) > Version(low)


def test_trailing_zeros_are_equal() -> None:
    assert Version("12.8") == Version("12.8.0")
    assert hash(Version("12.8")) == hash(Version("12.8.0"))


def test_parts() -> None:
    version = Version("12.9.1")
    assert (version.major, version.minor) == (12, 9)
    assert version.major_minor() == Version("12.9")


@pytest.mark.parametrize("text", ["", "latest", "12.x", "v1.2", "1..2", "2.27.7-1+cuda12.9"])
def test_rejects_non_versions(text: str) -> None:
    assert not is_version(text)
    with pytest.raises(ValueError, match="dotted numeric version"):
        Version(text)
