"""Placeholders in catalog text: a closed set, filled without str.format."""

from __future__ import annotations

import pytest

from nodeforge.catalog.placeholders import check_placeholders, fill


def test_known_placeholders_are_filled_and_nothing_else() -> None:
    text = check_placeholders("https://h/{arch}/{deb_arch}/x", {"arch", "deb_arch"})
    assert fill(text, {"arch": "x86_64", "deb_arch": "amd64"}) == "https://h/x86_64/amd64/x"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("https://h/{", "lone '{'"),
        ("https://h/}x", "lone '}'"),
        ("https://h/{{arch}}", "lone '{'"),
        ("https://h/{0}", "unknown placeholder {0}"),
        ("https://h/{arch!r}", "unknown placeholder {arch!r}"),
        ("https://h/{}", "unknown placeholder {}"),
        ("nvidia-fabricmanager-{branch", "lone '{'"),
    ],
)
def test_refused_at_load(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("{", r"\{").replace("}", r"\}")):
        check_placeholders(text, {"arch", "branch"})
