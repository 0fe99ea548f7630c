"""Output files: regular files only, written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeforge.errors import InputError
from nodeforge.outfile import write_output


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def test_writes_a_new_file_and_replaces_a_regular_one(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "vars.json"
    write_output(target, "one\n")
    write_output(target, "two\n")
    assert target.read_text() == "two\n"
    assert _leftovers(target.parent) == []


def test_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_output(tmp_path / "out.json", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink", "device"])
def test_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "real.json").write_text("keep\n")
        target.symlink_to(tmp_path / "real.json")
    else:
        target = Path("/dev/null")
    before = target.lstat()
    with pytest.raises(InputError, match="only as a regular file") as caught:
        write_output(target, "{}\n")
    assert caught.value.file == target
    after = target.lstat()
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert _leftovers(tmp_path) == []
    if kind == "symlink":
        assert (tmp_path / "real.json").read_text() == "keep\n"


def test_failed_write_leaves_nothing_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.json"
    target.write_text("old\n")

    def full_disk(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(InputError, match="No space left on device"):
        write_output(target, "new\n")
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == []


def test_unwritable_place_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write the output") as caught:
        write_output(blocker / "out.json", "{}\n")
    assert caught.value.file == blocker / "out.json"
