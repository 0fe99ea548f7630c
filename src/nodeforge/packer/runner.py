"""Run Packer: the exact command lines, live progress from its machine-readable output, and
children that stop with nodeforge.

Each child runs in its own session, so a terminal's Ctrl-C reaches nodeforge only; nodeforge
then sends each child exactly one SIGINT (Packer's cue to terminate the builder instance and
delete its temporary key pair and security group), waits, and kills what is left.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nodeforge.errors import BuildFailedError, InputError
from nodeforge.local.podman import executable
from nodeforge.packer.machine import Output
from nodeforge.versions import Version

MIN_VERSION = Version("1.14.1")
"""HashiCorp releases the official plugins (amazon since 1.3.10) only from its own release site,
and `packer init` installs those releases from Packer 1.14.1 on (hashicorp/packer#13445)."""

Step = Literal["version", "init", "validate", "build"]
Progress = Callable[[str], None]
_HUMAN_VERSION = re.compile(r"Packer v(\d+\.\d+\.\d+)")


class PackerFailedError(BuildFailedError):
    """A Packer step exited non-zero or reported errors; carries its last error lines."""

    def __init__(
        self,
        step: Step,
        label: str,
        returncode: int,
        errors: list[str],
        log: Path | None,
        *,
        built: dict[str, str] | None = None,
    ) -> None:
        self.step = step
        self.label = label
        self.returncode = returncode
        self.errors = errors
        self.log = log
        self.built = built or {}
        """AMIs that other builds of the same run finished meanwhile ('image region' -> id)."""
        detail = " | ".join(errors) if errors else "no error message"
        where = f" (log: {log})" if log else ""
        meanwhile = (
            "; built meanwhile: " + ", ".join(f"{k} {v}" for k, v in self.built.items())
            if self.built
            else ""
        )
        super().__init__(
            f"packer {step} failed for {label} (exit {returncode}): {detail}{where}{meanwhile}"
        )


@dataclass(frozen=True)
class Invocation:
    """One Packer command, ready to run or to print."""

    step: Step
    argv: tuple[str, ...]
    label: str
    log: Path | None = None

    def shell(self) -> str:
        return shlex.join(self.argv)


def packer_path(packer: str) -> str:
    return executable(
        packer,
        purpose=f" (nodeforge needs Packer >= {MIN_VERSION} to build AMIs)",
        fix="install Packer from https://developer.hashicorp.com/packer/install, "
        "or name the binary explicitly",
    )


def version_command(packer: str) -> Invocation:
    return Invocation("version", (packer, "-machine-readable", "version"), "packer")


def init_command(packer: str, template_dir: Path, log: Path | None = None) -> Invocation:
    return Invocation(
        "init", (packer, "init", "-machine-readable", str(template_dir)), "plugins", log
    )


def validate_command(
    packer: str, template_dir: Path, var_file: Path, label: str, log: Path | None = None
) -> Invocation:
    argv = (packer, "validate", "-machine-readable", f"-var-file={var_file}", str(template_dir))
    return Invocation("validate", argv, label, log)


def build_command(
    packer: str,
    template_dir: Path,
    var_file: Path,
    label: str,
    *,
    only: Sequence[str] = (),
    log: Path | None = None,
) -> Invocation:
    argv = [packer, "build", "-machine-readable"]
    if only:
        argv.append(f"-only={','.join(only)}")
    argv += [f"-var-file={var_file}", str(template_dir)]
    return Invocation("build", tuple(argv), label, log)


def check_version(packer: str, *, timeout: float = 60.0) -> Version:
    """Packer's version; an InputError when it predates MIN_VERSION or does not answer."""
    invocation = version_command(packer)
    try:
        done = subprocess.run(
            invocation.argv, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"`{invocation.shell()}` did not answer: {exc}") from None
    output = Output()
    for line in done.stdout.splitlines():
        output.feed(line)
    text = output.version
    if text is None and (match := _HUMAN_VERSION.search(done.stdout)):
        text = match.group(1)
    try:
        version = Version(text or "")
    except ValueError:
        raise InputError(
            f"cannot read the version from `{invocation.shell()}`: "
            f"{(done.stdout or done.stderr).strip()[:200]!r}",
            fix=f"install Packer >= {MIN_VERSION}",
        ) from None
    if version < MIN_VERSION:
        raise InputError(
            f"{packer} is Packer {version}; nodeforge's templates need Packer >= {MIN_VERSION} "
            "(older ones cannot `packer init` the pinned official plugins from HashiCorp's "
            "release site)",
            fix=f"install Packer {MIN_VERSION} or newer from "
            "https://developer.hashicorp.com/packer/install",
        )
    return version


class Children:
    """The Packer processes of one nodeforge build; stopped together on Ctrl-C."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[str]] = set()
        self._interrupted = False

    def start(self, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
        with self._lock:
            if self._interrupted:
                raise KeyboardInterrupt
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._live.add(process)
            return process

    def done(self, process: subprocess.Popen[str]) -> None:
        with self._lock:
            self._live.discard(process)

    def stop(self, processes: Sequence[subprocess.Popen[str]] | None = None) -> None:
        """SIGINT, wait up to grace_s, then SIGKILL; every live child when none are named."""
        with self._lock:
            if processes is None:
                self._interrupted = True
                processes = list(self._live)
            self._live.difference_update(processes)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + self.grace_s
        for process in processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Runner:
    """Runs invocations in `cwd`, each line to its log, each ui message to `progress`."""

    def __init__(self, cwd: Path, progress: Progress, children: Children) -> None:
        self.cwd = cwd
        self.children = children
        self._progress = progress
        self._progress_lock = threading.Lock()
        # CHECKPOINT_DISABLE: no version check call home from build machines without internet
        self.env = {**os.environ, "CHECKPOINT_DISABLE": "1", "PACKER_NO_COLOR": "1"}

    def say(self, text: str) -> None:
        with self._progress_lock:
            self._progress(text)

    def run(self, invocation: Invocation) -> Output:
        """Run to the end; PackerFailedError on a non-zero exit or reported errors."""
        output = Output()
        process = self.children.start(invocation.argv, self.cwd, self.env)
        assert process.stdout is not None
        sink = invocation.log.open("w", encoding="utf-8") if invocation.log else None
        try:
            for line in process.stdout:
                if sink is not None:
                    sink.write(line)
                    sink.flush()
                event = output.feed(line)
                text = event.ui_text if event is not None else line.strip()
                if text and text.strip():
                    self.say(f"[{invocation.label}] {text.strip()}")
            returncode = process.wait()
        except BaseException:
            # nobody reads this child's output any more: it must not outlive the reader
            self.children.stop([process])
            raise
        finally:
            if sink is not None:
                sink.close()
        self.children.done(process)
        if returncode != 0 or output.error_count:
            raise PackerFailedError(
                invocation.step,
                invocation.label,
                returncode,
                output.error_lines(),
                invocation.log,
            )
        return output
