"""A loopback PyPI for the python_ml scenario: a PEP 503 simple index of exactly a lock's files.

The wheels are fetched on the host once (`pip download` of the lock, hash-checked; the torch CPU
build comes from the host's find-links folder) and cached by sha256 outside the repository, so
a second run downloads nothing. The containers reach the host's loopback (host networking), and
plain HTTP on loopback needs neither a proxy CA nor --trusted-host.

`python -m tests.mirror` serves it beside the stub mirror for runs by hand.
"""

from __future__ import annotations

import fcntl
import hashlib
import html
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nodeforge.lock import Lock, Locked, canonical, expand_platform, pip_environment, read_lock
from nodeforge.node_tools import lock_path as tools_lock_path
from tests.mirror.server import MirrorServer, serve_directory

ENV_VAR = "NODEFORGE_TEST_PYPI"
CI_LOCK = Path(__file__).resolve().parents[2] / "images" / "locks" / "ci" / "train.txt"
TOOLS_LOCK = Path(__file__).resolve().parents[2] / "images" / tools_lock_path("3.11", "x86_64")
"""The node tools' lock for Debian 12's Python: the gpu_health scenario installs it."""


def served_locks() -> list[Lock]:
    """What the scenarios and the whole-stack image install from the loopback index."""
    return [read_lock(CI_LOCK), read_lock(TOOLS_LOCK)]


def wheel_cache() -> Path:
    """~/.cache/nodeforge/wheels (or $NODEFORGE_WHEEL_CACHE): one folder per sha256."""
    default = Path.home() / ".cache" / "nodeforge" / "wheels"
    return Path(os.environ.get("NODEFORGE_WHEEL_CACHE", default))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cached(cache: Path, sha256: str) -> Path | None:
    folder = cache / sha256
    files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return files[0] if files else None


def fetch_wheels(lock: Lock, cache: Path | None = None) -> dict[str, Path]:
    """Every locked file, by sha256, downloading only what the cache lacks."""
    cache = cache or wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers share the cache: one fills it while the others wait
    with (cache / ".lock").open("w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        missing = [r for r in lock.requirements if not any(_cached(cache, h) for h in r.hashes)]
        if missing:
            _download(lock, missing, cache)
    found: dict[str, Path] = {}
    for requirement in lock.requirements:
        hit = next((p for h in requirement.hashes if (p := _cached(cache, h))), None)
        if hit is None:
            raise RuntimeError(f"{requirement.name}=={requirement.version}: no file matched")
        found[hit.parent.name] = hit
    return found


def _download(lock: Lock, missing: list[Locked], cache: Path) -> None:
    header = lock.header
    with tempfile.TemporaryDirectory(prefix="nodeforge-wheels-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(
            "".join(
                f"{r.name}=={r.version} " + " ".join(f"--hash=sha256:{h}" for h in r.hashes) + "\n"
                for r in lock.requirements
                if r in missing
            ),
            encoding="utf-8",
        )
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
            "--disable-pip-version-check", "--only-binary=:all:", "--implementation", "cp",
            "--python-version", header.python, "--abi", f"cp{header.python.replace('.', '')}",
            "--dest", str(Path(tmp) / "files"), "--index-url", header.index_urls[0],
            "-r", str(requirements),
        ]  # fmt: skip
        for url in header.index_urls[1:]:
            command += ["--extra-index-url", url]
        for link in header.find_links:
            command += ["--find-links", link]
        for tag in expand_platform(header.platform):
            command += ["--platform", tag]
        subprocess.run(command, env=pip_environment(), check=True, capture_output=True)
        for wheel in (Path(tmp) / "files").glob("*.whl"):
            folder = cache / _sha256(wheel)
            folder.mkdir(parents=True, exist_ok=True)
            shutil.move(wheel, folder / wheel.name)


def build_index(root: Path, locks: list[Lock], cache: Path | None = None) -> Path:
    """root/simple/<project>/index.html (PEP 503, #sha256= fragments) and root/files/."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, set[tuple[str, str]]] = {}
    for lock in locks:
        wheels = fetch_wheels(lock, cache)
        for requirement in lock.requirements:
            for sha256 in requirement.hashes:
                if sha256 not in wheels:
                    continue
                wheel = wheels[sha256]
                link = files / wheel.name
                if not link.exists():
                    link.symlink_to(wheel)
                projects.setdefault(canonical(requirement.name), set()).add((wheel.name, sha256))
    simple = root / "simple"
    for project, entries in projects.items():
        anchors = "".join(
            f'<a href="../../files/{html.escape(name)}#sha256={sha256}">{html.escape(name)}</a>\n'
            for name, sha256 in sorted(entries)
        )
        page = simple / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n", "utf-8")
    (simple / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        + "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
        + "</body></html>\n",
        "utf-8",
    )
    return root


@contextmanager
def serve_pypi(root: Path, locks: list[Lock]) -> Iterator[MirrorServer]:
    """Build the index of the locks under root and serve it on 127.0.0.1 until the block ends."""
    with serve_directory(build_index(root, locks)) as server:
        yield server


def pypi_env(server: MirrorServer) -> dict[str, str]:
    """What a scenario reads: the simple index URL."""
    return {ENV_VAR: f"{server.url}simple/"}
