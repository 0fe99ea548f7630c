"""The nodeforge commands a GPU node runs itself (xid-watch, health-gate), packed for the node.

The node gets them as one zip application, `nodeforge.pyz`, run by a small virtual environment
that holds only what those commands import: pydantic and PyYAML, from a hash-checked lock per
Python version and architecture (`locks/nodeforge-tools/` in the catalog). The rest of
nodeforge's dependencies (Ansible, boto3, pytest) stay on the controller.

The archive is written byte for byte the same from the same sources (fixed order and times), so
a second converge copies nothing.

    python -m nodeforge.node_tools lock --python 3.12 --arch arm64 [--catalog images]
    python -m nodeforge.node_tools pyz OUTPUT
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import get_args

import nodeforge
from nodeforge.catalog.arch import Arch
from nodeforge.lock import (
    PYPI,
    Lock,
    LockFailedError,
    default_platform,
    render_lock,
    resolve,
    resolved_header,
)
from nodeforge.paths import SHIPPED_CATALOG

NODE_REQUIREMENTS = ("pydantic>=2.7,<3", "PyYAML>=6.0.1,<7")
"""What xid-watch and health-gate import beyond the standard library: pyproject's own ranges."""

LOCKS_DIR = "locks/nodeforge-tools"
TOOLS_PREFIX = "/opt/nodeforge/tools"
"""Where gpu_health puts the tools' environment (its gpu_health_tools_prefix default)."""
ENVIRONMENT = "node-tools"
MIN_PYTHON = (3, 11)
"""nodeforge's requires-python: a node whose python3 is older gets python3.11 for the tools."""

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_MAIN = "from nodeforge.cli import main\n\nraise SystemExit(main())\n"
_PACKAGE_DATA = ("*.py", "*.yml", "py.typed")


def tools_python(os_python: str) -> str:
    """The interpreter the node tools run on: the OS's python3, or 3.11 where it is older."""
    major, minor = (int(part) for part in os_python.split(".")[:2])
    if (major, minor) >= MIN_PYTHON:
        return f"{major}.{minor}"
    return ".".join(map(str, MIN_PYTHON))


def lock_path(python: str, arch: Arch) -> str:
    """Where the lock lives, relative to the catalog."""
    return f"{LOCKS_DIR}/py{python}-{arch}.txt"


def image_tools_lock(os_python: str, arch: Arch) -> tuple[str, str]:
    """(the tools' Python, its lock relative to the catalog) for an image's OS and arch: the one
    derivation that the render (role inputs) and the check (rule node-tools-lock) share."""
    python = tools_python(os_python)
    return python, lock_path(python, arch)


@dataclass(frozen=True)
class NodeToolsRequest:
    """The node tools' environment for one interpreter and architecture (lock.Resolvable)."""

    python: str
    arch: Arch
    index_urls: tuple[str, ...] = (PYPI,)
    find_links: tuple[str, ...] = ()
    as_of: datetime | None = None
    stack: str = "nodeforge"
    environment: str = ENVIRONMENT

    @property
    def platform(self) -> str:
        return default_platform(self.arch)

    def requirements(self) -> list[str]:
        return list(NODE_REQUIREMENTS)


def lock_node_tools(request: NodeToolsRequest, *, now: datetime | None = None) -> Lock:
    return Lock(resolved_header(request, now), resolve(request))


def package_files() -> list[tuple[str, Path]]:
    """(name in the archive, file) for every module and data file of the package, sorted."""
    root = Path(nodeforge.__file__).parent
    found = {path for pattern in _PACKAGE_DATA for path in root.rglob(pattern) if path.is_file()}
    return sorted(
        (f"nodeforge/{path.relative_to(root).as_posix()}", path)
        for path in found
        if "__pycache__" not in path.parts
    )


def write_pyz(output: Path) -> None:
    """The package as a zip application whose __main__ is nodeforge's CLI."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zip_entry("__main__.py"), _MAIN)
        for name, path in package_files():
            archive.writestr(zip_entry(name), path.read_bytes())
    partial.replace(output)  # a reader never sees half an archive


def zip_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeforge.node_tools", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="resolve the node tools' lock from the index (PyPI)")
    lock.add_argument("--python", required=True, help="the node's tools Python, e.g. 3.12")
    lock.add_argument("--arch", required=True, choices=get_args(Arch))
    lock.add_argument("--catalog", type=Path, default=SHIPPED_CATALOG)
    pyz = sub.add_parser("pyz", help="write nodeforge.pyz")
    pyz.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pyz":
        write_pyz(args.output)
        return 0
    request = NodeToolsRequest(python=args.python, arch=args.arch)
    try:
        resolved = lock_node_tools(request)
    except LockFailedError as exc:
        print(f"nodeforge: error: {exc}", file=sys.stderr)
        return 1
    target = args.catalog / lock_path(args.python, args.arch)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_lock(resolved), encoding="utf-8")
    print(f"wrote {target}: {len(resolved.requirements)} requirements")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
