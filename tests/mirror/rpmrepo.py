"""Signed dnf repositories of stub rpms, with module streams, in the layout of NVIDIA's
`compute/cuda/repos/amzn2023/x86_64/`: the rpms beside `repodata/` (createrepo_c), a modules
document added as NVIDIA's repositories carry one (modifyrepo_c --mdtype=modules), every rpm
signed (rpmsign) and `repodata/repomd.xml.asc` beside the index, by the mirror's throwaway key,
which is published where NVIDIA publishes its own (`D42D0685.pub`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.mirror.gpg import SigningKey

STUB_PACKAGER = "nodeforge test stub <stub@nodeforge.invalid>"


@dataclass(frozen=True)
class RpmSpec:
    """One stub rpm. A file whose content starts with `#!` is installed executable (0755).

    `links` maps a symlink path to its target, e.g. a library's soname to the real file.
    `scripts` holds scriptlets by rpm section name (post, preun, postun), run by /bin/sh.
    """

    name: str
    version: str
    release: str = "1"
    epoch: int | None = None
    arch: str = "x86_64"
    summary: str = ""
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    scripts: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    @property
    def nevra(self) -> str:
        """name-epoch:version-release.arch, as a modules document lists its artifacts."""
        return f"{self.name}-{self.epoch or 0}:{self.version}-{self.release}.{self.arch}"


@dataclass(frozen=True)
class ModuleStream:
    """One stream of a modulemd v2 document: dnf offers its artifacts only while it is
    enabled (modular filtering), as NVIDIA's `nvidia-driver:580-open` does."""

    name: str
    stream: str
    packages: tuple[RpmSpec, ...]
    profiles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    version: int = 20251009011129
    context: str = "f132e617"
    arch: str = "x86_64"

    def document(self) -> dict[str, object]:
        return {
            "document": "modulemd",
            "version": 2,
            "data": {
                "name": self.name,
                "stream": self.stream,
                "version": self.version,
                "context": self.context,
                "arch": self.arch,
                "summary": f"{self.name} {self.stream} (nodeforge test stub)",
                "description": "nodeforge test stub stream",
                "license": {"module": ["MIT"]},
                "profiles": {
                    name: {"rpms": list(rpms)} for name, rpms in sorted(self.profiles.items())
                },
                "artifacts": {"rpms": sorted(p.nevra for p in self.packages)},
            },
        }


@dataclass(frozen=True)
class RpmRepoSpec:
    """A repository at `path` under the mirror root (upstream host and path, no scheme).

    `packages` outside any stream are always offered; a stream's packages only while it is
    enabled. `key_files`: mirror-root-relative paths that publish the armored public key."""

    path: str
    packages: tuple[RpmSpec, ...] = ()
    modules: tuple[ModuleStream, ...] = ()
    key_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuiltRpmRepo:
    spec: RpmRepoSpec
    directory: Path

    @property
    def path(self) -> str:
        return self.spec.path.strip("/")


def _spec_file(package: RpmSpec, staging: Path) -> str:
    lines = [
        f"Name: {package.name}",
        f"Version: {package.version}",
        f"Release: {package.release}",
        f"Summary: {package.summary or package.name} (nodeforge test stub)",
        "License: nodeforge test stub",
        f"Packager: {STUB_PACKAGER}",
        f"BuildArch: {package.arch}",
        "AutoReqProv: no",
    ]
    lines += [f"Epoch: {package.epoch}"] if package.epoch is not None else []
    lines += [f"Requires: {r}" for r in package.requires]
    lines += [f"Provides: {p}" for p in package.provides]
    lines += [
        "%description",
        "nodeforge test stub: carries the upstream package's name, version and file layout,",
        "none of its function. Never install outside a test.",
        "%install",
        "mkdir -p %{buildroot}",
        f"cp -a {staging}/. %{{buildroot}}/",
        "%files",
        *sorted([*package.files, *package.links]),
    ]
    for section, body in sorted(package.scripts.items()):
        lines += [f"%{section}", body.rstrip()]
    return "\n".join(lines) + "\n"


def build_rpm(package: RpmSpec, out_dir: Path, key: SigningKey) -> Path:
    """Build and sign `package` into `out_dir/<filename>`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nf-rpm-") as tmp:
        top, staging = Path(tmp) / "top", Path(tmp) / "staging"
        staging.mkdir()
        for path, content in package.files.items():
            target = staging / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            target.write_bytes(data)
            target.chmod(0o755 if data.startswith(b"#!") else 0o644)
        for link, link_target in package.links.items():
            where = staging / link.lstrip("/")
            where.parent.mkdir(parents=True, exist_ok=True)
            where.symlink_to(link_target)
        spec_path = Path(tmp) / f"{package.name}.spec"
        spec_path.write_text(_spec_file(package, staging), encoding="utf-8")
        _run(
            "rpmbuild",
            "--define",
            f"_topdir {top}",
            "--target",
            package.arch,
            "-bb",
            str(spec_path),
        )
        built = top / "RPMS" / package.arch / package.filename
        _run(
            "rpmsign",
            "--addsign",
            "--define",
            "__gpg /usr/bin/gpg",
            "--define",
            f"_gpg_path {key.home}",
            "--define",
            f"_gpg_name {key.fingerprint}",
            "--define",
            "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase-file /dev/null",
            str(built),
        )
        return Path(shutil.copy2(built, out_dir / package.filename))


def build_rpm_repo(root: Path, spec: RpmRepoSpec, key: SigningKey) -> BuiltRpmRepo:
    directory = root / spec.path.strip("/")
    # A stream shares most packages with its branch's other stream: each file is built once.
    packages = {p.filename: p for p in spec.packages}
    packages |= {p.filename: p for stream in spec.modules for p in stream.packages}
    for package in packages.values():
        build_rpm(package, directory, key)
    _run("createrepo_c", "--quiet", "--simple-md-filenames", str(directory))
    if spec.modules:
        with tempfile.TemporaryDirectory(prefix="nf-modules-") as tmp:
            modules = Path(tmp) / "modules.yaml"
            modules.write_text(
                yaml.safe_dump_all([m.document() for m in spec.modules], sort_keys=False),
                encoding="utf-8",
            )
            _run(
                "modifyrepo_c",
                "--mdtype=modules",
                "--simple-md-filenames",
                str(modules),
                str(directory / "repodata"),
            )
    repomd = directory / "repodata" / "repomd.xml"
    key.detach_sign(repomd, repomd.with_name("repomd.xml.asc"), armor=True)
    for published in spec.key_files:
        key.export(root / published.strip("/"), armor=True)
    return BuiltRpmRepo(spec, directory)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {result.stderr or result.stdout}")
