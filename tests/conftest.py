"""Shared fixtures: the shipped catalog, and writable copies of it to plant bad input in."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pytest.nodeid import NodeId

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.catalog.models import Artifact, Enroot, Pyxis
from nodeforge.target import Target

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "images"

Edit = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def _minutes_first(item: pytest.Item) -> float:
    mark = item.get_closest_marker("runs_long")
    return -float(mark.args[0]) if mark is not None else 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run `runs_long` tests first, and keep each `xdist_group` on one worker under
    `--dist loadgroup`.

    xdist hands out work in collection order: a 20-minute test collected last would run alone
    at the end while the other workers idle (longest first is the classic fix).

    pytest-xdist 3.8 marks a group by suffixing `item._nodeid` with `@group`, which pytest 9 no
    longer reads (a node's id is the structured `_id`): the group would spread over workers and
    the local-image tests would race each other. Drop this once xdist handles pytest 9's ids.
    """
    items.sort(key=_minutes_first)
    if not config.getoption("loadgroup", False):
        return
    for item in items:
        groups = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if groups:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(groups))}")


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
    """Change one catalog file in the copy: edit('stacks/hopper-2026.12.yml', mutate)."""

    def apply(relative: str, mutate: Callable[[dict[str, Any]], None]) -> Path:
        path = catalog_dir / relative
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        mutate(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return apply


def with_enroot(target: Target) -> Target:
    """`target` with the enroot layer on, its stack given an enroot section (x86_64 packages
    and pyxis) and those artifacts, as a stack that ships enroot would declare them."""
    release = "https://github.com/NVIDIA/enroot/releases/download/v4.2.1"
    artifacts = {
        "enroot_amd64": Artifact(
            url=f"{release}/enroot_4.2.1-1_amd64.deb", sha256="a" * 64, source="test"
        ),
        "enroot_caps_amd64": Artifact(
            url=f"{release}/enroot+caps_4.2.1-1_amd64.deb", sha256="b" * 64, source="test"
        ),
        "pyxis": Artifact(
            url="https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz",
            sha256="c" * 64,
            source="test",
        ),
    }
    enroot = Enroot(
        version="4.2.1",
        packages={"x86_64": ["enroot_amd64", "enroot_caps_amd64"]},
        pyxis=Pyxis(version="0.24.0", artifact="pyxis"),
    )
    stack = target.stack.model_copy(
        update={"enroot": enroot, "artifacts": {**target.stack.artifacts, **artifacts}}
    )
    image = target.image.model_copy(update={"layers": [*target.image.layers, "enroot"]})
    return dataclasses.replace(target, stack=stack, image=image)
