"""Thin podman helpers: find the binary, run it, check images, boot a systemd container."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from nodeforge.errors import InputError

# `systemctl is-system-running` says "degraded" when some unit failed; in a container that is
# usually a unit that needs real hardware, so it counts as booted.
_BOOTED = frozenset({"running", "degraded"})
_REMOVE_TRIES = 3


class PodmanError(RuntimeError):
    """A podman command failed; the message carries the command and its output."""


def executable(name: str, *, purpose: str, fix: str) -> str:
    """The path of a host tool the local harness needs, or an InputError naming the fix."""
    path = shutil.which(name)
    if path is None:
        raise InputError(f"{name} is not installed or not on PATH{purpose}", fix=fix)
    return path


def podman_path() -> str:
    return executable(
        "podman",
        purpose="",
        fix="run tools/setup-podman.sh as root (Debian 12), or install podman and runc",
    )


def run(
    args: Sequence[str], *, check: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `podman ARGS`, capturing text output; raise PodmanError on failure when check is set."""
    argv = [podman_path(), *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise PodmanError(
            f"{' '.join(argv)} exited {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result


def image_exists(ref: str) -> bool:
    """Whether a local image carries this reference (exit 0 yes, 1 no, anything else an error)."""
    result = run(["image", "exists", ref], check=False)
    if result.returncode not in (0, 1):
        raise PodmanError(f"podman image exists {ref} failed: {result.stderr.strip()}")
    return result.returncode == 0


class SystemdContainer:
    """A container with systemd as PID 1, booted on entry and removed on exit, whatever happens.

    Host networking because these machines have no bridge to the outside and the harness only
    talks to loopback services; --systemd=always makes podman mount the tmpfs and cgroup
    layout systemd expects, whatever the command is called.
    """

    def __init__(
        self,
        image: str,
        *,
        name: str | None = None,
        boot_timeout: float = 120.0,
        read_only_mounts: Sequence[tuple[Path, str]] = (),
        hostname: str | None = None,
    ):
        self.image = image
        self.name = name or f"nodeforge-{uuid.uuid4().hex[:12]}"
        # with host networking podman gives the container the host's name unless told
        self.hostname = hostname
        self.boot_timeout = boot_timeout
        # (host file, path in the container): bind mounts, which `podman commit` leaves out
        self.read_only_mounts = tuple(read_only_mounts)

    def __enter__(self) -> SystemdContainer:
        try:
            run(
                [
                    "run", "-d", "--name", self.name, "--systemd=always", "--network", "host",
                    *(["--hostname", self.hostname] if self.hostname else []),
                    *(
                        f"--volume={host}:{inside}:ro"
                        for host, inside in self.read_only_mounts
                    ),
                    self.image, "/sbin/init",
                ]
            )  # fmt: skip
            self._wait_booted()
        except BaseException:
            # KeyboardInterrupt included: a half-started container must not outlive us.
            self._remove()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        left = self._remove()
        if left and exc is None:
            raise PodmanError(
                f"container {self.name} is still there after {_REMOVE_TRIES} tries of podman rm "
                f"({left}); remove it with: podman rm -f {self.name}"
            )

    def exec(self, args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container."""
        return run(["exec", self.name, *args], check=check)

    def _wait_booted(self) -> None:
        deadline = time.monotonic() + self.boot_timeout
        state = "unknown"
        while time.monotonic() < deadline:
            # Non-zero exit is normal while booting ("starting"), so only the text counts.
            state = self.exec(["systemctl", "is-system-running"], check=False).stdout.strip()
            if state in _BOOTED:
                return
            time.sleep(0.5)
        logs = run(["logs", "--tail", "20", self.name], check=False)
        raise PodmanError(
            f"systemd in {self.name} ({self.image}) did not finish booting within "
            f"{self.boot_timeout:.0f}s (last state '{state}'); last log lines:\n"
            f"{(logs.stdout + logs.stderr).strip()}"
        )

    def _remove(self) -> str:
        """Remove the container; '' once it is gone, else what the last `podman rm` said."""
        said = ""
        for attempt in range(_REMOVE_TRIES):
            # `rm -f` stops and removes in one call and is a no-op when `run` never created it;
            # -t bounds the wait because systemd ignores the default SIGTERM as PID 1.
            removed = run(["rm", "-f", "-t", str(5 * (attempt + 1)), self.name], check=False)
            # On a loaded machine `rm` can fail while the container's cleanup is still running
            # (exit 0 or not); only `container exists` says whether it is gone.
            if run(["container", "exists", self.name], check=False).returncode == 1:
                return ""
            said = (removed.stderr or removed.stdout).strip() or f"exit {removed.returncode}"
            time.sleep(1.0 + attempt)
        return said
