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

# A canary, not a gate: PyPI can change after a lock's time in ways --uploaded-prior-to does not
# filter (a yank is not dated), and then pip resolves that time otherwise; `make test` leaves it
# out and `make canary` runs it.
pytestmark = pytest.mark.upstream

# Every environment of one GPU stack (the blackwell locks come from the same command) and the
# embedded default's.
STACKS = ("hopper-2026.12", "local-debian12")


def _locks() -> list[tuple[str, str, str, Path]]:
    catalog = load_catalog(SHIPPED)
    found: list[tuple[str, str, str, Path]] = []
    for name in STACKS:
        frameworks = catalog.stacks[name].frameworks
        assert frameworks is not None
        found += [
            (name, environment, arch, SHIPPED / relative)
            for environment, entry in frameworks.environments.items()
            for arch, relative in entry.locks.items()
        ]
    return found


@cache
def _pypi_unreachable() -> str | None:
    try:
        with urllib.request.urlopen(f"{PYPI}/pip/", timeout=10):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"PyPI ({PYPI}) does not answer here: {exc}"


@pytest.mark.parametrize(("stack", "environment", "arch", "path"), _locks(), ids=str)
def test_lock_reproduces_the_shipped_lock(
    stack: str, environment: str, arch: str, path: Path, tmp_path: Path
) -> None:
    if reason := _pypi_unreachable():
        pytest.skip(reason)
    written = tmp_path / path.name
    as_of = read_lock(path).header.locked
    code = main(
        [
            "lock", stack, "--environment", environment, "--arch", arch,
            "--as-of", as_of, "-o", str(written),
        ]
    )  # fmt: skip
    assert code == 0
    shipped, again = path.read_text(encoding="utf-8"), written.read_text(encoding="utf-8")
    difference = "\n".join(
        difflib.unified_diff(shipped.splitlines(), again.splitlines(), lineterm="")
    )
    assert again == shipped, f"PyPI as of {as_of} resolves otherwise now:\n{difference}"
