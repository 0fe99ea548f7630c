"""Stand-in release tarballs: reproducible .tar.gz, sha256, optional detached signature."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.mirror.debs import DebSpec, build_deb
from tests.mirror.gpg import SigningKey


@dataclass(frozen=True)
class TarballSpec:
    """A tarball at `path` under the mirror root (upstream host and path, no scheme).

    `files` are archive member paths; a member whose content starts with `#!` is executable.
    `debs` maps an archive folder to stub packages built into it (the EFA installer's DEBS/).
    `signed` publishes a binary detached signature at `<path>.sig`, as AWS does for EFA.
    `deb` makes the file one package instead of a tarball: a release asset such as enroot's
    `enroot_<ver>-1_amd64.deb` (then `files` and `debs` stay empty).
    """

    path: str
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    debs: Mapping[str, tuple[DebSpec, ...]] = field(default_factory=dict)
    signed: bool = False
    deb: DebSpec | None = None


@dataclass(frozen=True)
class BuiltTarball:
    spec: TarballSpec
    file: Path
    sha256: str
    signature: Path | None

    @property
    def path(self) -> str:
        return self.spec.path.strip("/")


def _member(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, mode, kind
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def tar_bytes(files: Mapping[str, str | bytes]) -> bytes:
    """A gzip-compressed tar of `files` whose bytes depend on nothing but `files`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        folders = sorted(
            {str(Path(p).parents[i]) for p in files for i in range(len(Path(p).parts) - 1)}
        )
        for folder in folders:
            tar.addfile(_member(folder + "/", 0, 0o755, tarfile.DIRTYPE))
        for name, content in sorted(files.items()):
            data = content.encode() if isinstance(content, str) else content
            mode = 0o755 if data.startswith(b"#!") else 0o644
            tar.addfile(_member(name, len(data), mode), io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def build_tarball(root: Path, spec: TarballSpec, key: SigningKey) -> BuiltTarball:
    target = root / spec.path.strip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if spec.deb is not None:
        data = _deb_bytes(spec.deb)
    else:
        data = tar_bytes({**spec.files, **_deb_members(spec.debs)})
    target.write_bytes(data)
    signature = None
    if spec.signed:
        signature = key.detach_sign(target, target.with_name(target.name + ".sig"))
    return BuiltTarball(spec, target, hashlib.sha256(data).hexdigest(), signature)


def _deb_bytes(package: DebSpec) -> bytes:
    with tempfile.TemporaryDirectory(prefix="nf-release-deb-") as tmp:
        return build_deb(package, Path(tmp)).read_bytes()


def _deb_members(debs: Mapping[str, tuple[DebSpec, ...]]) -> dict[str, bytes]:
    built: dict[str, bytes] = {}  # by file name: folders share their packages
    members: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="nf-tar-debs-") as tmp:
        for folder, packages in debs.items():
            for package in packages:
                if package.filename not in built:
                    built[package.filename] = build_deb(package, Path(tmp)).read_bytes()
                members[f"{folder}/{package.filename}"] = built[package.filename]
    return members
