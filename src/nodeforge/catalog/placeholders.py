"""`{name}` placeholders in catalog text, from a closed set per field.

Catalog text is never handed to `str.format`: a lone brace or `{0}` would raise there, long
after `check` passed. The validator refuses anything but the field's own placeholders at load,
and `fill` substitutes exactly those.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

_TOKEN = re.compile(r"\{([^{}]*)\}")


def check_placeholders(text: str, allowed: Collection[str]) -> str:
    """`text`, or ValueError naming the stray brace or unknown placeholder and the allowed set."""
    allowed_text = ", ".join("{" + name + "}" for name in sorted(allowed)) or "none"
    for match in _TOKEN.finditer(text):
        if match.group(1) not in allowed:
            raise ValueError(f"unknown placeholder {match.group(0)}; allowed: {allowed_text}")
    stray = next((c for c in _TOKEN.sub("", text) if c in "{}"), None)
    if stray is not None:
        raise ValueError(
            f"a lone '{stray}' (placeholders are written {{name}}); allowed: {allowed_text}"
        )
    return text


def fill(text: str, values: Mapping[str, str]) -> str:
    """`text` with each `{name}` of `values` replaced; the validator has refused any other."""
    return _TOKEN.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def uses(text: str, name: str) -> bool:
    return "{" + name + "}" in text
