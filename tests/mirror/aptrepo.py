"""Signed apt repositories of stub packages, in upstream's flat or classic `dists/` layout."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Literal

from tests.mirror.debs import DebSpec, build_deb
from tests.mirror.gpg import SigningKey

Layout = Literal["flat", "dists"]
_DIGESTS = (("MD5Sum", "md5"), ("SHA256", "sha256"), ("SHA512", "sha512"))


@dataclass(frozen=True)
class RepoSpec:
    """A repository at `path` under the mirror root (upstream host and path, no scheme).

    flat:  `path/` holds the .debs, Packages(.gz), Release, InRelease, Release.gpg, as in
           NVIDIA's CUDA repo (`deb [signed-by=...] URL /`).
    dists: `path/dists/<suite>/<component>/binary-<arch>/Packages`, debs under `path/pool/`.
    `key_files`: mirror-root-relative paths where the armored public key is published
    (NVIDIA publishes `3bf863cc.pub` beside the flat repo).
    """

    path: str
    packages: tuple[DebSpec, ...]
    layout: Layout = "flat"
    suite: str = "stable"
    component: str = "main"
    architecture: str = "amd64"
    origin: str = "nodeforge test stub"
    label: str = "nodeforge test stub"
    key_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuiltRepo:
    spec: RepoSpec
    directory: Path
    debs: Mapping[str, Path]
    """Package name -> built .deb inside the repository."""

    @property
    def path(self) -> str:
        return self.spec.path.strip("/")

    def apt_source(self, mirror_url: str, keyring: Path) -> str:
        """A one-line sources.list entry for this repository served at `mirror_url`."""
        url = f"{mirror_url.rstrip('/')}/{self.path}/"
        options = f"[arch={self.spec.architecture} signed-by={keyring}]"
        if self.spec.layout == "flat":
            return f"deb {options} {url} /"
        return f"deb {options} {url} {self.spec.suite} {self.spec.component}"


def _scan(directory: Path, subdir: str) -> bytes:
    result = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", subdir, "/dev/null"],
        cwd=directory,
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"dpkg-scanpackages failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


def _release(spec: RepoSpec, indexes: dict[str, bytes]) -> str:
    lines = [f"Origin: {spec.origin}", f"Label: {spec.label}"]
    if spec.layout == "dists":
        lines += [f"Suite: {spec.suite}", f"Codename: {spec.suite}"]
    lines.append(f"Architectures: {spec.architecture}")
    if spec.layout == "dists":
        lines.append(f"Components: {spec.component}")
    lines += [
        f"Date: {format_datetime(datetime.now(UTC), usegmt=True)}",
        "Description: nodeforge test stub repository (throwaway key)",
    ]
    for field_name, algorithm in _DIGESTS:
        lines.append(f"{field_name}:")
        for name, data in sorted(indexes.items()):
            digest = hashlib.new(algorithm, data).hexdigest()
            lines.append(f" {digest} {len(data):>16} {name}")
    return "\n".join(lines) + "\n"


def _sign_release(release_dir: Path, release: str, key: SigningKey) -> None:
    path = release_dir / "Release"
    path.write_text(release, encoding="utf-8")
    key.clearsign(path, release_dir / "InRelease")
    key.detach_sign(path, release_dir / "Release.gpg", armor=True)


def build_repo(root: Path, spec: RepoSpec, key: SigningKey) -> BuiltRepo:
    """Build the debs, index them with dpkg-scanpackages, write and sign the Release files."""
    directory = root / spec.path.strip("/")
    if spec.layout == "flat":
        deb_dir, scan_dir, release_dir, index_prefix = directory, ".", directory, ""
    else:
        deb_dir = directory / "pool" / spec.component
        scan_dir = f"pool/{spec.component}"
        release_dir = directory / "dists" / spec.suite
        index_prefix = f"{spec.component}/binary-{spec.architecture}/"
    debs = {}
    for package in spec.packages:
        where = deb_dir if spec.layout == "flat" else deb_dir / package.name[0] / package.name
        debs[package.name] = build_deb(package, where)
    packages = _scan(directory, scan_dir)
    indexes = {
        f"{index_prefix}Packages": packages,
        f"{index_prefix}Packages.gz": gzip.compress(packages, mtime=0),
    }
    for name, data in indexes.items():
        (release_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (release_dir / name).write_bytes(data)
    _sign_release(release_dir, _release(spec, indexes), key)
    for key_file in spec.key_files:
        key.export(root / key_file, armor=True)
    return BuiltRepo(spec, directory, debs)
