"""validation/test_image.py's manifest check, against a manifest on this machine (testinfra's
local `host`): the AMI pipeline validates one image on each of its profiles, each time with
that profile's resolved vars."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.render import render, to_json
from nodeforge.target import target_for
from tests.conftest import REPO, Edit

IMAGE = "p5-ubuntu24.04"
PROFILES = ["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]


def _load(name: str) -> ModuleType:
    # by path: validation/ is a pytest rootdir of its own, not a package of the repository
    spec = importlib.util.spec_from_file_location(
        f"nodeforge_validation_{name}", REPO / "validation" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def image_checks(pytestconfig: pytest.Config) -> ModuleType:
    """validation/test_image.py, its markers registered as the suite's conftest does (this
    session runs with --strict-markers)."""
    _load("conftest").pytest_configure(pytestconfig)
    return _load("test_image")


def _resolved(catalog: Catalog, profile: str, manifest: Path) -> dict[str, Any]:
    document = render(catalog, target_for(catalog, IMAGE, profile))
    return {**document, "nodeforge_manifest_path": str(manifest)}


@pytest.fixture
def built_manifest(shipped: Catalog, tmp_path: Path) -> Path:
    """The manifest of an image built with its first profile's vars, as the manifest role
    writes it."""
    path = tmp_path / "manifest.json"
    built = render(shipped, target_for(shipped, IMAGE, PROFILES[0]))
    path.write_text(to_json(built["nodeforge_manifest"]), encoding="utf-8")
    return path


@pytest.mark.parametrize("profile", PROFILES)
def test_the_manifest_passes_on_every_profile(
    image_checks: ModuleType, host: Any, shipped: Catalog, built_manifest: Path, profile: str
) -> None:
    resolved = _resolved(shipped, profile, built_manifest)
    image_checks.test_manifest_equals_the_resolved_vars(host, resolved)


def test_the_manifest_fails_on_a_version_the_repository_moved(
    image_checks: ModuleType, host: Any, built_manifest: Path, edit: Edit, catalog_dir: Path
) -> None:
    edit("stacks/hopper-2026.12.yml", lambda d: d["nccl"].update(version="2.28.3-1"))
    resolved = _resolved(load_catalog(catalog_dir), PROFILES[1], built_manifest)
    with pytest.raises(AssertionError):
        image_checks.test_manifest_equals_the_resolved_vars(host, resolved)
