"""`nodeforge xid-watch`: follow the kernel log, export the Xid metrics, alarm once."""

from __future__ import annotations

import argparse
import errno
import io
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO, cast

from nodeforge.errors import EXIT_OK, InputError
from nodeforge.outfile import check_output, output_folder
from nodeforge.xid_watch import XidWatcher

_STDIN = "-"
_JOURNAL = "journal"
# This boot's kernel messages from the journal, from the boot's first line on: the ring buffer
# behind /dev/kmsg may have overwritten an early Xid by the time the watcher starts.
JOURNALCTL = ("journalctl", "--dmesg", "--boot", "--no-pager", "--output=short-monotonic")
_CHUNK = 65536  # above /dev/kmsg's largest record, which one read() must take whole


def xid_watch(args: argparse.Namespace, _out: TextIO) -> int:
    textfile: Path = args.textfile
    _check_textfile(textfile)
    check_output(args.state)
    output_folder(args.state.parent)
    watcher = XidWatcher(
        state_path=args.state,
        hooks=[_hook_argv(hook) for hook in args.hook],
        hook_timeout_s=args.hook_timeout,
    )
    read, close = _open(args.source, once=args.once)
    try:
        watcher.write_textfile(textfile)  # a healthy node exports health 1 before any event
        # a pipe's end is its writer's end (journalctl exited): nothing more will come
        follow = not args.once and args.source not in (_STDIN, _JOURNAL)
        for line in _lines(read, args.source, follow=follow, poll_s=args.poll_interval):
            if watcher.feed(line):
                watcher.write_textfile(textfile)
    finally:
        close()
    return EXIT_OK


def _check_textfile(path: Path) -> None:
    if path.suffix != ".prom":
        raise InputError(
            "node_exporter's textfile collector reads only files named *.prom",
            file=path,
            field="--textfile",
            fix="name a .prom file, e.g. /var/lib/node_exporter/textfile_collector/xid.prom",
        )
    if not path.parent.is_dir():
        raise InputError(
            "the folder of the textfile does not exist",
            file=path.parent,
            field="--textfile",
            fix="name a file in node_exporter's --collector.textfile.directory",
        )
    check_output(path)


def _hook_argv(hook: str) -> list[str]:
    try:
        argv = shlex.split(hook)
    except ValueError as exc:
        raise InputError(
            f"cannot split '{hook}' into arguments ({exc})",
            field="--hook",
            fix="close the quotes; the hook runs without a shell",
        ) from None
    if not argv:
        raise InputError("an empty hook", field="--hook", fix="name a command to run")
    return argv


def _open(source: str, *, once: bool) -> tuple[Callable[[], bytes], Callable[[], None]]:
    """A read of what is there now (b"" at the end) and a close, for `-`, `journal` or a file."""
    if source == _JOURNAL:
        return _journal(once=once)
    if source == _STDIN:
        # a BufferedReader (a BytesIO under test): read1 returns what one read gives, so a
        # line from journalctl is handled when it comes, not when a buffer fills
        stdin = cast("io.BufferedIOBase", sys.stdin.buffer)
        return (lambda: stdin.read1(_CHUNK)), (lambda: None)
    try:
        # unbuffered: each read() of /dev/kmsg returns one whole record
        stream = open(source, "rb", buffering=0)  # noqa: SIM115 (closed by the caller)
    except OSError as exc:
        raise _unreadable(source, exc) from None
    return (lambda: stream.read(_CHUNK) or b""), stream.close


def _journal(*, once: bool) -> tuple[Callable[[], bytes], Callable[[], None]]:
    argv = [*JOURNALCTL] if once else [*JOURNALCTL, "--follow", "--no-tail"]
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise InputError(
            f"cannot run {argv[0]} ({exc.strerror or exc})",
            field="--source",
            fix="on a host without systemd's journal, name /dev/kmsg or a file",
        ) from None
    stdout = cast("io.BufferedReader", process.stdout)

    def close() -> None:
        process.terminate()
        process.wait()
        stdout.close()

    return (lambda: stdout.read1(_CHUNK)), close


def _lines(read: Callable[[], bytes], source: str, *, follow: bool, poll_s: float) -> Iterator[str]:
    """The lines of the source; when following, wait at its end for more, as `tail -f` does
    (a line still being written is held back until its newline arrives)."""
    pending = b""
    while True:
        try:
            chunk = read()
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue  # /dev/kmsg overwrote records before they were read: read on
            raise _unreadable(source, exc) from None
        if not chunk:
            if not follow:
                break
            time.sleep(poll_s)
            continue
        *complete, pending = (pending + chunk).split(b"\n")
        # kernel logs carry whatever bytes a driver printed: never a reason to stop
        yield from (raw.decode("utf-8", "replace") for raw in complete)
    if pending:
        yield pending.decode("utf-8", "replace")


def _unreadable(source: str, exc: OSError) -> InputError:
    return InputError(
        f"cannot read the kernel log ({exc.strerror or exc})",
        file=Path(source),
        field="--source",
        fix="name a readable log, /dev/kmsg (as root), or - for standard input",
    )
