"""Files and folders that commands write for the user (`-o FILE`, vars, locks and reports in a
work dir).

Written only as regular files: the text goes to a new file beside the target and is renamed
over it, so a reader sees the old file or the whole new one. A path that names anything but a
regular file (a device, a FIFO, a folder, a symlink) is refused before anything is written:
renaming over `/dev/null` as root replaces the device, and over a symlink replaces the link
rather than what it points at. A failed write leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from nodeforge.errors import InputError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def output_folder(path: Path) -> Path:
    """`path` as a folder for a command's output (made with its parents), or InputError naming
    it: a file or an unwritable place in the way is the user's to move, not a traceback."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(
            "is not a folder; the command writes its reports and logs there",
            file=path,
            fix="name a folder (or a place for a new one), e.g. --work-dir build/NAME",
        ) from None
    except OSError as exc:
        raise InputError(
            f"cannot create the folder ({exc.strerror or exc})",
            file=path,
            fix="choose a writable place for it",
        ) from None
    return path


def check_output(path: Path) -> None:
    """Refuse an output path that `write_output` would refuse, before the work that fills it
    (a lock resolved for minutes, then refused, is time lost)."""
    _refuse_non_regular(path)
    parent = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InputError(
            "is not a folder; the output file would go inside it",
            file=parent,
            fix="name a file in a folder, or a place for a new folder",
        )


def write_output(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, or raise InputError naming the path and the fix."""
    check_output(path)
    output_folder(path.parent)
    part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    try:
        # 0o666 less the umask, as a plain open() would create it
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(part, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            part.unlink()
        raise _cannot_write(path, exc) from None


def _refuse_non_regular(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    kind = next((name for test, name in _KINDS if test(mode)), None)
    if kind is not None:
        raise InputError(
            f"is {kind}; nodeforge writes its output only as a regular file",
            file=path,
            fix="name a new file, or a regular file to replace",
        )


def _cannot_write(path: Path, exc: OSError) -> InputError:
    return InputError(
        f"cannot write the output ({exc.strerror or exc})",
        file=path,
        fix="choose a writable place for it",
    )
