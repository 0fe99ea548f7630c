"""`nodeforge lock` against PyPI itself reproduces the shipped locks byte for byte: resolved from
what PyPI held at each lock's `# locked:` time (`--as-of`, pip's --uploaded-prior-to), it picks
the same files. Skipped, with the reason, where PyPI does not answer."""

from __future__ import annotations

import difflib
import urllib.error
import urllib.request
from functools import cache
from pathlib import Path

import pytest

from nodeforge.catalog.loader import load_catalog
from nodeforge.cli import main
from nodeforge.lock import PYPI, read_lock
from tests.conftest import SHIPPED

# One shipped stack, every environment: the blackwell locks come from the same command.
STACK = "hopper-2026.12"


def _locks() -> list[tuple[str, str, Path]]:
    stack = load_catalog(SHIPPED).stacks[STACK]
    assert stack.frameworks is not None
    return [
        (name, arch, SHIPPED / relative)
        for name, environment in stack.frameworks.environments.items()
        for arch, relative in environment.locks.items()
    ]


@cache
def _pypi_unreachable() -> str | None:
    try:
        with urllib.request.urlopen(f"{PYPI}/pip/", timeout=10):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"PyPI ({PYPI}) does not answer here: {exc}"


@pytest.mark.parametrize(("environment", "arch", "path"), _locks(), ids=str)
def test_lock_reproduces_the_shipped_lock(
    environment: str, arch: str, path: Path, tmp_path: Path
) -> None:
    if reason := _pypi_unreachable():
        pytest.skip(reason)
    written = tmp_path / path.name
    as_of = read_lock(path).header.locked
    code = main(
        [
            "lock", STACK, "--environment", environment, "--arch", arch,
            "--as-of", as_of, "-o", str(written),
        ]
    )  # fmt: skip
    assert code == 0
    shipped, again = path.read_text(encoding="utf-8"), written.read_text(encoding="utf-8")
    difference = "\n".join(
        difflib.unified_diff(shipped.splitlines(), again.splitlines(), lineterm="")
    )
    assert again == shipped, f"PyPI as of {as_of} resolves otherwise now:\n{difference}"
