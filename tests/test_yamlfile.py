from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.catalog.yamlfile import MAX_DEPTH, MAX_FILE_BYTES, read_yaml
from nodeforge.errors import InputError


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "entry.yml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_dates_stay_strings_and_lines_are_found(tmp_path: Path) -> None:
    doc = read_yaml(_write(tmp_path, "a: 1\nb:\n  c: [1, 2]\n  d: 2026-01-01\n"))
    assert doc.data == {"a": 1, "b": {"c": [1, 2], "d": "2026-01-01"}}
    assert doc.line_of(("b", "d")) == 4
    assert doc.line_of(("b", "c", 1)) == 3
    assert doc.line_of(("b", "missing")) == 2


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("a: &x [1]\nb: *x\n", "aliases", 2),
        ("a: 1\na: 2\n", "duplicate key 'a'", 2),
        ("a: [1\nb: 2\n", "invalid YAML", 2),
        ("? [1, 2]\n: 3\n", "not a string", 1),
        ("[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), f"deeper than {MAX_DEPTH}", 1),
        ("[" * 5000, "invalid YAML", 1),
    ],
)
def test_refuses_hostile_yaml(tmp_path: Path, text: str, message: str, line: int) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=message) as info:
        read_yaml(path)
    assert info.value.file == path
    assert info.value.line == line


def test_billion_laughs_is_refused(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for n in range(1, 9):
        prev = chr(ord("a") + n - 1)
        cur = chr(ord("a") + n)
        lines.append(f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]")
    with pytest.raises(InputError, match="aliases"):
        read_yaml(_write(tmp_path, "\n".join(lines) + "\n"))


def test_refuses_huge_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: " + "x" * (MAX_FILE_BYTES + 1) + "\n")
    with pytest.raises(InputError, match="larger than") as info:
        read_yaml(path)
    assert info.value.fix is not None


def test_refuses_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not UTF-8"):
        read_yaml(_write(tmp_path, b"a: \xff\xfe\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_yaml(tmp_path / "absent.yml")
