"""Debian systemd base images built with debootstrap and imported into podman, cached by content.

No container registry is reachable from these machines, so the images Molecule boots are built
from Debian's archive. The tag carries a hash of everything that shapes the image, so a changed
package list or mirror builds a new image and an unchanged one is never rebuilt.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nodeforge.errors import InputError
from nodeforge.local import podman

# Bump when the build recipe changes in a way the other key inputs do not show (tar flags,
# import changes, post-debootstrap tweaks), so that every cached image is rebuilt once.
SCHEMA_VERSION = 1

MIRROR = "http://deb.debian.org/debian"
# What Ansible and Molecule need in the guest: python3 for modules, sudo for become, systemd
# (with systemd-sysv for /sbin/init) and dbus so that service tasks behave as on a real node.
INCLUDE: tuple[str, ...] = ("python3", "sudo", "systemd", "systemd-sysv", "dbus", "ca-certificates")
# Debian releases the harness boots, by suite name; the numeric aliases match env var names.
SUITES: dict[str, str] = {"bookworm": "bookworm", "trixie": "trixie"}
_ALIASES: dict[str, str] = {"debian12": "bookworm", "debian13": "trixie"}
REPOSITORY = "localhost/nodeforge-base"
LABEL = "org.nodeforge.base-key"

Progress = Callable[[str], None]


def _suite(name: str) -> str:
    suite = SUITES.get(name) or _ALIASES.get(name)
    if suite is None:
        known = ", ".join([*SUITES, *_ALIASES])
        raise InputError(f"unknown Debian suite '{name}'", field="suite", fix=f"use one of {known}")
    return suite


def cache_key(suite: str, include: Iterable[str] = INCLUDE, mirror: str = MIRROR) -> str:
    """sha256 over everything that shapes the image; package order does not matter to apt."""
    payload = {
        "schema": SCHEMA_VERSION,
        "suite": _suite(suite),
        "include": sorted(set(include)),
        "mirror": mirror.rstrip("/"),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def base_image_ref(suite: str, key: str) -> str:
    """The tag for an image with this key, e.g. localhost/nodeforge-base:bookworm-0123abcd4567."""
    return f"{REPOSITORY}:{_suite(suite)}-{key[:12]}"


def ensure_base_image(suite: str, *, progress: Progress | None = None) -> str:
    """Return the reference of the base image for `suite`, building it only if it is missing."""
    say = progress or (lambda _msg: None)
    suite = _suite(suite)
    podman.podman_path()  # fail with the install hint before any work
    key = cache_key(suite)
    ref = base_image_ref(suite, key)
    with _build_lock(suite):
        if podman.image_exists(ref):
            say(f"base image {ref} is cached")
            return ref
        _build(suite, ref, key, say)
    say(f"built base image {ref}")
    return ref


@contextmanager
def _build_lock(suite: str) -> Iterator[None]:
    """One builder per suite on this machine: parallel test workers and Molecule runs that
    all find the image missing would otherwise debootstrap it side by side."""
    # Read-only so that a user who only uses the cached image can take a lock root created.
    fd = os.open(f"/var/tmp/nodeforge-base-{suite}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _build(suite: str, ref: str, key: str, say: Progress) -> None:
    debootstrap = _debootstrap_path()
    # /var/tmp, not /tmp: a tmpfs /tmp is often too small or mounted nodev for a root tree.
    root = Path(tempfile.mkdtemp(prefix=f"nodeforge-base-{suite}-", dir="/var/tmp"))
    try:
        say(f"debootstrap {suite} into {root}")
        _debootstrap(debootstrap, suite, root, say)
        say(f"importing {root} as {ref}")
        _import(root, ref, key)
    finally:
        # Runs on KeyboardInterrupt too; a half-built tree is never reused.
        _remove_tree(root)


def _debootstrap_path() -> str:
    path = podman.executable(
        "debootstrap",
        purpose="; it builds the local base images",
        fix="run tools/setup-podman.sh as root, or apt-get install debootstrap",
    )
    if os.geteuid() != 0:
        raise InputError(
            "debootstrap must run as root to build a base image",
            fix="run as root, or build the image once as root so that it is cached",
        )
    return path


def _debootstrap(debootstrap: str, suite: str, root: Path, say: Progress) -> None:
    argv = [
        debootstrap, "--variant=minbase", f"--include={','.join(INCLUDE)}",
        suite, str(root), MIRROR,
    ]  # fmt: skip
    tail: deque[str] = deque(maxlen=20)
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        try:
            assert proc.stdout is not None  # for mypy: stdout=PIPE
            for line in proc.stdout:
                tail.append(line.rstrip())
                say(line.rstrip())
            code = proc.wait()
        except BaseException:
            # KeyboardInterrupt: stop debootstrap before the caller removes its tree.
            proc.terminate()
            proc.wait()
            raise
    if code != 0:
        raise InputError(
            f"debootstrap {suite} failed (exit {code}); last lines:\n" + "\n".join(tail),
            fix=f"check that {MIRROR} is reachable and the disk has about 1 GB free, then rerun",
        )


def _import(root: Path, ref: str, key: str) -> None:
    # tar streams straight into podman import: no intermediate tarball on disk.
    # --numeric-owner keeps the guest's uids rather than mapping them through the host's names.
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-c", "."],
        stdout=subprocess.PIPE,
    )
    try:
        imported = subprocess.run(
            [
                podman.podman_path(), "import",
                "--change", f"LABEL {LABEL}={key}",
                "--change", "CMD [\"/sbin/init\"]",
                "-", ref,
            ],
            stdin=tar.stdout, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        assert tar.stdout is not None  # for mypy: stdout=PIPE
        tar.stdout.close()
        tar_code = tar.wait()
    if tar_code != 0 or imported.returncode != 0:
        raise podman.PodmanError(
            f"importing {root} as {ref} failed (tar exit {tar_code}, podman exit "
            f"{imported.returncode}): {imported.stderr.strip()}"
        )


def _remove_tree(root: Path) -> None:
    """Delete a build tree, first unmounting whatever an interrupted debootstrap left mounted.

    debootstrap mounts proc and sysfs inside the target; deleting through a live mount would
    walk the host's /proc or /sys, so anything still mounted is unmounted, deepest first.
    """
    prefix = str(root.resolve()) + "/"
    mounts = [m for m in _mountpoints() if m.startswith(prefix)]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], check=False, capture_output=True)
    if any(m.startswith(prefix) for m in _mountpoints()):
        raise podman.PodmanError(f"{root} still has mounts inside; unmount them and delete it")
    shutil.rmtree(root, ignore_errors=True)


def _mountpoints() -> list[str]:
    # Field 5 of mountinfo is the mount point, with spaces escaped as \040.
    text = Path("/proc/self/mountinfo").read_text()
    return [line.split()[4].replace("\\040", " ") for line in text.splitlines() if line]


def main() -> None:
    """Build or find both images and print shell exports for .config/molecule/config.yml."""
    for env_name, suite in (
        ("NODEFORGE_BASE_DEBIAN12", "bookworm"),
        ("NODEFORGE_BASE_DEBIAN13", "trixie"),
    ):
        # Progress goes to stderr so that stdout stays `eval`-able.
        ref = ensure_base_image(suite, progress=lambda msg: print(msg, file=sys.stderr))
        print(f"export {env_name}={ref}")


if __name__ == "__main__":
    main()
