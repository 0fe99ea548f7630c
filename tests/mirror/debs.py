"""Stub .deb packages with upstream names, versions and file layout, built by dpkg-deb."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

STUB_MAINTAINER = "nodeforge test stub <stub@nodeforge.invalid>"
MAINTAINER_SCRIPTS = frozenset({"preinst", "postinst", "prerm", "postrm"})


@dataclass(frozen=True)
class DebSpec:
    """One stub package. A file whose content starts with `#!` is installed executable (0755).

    `links` maps a symlink path to its target, e.g. a library's soname to the real file.
    `scripts` holds maintainer scripts by name (preinst, postinst, prerm, postrm).
    """

    name: str
    version: str
    architecture: str = "amd64"
    summary: str = ""
    depends: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    section: str = "misc"
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    scripts: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """Debian's pool name, the epoch dropped: name_version_arch.deb."""
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"

    def control(self) -> str:
        summary = self.summary or self.name
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            f"Maintainer: {STUB_MAINTAINER}",
            f"Section: {self.section}",
            "Priority: optional",
        ]
        if self.depends:
            lines.append(f"Depends: {', '.join(self.depends)}")
        if self.recommends:
            lines.append(f"Recommends: {', '.join(self.recommends)}")
        if self.provides:
            lines.append(f"Provides: {', '.join(self.provides)}")
        lines += [
            f"Description: {summary} (nodeforge test stub)",
            " nodeforge test stub: carries the upstream package's name, version and file",
            " layout, none of its function. Never install outside a test.",
        ]
        return "\n".join(lines) + "\n"


def _write(path: Path, content: str | bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)


def _is_script(content: str | bytes) -> bool:
    return (content.encode() if isinstance(content, str) else content).startswith(b"#!")


def build_deb(spec: DebSpec, out_dir: Path) -> Path:
    """Build `spec` into `out_dir/<filename>`: files owned by root, gzip-compressed."""
    unknown = set(spec.scripts) - MAINTAINER_SCRIPTS
    if unknown:
        raise ValueError(f"{spec.name}: unknown maintainer script {sorted(unknown)[0]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / spec.filename
    with tempfile.TemporaryDirectory(prefix="nf-deb-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir(mode=0o755)
        for path, content in spec.files.items():
            _write(tree / path.lstrip("/"), content, 0o755 if _is_script(content) else 0o644)
        for link, link_target in spec.links.items():
            where = tree / link.lstrip("/")
            where.parent.mkdir(parents=True, exist_ok=True)
            where.symlink_to(link_target)
        _write(tree / "DEBIAN" / "control", spec.control(), 0o644)
        for name, script in spec.scripts.items():
            _write(tree / "DEBIAN" / name, script, 0o755)
        for folder in [tree, *(p for p in tree.rglob("*") if p.is_dir() and not p.is_symlink())]:
            folder.chmod(0o755)
        # SOURCE_DATE_EPOCH makes dpkg-deb stamp every member and the ar header alike, so the
        # same spec gives the same bytes (tarballs that carry debs keep a stable sha256).
        result = subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(target)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "SOURCE_DATE_EPOCH": "0"},
        )
        if result.returncode != 0:
            raise RuntimeError(f"dpkg-deb failed for {spec.name}: {result.stderr}")
    return target
