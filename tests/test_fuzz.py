"""Hostile catalog input never escapes as a traceback: a one-line error (exit 2) or a verdict."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeforge.cli import main
from tests.conftest import SHIPPED

TARGET_FILES = (
    "profiles/p5.48xlarge.yml",
    "stacks/blackwell-2026.11.yml",
    "os/ubuntu24.04.yml",
    "p6-ubuntu24.04.yml",
    "compat.yml",
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["unknown", "580.95.05", "cu130", "x86_64", "efa", "0x2330", "open"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def fuzz_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "images"
    shutil.copytree(SHIPPED, root)
    return root


def _verdict(catalog: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", "--catalog", str(catalog)])
    _, err = capsys.readouterr()
    return code, err


def _assert_clean(code: int, err: str, relative: str) -> None:
    assert code in (0, 1, 2)
    if code == 2:
        assert err.startswith("nodeforge: error: ")
        assert err.count("\n") == 1, err
        assert Path(relative).name in err or "images" in err


def _with_file(catalog: Path, relative: str, content: bytes) -> Iterator[None]:
    path = catalog / relative
    original = path.read_bytes()
    path.write_bytes(content)
    try:
        yield
    finally:
        path.write_bytes(original)


FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(relative=st.sampled_from(TARGET_FILES), text=st.binary(max_size=300))
def test_random_bytes(
    fuzz_catalog: Path, capsys: pytest.CaptureFixture[str], relative: str, text: bytes
) -> None:
    for _ in _with_file(fuzz_catalog, relative, text):
        code, err = _verdict(fuzz_catalog, capsys)
        _assert_clean(code, err, relative)


@FUZZ
@given(relative=st.sampled_from(TARGET_FILES), data=values)
def test_random_documents(
    fuzz_catalog: Path, capsys: pytest.CaptureFixture[str], relative: str, data: Any
) -> None:
    content = yaml.safe_dump(data).encode()
    for _ in _with_file(fuzz_catalog, relative, content):
        code, err = _verdict(fuzz_catalog, capsys)
        assert code == 2
        _assert_clean(code, err, relative)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*prefix, index))
    return found


@FUZZ
@given(relative=st.sampled_from(TARGET_FILES), choice=st.integers(min_value=0), value=values)
def test_one_field_mutated(
    fuzz_catalog: Path,
    capsys: pytest.CaptureFixture[str],
    relative: str,
    choice: int,
    value: Any,
) -> None:
    """A valid file with one field replaced: the closest thing to a user's typo."""
    data = yaml.safe_load((SHIPPED / relative).read_text())
    paths = _paths(data)
    path = paths[choice % len(paths)]
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    content = yaml.safe_dump(data, sort_keys=False).encode()
    for _ in _with_file(fuzz_catalog, relative, content):
        code, err = _verdict(fuzz_catalog, capsys)
        _assert_clean(code, err, relative)
