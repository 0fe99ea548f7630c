"""What moved on a package index since a stack's locks were made.

For every file a lock pins, whether the index still serves it: a file deleted or yanked from
the index no longer installs, so the image no longer builds. For every framework the stack
pins, the newest final release the index lists. The index is the one each environment was
locked against (the rendered `index_urls`), through the mirror when the caller gives one.

Indexes are read as PEP 503 simple pages (what PyPI, devpi and a plain folder served over HTTP
all answer): one page per project, one link per file, the sha256 in the link's fragment and a
yanked file marked `data-yanked`.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Literal

from nodeforge.catalog.compat import Compat
from nodeforge.catalog.models import Stack
from nodeforge.lock import FRAMEWORK_DISTRIBUTIONS, Lock, canonical, index_urls_for
from nodeforge.versions import Version

Fetch = Callable[[str], str | None]
"""GET a URL as text; None when the index has no such page (404)."""

Kind = Literal["gone", "yanked", "unverified", "newer", "unreachable"]
BROKEN: frozenset[Kind] = frozenset({"gone", "yanked", "unverified", "unreachable"})
"""Findings that mean the stack no longer builds from its locks."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    sha256: str | None
    yanked: bool


@dataclass(frozen=True)
class Finding:
    """One pin that moved. PyPI: `environment` is the Python environment, `project` the
    distribution; apt: the layer and the package."""

    kind: Kind
    environment: str
    arch: str
    project: str
    pinned: str
    detail: str
    source: Literal["pypi", "apt"] = "pypi"

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "source": self.source,
            "environment": self.environment,
            "arch": self.arch,
            "project": self.project,
            "pinned": self.pinned,
            "detail": self.detail,
        }


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[IndexFile] = []
        self._href: str | None = None
        self._yanked = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            self._href = found.get("href") or ""
            self._yanked = "data-yanked" in found
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag != "a" or self._href is None:
            return
        _, _, fragment = self._href.partition("#")
        sha256 = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        name = "".join(self._text).strip() or self._href.split("#")[0].rsplit("/", 1)[-1]
        self.files.append(IndexFile(name, sha256, self._yanked))
        self._href = None


def parse_simple_page(text: str) -> list[IndexFile]:
    """The files a PEP 503 project page links."""
    links = _Links()
    links.feed(text)
    return links.files


def _release(filename: str, project: str) -> str | None:
    """The version in a wheel's or sdist's file name (PEP 427 / 625 normalised names)."""
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
    name, _, rest = stem.partition("-")
    if canonical(name) != canonical(project) or not rest:
        return None
    return rest.split("-", 1)[0]


def newest_final(files: Iterable[IndexFile], project: str) -> str | None:
    """The newest release made only of digits and dots (no pre-, post- or dev-release)."""
    releases = set()
    for entry in files:
        version = _release(entry.filename, project)
        if version and not entry.yanked and all(p.isdigit() for p in version.split(".")):
            releases.add(version)
    return max(releases, key=Version) if releases else None


@dataclass(frozen=True)
class LockedEnvironment:
    """One lock of a stack: where it is, the pins it must hold, the indexes it came from."""

    environment: str
    arch: str
    path: Path
    pins: dict[str, str]
    index_urls: tuple[str, ...]


def locked_environments(
    stack: Stack, catalog_root: Path, compat: Compat
) -> list[LockedEnvironment]:
    """Every (environment, arch) lock the stack names."""
    frameworks = stack.frameworks
    if frameworks is None:
        return []
    found = []
    for name, environment in frameworks.environments.items():
        torch = frameworks.torch_of(name)
        # an environment's own torch is the one its serving framework pins: it moves with that
        # framework, so only the framework's newer releases are news
        pins = {
            canonical(FRAMEWORK_DISTRIBUTIONS[f][0]): torch.version
            if f == "pytorch"
            else frameworks.pin(f)
            for f in environment.frameworks
            if not (f == "pytorch" and environment.pytorch is not None)
        }
        indexes = index_urls_for(compat.locked_torch(torch.version, torch.variant))
        for arch, relative in sorted(environment.locks.items()):
            found.append(LockedEnvironment(name, arch, catalog_root / relative, pins, indexes))
    return found


def check_lock_upstream(
    locked: LockedEnvironment,
    lock: Lock,
    fetch: Fetch,
    rewrite: Callable[[str], str] = lambda url: url,
) -> list[Finding]:
    """Each locked file against the environment's indexes; each framework pin against the
    newest final release there."""

    def page(project: str) -> tuple[str, list[IndexFile] | None]:
        listed: list[IndexFile] | None = None
        for index in locked.index_urls:
            text = fetch(f"{rewrite(index).rstrip('/')}/{canonical(project)}/")
            if text is not None:
                listed = (listed or []) + parse_simple_page(text)
        return project, listed

    def finding(kind: Kind, project: str, pinned: str, detail: str) -> Finding:
        return Finding(kind, locked.environment, locked.arch, project, pinned, detail)

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            pages = dict(pool.map(page, [r.name for r in lock.requirements]))
    except (OSError, urllib.error.URLError) as exc:
        indexes = ", ".join(rewrite(i) for i in locked.index_urls)
        return [finding("unreachable", "", "", f"{indexes}: {exc}")]
    findings = []
    for requirement in lock.requirements:
        project = canonical(requirement.name)
        pinned = f"{project}=={requirement.version}"
        listed = pages[requirement.name]
        if listed is None:
            findings.append(finding("gone", project, pinned, "the index has no such project"))
            continue
        served = {f.sha256: f for f in listed if f.sha256}
        matches = [served[h] for h in requirement.hashes if h in served]
        if not matches:
            detail = "no file with a locked sha256 is on the index"
            findings.append(finding("gone", project, pinned, detail))
        elif all(m.yanked for m in matches):
            findings.append(finding("yanked", project, pinned, f"{matches[0].filename} is yanked"))
        wanted = locked.pins.get(project)
        newest = newest_final(listed, project)
        if wanted is not None and newest is not None and Version(newest) > Version(wanted):
            detail = f"{newest} is out (the stack pins {wanted})"
            findings.append(finding("newer", project, pinned, detail))
    return findings
