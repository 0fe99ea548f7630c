"""Shared fixtures: the shipped catalog, and writable copies of it to plant bad input in."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeforge.catalog.loader import Catalog, load_catalog

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "images"

Edit = Callable[[str, Callable[[dict[str, Any]], None]], Path]


@pytest.fixture(scope="session")
def shipped() -> Catalog:
    return load_catalog(SHIPPED)


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    """A writable copy of the shipped catalog."""
    target = tmp_path / "images"
    shutil.copytree(SHIPPED, target, ignore=shutil.ignore_patterns("packer"))
    return target


@pytest.fixture
def edit(catalog_dir: Path) -> Edit:
    """Change one catalog file in the copy: edit('stacks/hopper-2026.11.yml', mutate)."""

    def apply(relative: str, mutate: Callable[[dict[str, Any]], None]) -> Path:
        path = catalog_dir / relative
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        mutate(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return apply
