"""Version strings as the NVIDIA, EFA and PyTorch stacks write them, compared numerically.

Driver `580.95.05`, CUDA `12.9.1`, NCCL `2.27.7-1`, compute capability `10.3`: dotted
integers with an optional `-N` package release. No packaging dependency: these are not PEP 440.
"""

from __future__ import annotations

import re
from functools import total_ordering

_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:-(\d+))?$")


@total_ordering
class Version:
    """A dotted numeric version; missing trailing parts compare as zero (12.8 == 12.8.0)."""

    __slots__ = ("parts", "release", "text")

    def __init__(self, text: str) -> None:
        match = _VERSION.match(text)
        if match is None:
            raise ValueError(f"'{text}' is not a dotted numeric version such as 12.9.1 or 2.27.7-1")
        self.text = text
        self.parts = tuple(int(p) for p in match.group(1).split("."))
        self.release = int(match.group(2)) if match.group(2) else 0

    def _key(self, width: int) -> tuple[int, ...]:
        return (*self.parts, *([0] * (width - len(self.parts))), self.release)

    def _pair(self, other: Version) -> tuple[tuple[int, ...], tuple[int, ...]]:
        width = max(len(self.parts), len(other.parts))
        return self._key(width), other._key(width)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        mine, theirs = self._pair(other)
        return mine == theirs

    def __lt__(self, other: Version) -> bool:
        mine, theirs = self._pair(other)
        return mine < theirs

    def __hash__(self) -> int:
        parts = list(self.parts)
        while parts and parts[-1] == 0:
            parts.pop()
        return hash((tuple(parts), self.release))

    def __repr__(self) -> str:
        return f"Version('{self.text}')"

    def __str__(self) -> str:
        return self.text

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def minor(self) -> int:
        return self.parts[1] if len(self.parts) > 1 else 0

    def major_minor(self) -> Version:
        return Version(f"{self.major}.{self.minor}")


def is_version(text: str) -> bool:
    return _VERSION.match(text) is not None
