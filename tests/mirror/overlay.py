"""Catalog entries that point a stack and an image at a served mirror, for `nodeforge render`.

The overlay stack `extends` the real one and swaps only what the stubs change: every
repository's signing key fingerprint and every artifact's sha256 and signing key. The URLs stay
upstream's; the overrides file's `mirror:` rewrites them to `<mirror>/<host>/<path>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from nodeforge.catalog.loader import load_catalog
from nodeforge.catalog.models import Stack
from tests.mirror.build import Mirror

SUFFIX = "-mirror"
STUB_SOURCE = "nodeforge test mirror: stub content signed by a throwaway key"
_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_PLACEHOLDERS = {"nvidia_repo": ".+", "arch": "[^/]+", "deb_arch": "[^/]+"}


class MirrorGapError(ValueError):
    """The stack downloads something the mirror does not serve."""


@dataclass(frozen=True)
class Overlay:
    stack: str
    image: str
    stack_file: Path
    image_file: Path
    overrides_file: Path


def _served_path(url: str, fill: Mapping[str, str] | None) -> re.Pattern[str]:
    """A URL with placeholders -> a regex over mirror paths (`<host><path>`).

    Placeholders take their `fill` value when given (one target), else match any value.
    """
    parts = urlsplit(url)
    pattern = re.escape(f"{parts.netloc}{parts.path}")
    for name, regex in _PLACEHOLDERS.items():
        value = re.escape(fill[name]) if fill and name in fill else regex
        pattern = pattern.replace(re.escape(f"{{{name}}}"), value)
    return re.compile(pattern)


def _matches(url: str, paths: set[str], fill: Mapping[str, str] | None = None) -> list[str]:
    regex = _served_path(url, fill)
    return sorted(p for p in paths if regex.fullmatch(p))


def target_placeholders(catalog_dir: Path, image: str) -> dict[str, str]:
    """The URL placeholder values of one image (as nodeforge.render fills them)."""
    catalog = load_catalog(catalog_dir)
    entry = catalog.images[image]
    os_arch = catalog.os[entry.os].architectures.get(entry.arch)
    fill = {"arch": entry.arch, "deb_arch": _DEB_ARCH[entry.arch]}
    if os_arch is not None and os_arch.nvidia_repo is not None:
        fill["nvidia_repo"] = os_arch.nvidia_repo
    return fill


def stack_overrides(
    stack_data: Stack, mirror: Mirror, fill: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(overrides of repositories/artifacts, what the mirror lacks) for a merged stack."""
    repo_paths = {f"{p}/" for p in mirror.repositories}
    key_paths = {k.strip("/") for r in mirror.repositories.values() for k in r.spec.key_files}
    signatures = {f"{p}.sig" for p, t in mirror.tarballs.items() if t.signature is not None}
    published_keys = key_paths | {k.strip("/") for k in mirror.key_files}
    gaps: list[str] = []
    repositories: dict[str, Any] = {}
    for name, repo in stack_data.repositories.items():
        if not _matches(repo.url, repo_paths, fill):
            gaps.append(f"repositories.{name}: {repo.url}")
        elif not _matches(repo.key_url, key_paths, fill):
            gaps.append(f"repositories.{name}.key_url: {repo.key_url}")
        else:
            repositories[name] = {"gpg_fingerprint": mirror.fingerprint, "source": STUB_SOURCE}
    artifacts: dict[str, Any] = {}
    for name, artifact in stack_data.artifacts.items():
        found = {
            mirror.tarballs[p].sha256 for p in _matches(artifact.url, set(mirror.tarballs), fill)
        }
        if len(found) != 1:
            what = "no file" if not found else "files with different sha256"
            gaps.append(f"artifacts.{name}: {artifact.url} ({what} in the mirror)")
            continue
        entry: dict[str, Any] = {"sha256": found.pop(), "source": STUB_SOURCE}
        signed = artifact.signature_url is not None or artifact.gpg_fingerprint is not None
        if signed:
            if artifact.signature_url is None or not _matches(
                artifact.signature_url, signatures, fill
            ):
                gaps.append(f"artifacts.{name}.signature_url: {artifact.signature_url}")
                continue
            if artifact.key_url is None or not _matches(artifact.key_url, published_keys, fill):
                gaps.append(f"artifacts.{name}.key_url: {artifact.key_url}")
                continue
            entry["gpg_fingerprint"] = mirror.fingerprint
        artifacts[name] = entry
    return {"repositories": repositories, "artifacts": artifacts}, gaps


def _dump(path: Path, data: dict[str, Any]) -> Path:
    header = "# nodeforge test mirror overlay: stub keys and checksums. Never ship this file.\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_stack_overlay(
    catalog_dir: Path,
    stack: str,
    mirror: Mirror,
    *,
    placeholders: Mapping[str, str] | None = None,
    allow_gaps: bool = False,
) -> Path:
    """Write `stacks/<stack>-mirror.yml`; MirrorGapError if the stack needs what is not served.

    `placeholders` (see `target_placeholders`) checks coverage for one target; without them a
    URL such as `.../repos/{nvidia_repo}/` counts as served when any mirror repo fits it.
    """
    catalog = load_catalog(catalog_dir)
    overrides, gaps = stack_overrides(catalog.stacks[stack], mirror, placeholders)
    if gaps and not allow_gaps:
        raise MirrorGapError(f"the mirror does not serve, for stack {stack}: " + "; ".join(gaps))
    name = f"{stack}{SUFFIX}"
    data = {
        "name": name,
        "description": f"{stack} served by the nodeforge test mirror (stub packages, stub key)",
        "extends": stack,
        **overrides,
    }
    return _dump(catalog_dir / "stacks" / f"{name}.yml", data)


def write_image_overlay(catalog_dir: Path, image: str, stack: str) -> Path:
    """Write `<image>-mirror.yml`: the image, built from `stack` (normally an overlay stack)."""
    name = f"{image}{SUFFIX}"
    data = {
        "name": name,
        "description": f"{image} with stack {stack} (nodeforge test mirror)",
        "extends": image,
        "stack": stack,
    }
    return _dump(catalog_dir / f"{name}.yml", data)


def write_overrides(path: Path, mirror_url: str) -> Path:
    """The `nodeforge render --vars` file that points every download at the mirror."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return _dump(path, {"mirror": mirror_url})


def write_overlay(
    catalog_dir: Path, image: str, mirror: Mirror, overrides_file: Path | None = None
) -> Overlay:
    """Stack overlay for the image's stack, image overlay, overrides file (outside the catalog)."""
    if mirror.url is None:
        raise RuntimeError("serve the mirror first: the overrides file needs its URL")
    stack = load_catalog(catalog_dir).images[image].stack
    fill = target_placeholders(catalog_dir, image)
    stack_file = write_stack_overlay(catalog_dir, stack, mirror, placeholders=fill)
    image_file = write_image_overlay(catalog_dir, image, f"{stack}{SUFFIX}")
    overrides = overrides_file or catalog_dir.parent / f"{image}{SUFFIX}-vars.yml"
    if overrides.resolve().parent == catalog_dir.resolve():
        raise ValueError("the overrides file must not sit in the catalog folder (it is no image)")
    write_overrides(overrides, mirror.url)
    return Overlay(f"{stack}{SUFFIX}", f"{image}{SUFFIX}", stack_file, image_file, overrides)
