"""The manifest on the node equals what the repository's catalog renders for the image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodeforge.catalog.loader import load_catalog
from nodeforge.probes import file_text
from nodeforge.render import render
from nodeforge.target import target_for

CATALOG = Path(__file__).resolve().parents[3] / "images"


def test_manifest_equals_the_repository_render(host: Any) -> None:
    text = file_text(host, "/etc/nodeforge/manifest.json")
    assert text is not None
    catalog = load_catalog(CATALOG)
    expected = render(catalog, target_for(catalog, "local-debian13", None))["nodeforge_manifest"]
    assert json.loads(text) == expected


def test_manifest_is_world_readable_root_owned(host: Any) -> None:
    manifest = host.file("/etc/nodeforge/manifest.json")
    assert manifest.user == "root"
    assert manifest.mode == 0o644
