"""Hostile input never escapes as a traceback: every command that reads the catalog answers a
mutated file, of every kind, with exit 0, 1 or 2, and an exit 2 is one line that names the
mutated file by its own name (not merely the catalog folder).

`build --target local` runs up to the artifact downloads, where tests.test_bad_input's stubs
stop it (before podman); `build --target aws --dry-run` runs whole, since a dry run calls
neither Packer nor AWS; `lock` gets a resolver stub that returns the shipped CI lock, so that
the lock is written like a real one. The examples are derandomized: the same inputs every run,
so that a failure is a change in nodeforge, not in the draw.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.catalog.models import _LOCK_PATH, Image, Stack
from nodeforge.cli import main
from nodeforge.errors import EXIT_OK
from nodeforge.lock import read_lock
from tests.conftest import SHIPPED
from tests.test_bad_input import CORPUS, Escaped, assert_one_line_error, deadline, seal

VARS = ("--vars", "vars.yml")
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("list",),
    ("list", "stacks"),
    ("list", "profiles", "--json"),
    ("list", "os"),
    ("show", "p6-ubuntu24.04"),
    ("show", "gb200-ubuntu24.04-arm64", "--json"),
    ("check",),
    ("check", "local-debian13", "--json", "--allow-unverified"),
    ("render", "p6-ubuntu24.04", "--profile", "p6-b200.48xlarge", *VARS),
    ("render", "gb200-ubuntu24.04-arm64", "--mode", "node", "-o", "out/vars.json"),
    ("render", "local-debian13", *VARS),
    ("matrix",),
    ("matrix", "--markdown"),
    ("build", "local-debian13", "--target", "local", "--work-dir", "work", *VARS),
    ("build", "p5-ubuntu24.04", "--target", "aws", "--dry-run", "--work-dir", "work", *VARS),
    ("lock", "hopper-2026.12"),
    ("lock", "blackwell-2026.12", "--environment", "serve", "--arch", "arm64"),
)
HOPPER_LOCK = "images/locks/hopper-2026.12/train-x86_64.txt"


@dataclass(frozen=True)
class Target:
    """A file to mutate and the commands that read it."""

    path: str
    """Relative to the workspace, whose images/ is the catalog."""
    commands: tuple[tuple[str, ...], ...] = COMMANDS
    entry: bool = True
    """A catalog entry: no random document is a valid one."""

    def _repr_pretty_(self, printer: Any, _cycle: bool) -> None:
        # how hypothesis prints a falsifying example: the path, not every command
        printer.text(f"Target({self.path!r})")


TARGETS = (
    Target("images/p6-ubuntu24.04.yml"),  # extends p5-ubuntu24.04, extended by gb200
    Target("images/local-debian13.yml"),
    Target("images/stacks/hopper-2026.12.yml"),  # extended by blackwell
    Target("images/stacks/blackwell-2026.12.yml"),
    Target("images/profiles/p6-b200.48xlarge.yml"),
    Target("images/profiles/g6e.48xlarge.yml"),
    Target("images/os/ubuntu24.04.yml"),
    Target("images/os/debian13.yml"),
    Target("images/common.yml", entry=False),
    Target("images/compat.yml"),
    Target("vars.yml", tuple(c for c in COMMANDS if VARS[0] in c), entry=False),
    # written by `lock`, read by nothing here: its content must not matter
    Target(HOPPER_LOCK, (("lock", "hopper-2026.12"),), entry=False),
)
YAML_TARGETS = tuple(t for t in TARGETS if t.path.endswith(".yml"))


def _leaves(data: Any) -> Iterator[Any]:
    if isinstance(data, dict):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, list):
        for value in data:
            yield from _leaves(value)
    else:
        yield data


# Values the catalog itself uses, anywhere: a value moved to another field, or another entry's
# value in this one, loads more often than random text, and so reaches the rules and render.
# Sorted, for the derandomized draw.
CATALOG_VALUES = [
    value
    for _, value in sorted(
        {
            repr(leaf): leaf
            for path in sorted(SHIPPED.rglob("*.yml"))
            for leaf in _leaves(yaml.safe_load(path.read_text(encoding="utf-8")))
        }.items()
    )
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**140), max_value=2**140),
    st.integers(min_value=-2, max_value=1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),  # passes as a name
    st.sampled_from(CATALOG_VALUES),
    st.sampled_from(["{", "}", "{arch}", "{0}", "locks/../x.txt", "https://x.example/{branch"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=20,
)


def _with_command(targets: tuple[Target, ...]) -> st.SearchStrategy[tuple[Target, list[str]]]:
    return st.sampled_from(targets).flatmap(
        lambda t: st.tuples(st.just(t), st.sampled_from(t.commands).map(list))
    )


@contextlib.contextmanager
def _workspace(base: Path) -> Iterator[Path]:
    """A fresh copy of the catalog (its locks included) and a --vars file for every example, as
    the current directory: hypothesis runs all examples in one test call, so tmp_path is shared."""
    root = Path(tempfile.mkdtemp(dir=base))
    shutil.copytree(SHIPPED, root / "images", ignore=shutil.ignore_patterns("packer"))
    shutil.copy(CORPUS / "files" / "vars.yml", root / "vars.yml")
    try:
        with contextlib.chdir(root):
            yield root
    finally:
        shutil.rmtree(root)  # folders and FIFOs included


@pytest.fixture
def sealed(monkeypatch: pytest.MonkeyPatch) -> None:
    seal(monkeypatch)
    ci_lock = read_lock(SHIPPED / "locks" / "ci" / "train.txt")
    monkeypatch.setattr("nodeforge.commands.lock.lock_environment", lambda _request: ci_lock)


def _verdict(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        with deadline(10):
            code = main([*argv, "--catalog", "images"])
    except Escaped:
        code = EXIT_OK  # the build accepted every input and would start podman here
    _, err = capsys.readouterr()
    return code, err


def _heirs(catalog: Catalog, relative: str) -> frozenset[str]:
    """The file names of the entries that extend the one in `relative`, directly or not."""
    kind = relative.removeprefix("images/").partition("/")[0]
    entries: dict[str, Image] | dict[str, Stack] = (
        catalog.stacks if kind == "stacks" else catalog.images if relative.count("/") == 1 else {}
    )
    heirs: set[str] = set()
    parents = {Path(relative).stem}
    while parents:
        parents = {name for name, entry in entries.items() if entry.extends in parents}
        heirs |= parents
    return frozenset(f"{name}.yml" for name in heirs)


_SHIPPED = load_catalog(SHIPPED)
HEIRS = {target.path: _heirs(_SHIPPED, target.path) for target in TARGETS}


def _known_defect(target: Target, where: tuple[Any, ...]) -> bool:
    """A mutation that hits a defect kept as a strict xfail in tests/bad_input/cases.yml
    (image-os-unknown-inherited, image-stack-unknown-inherited: an unknown os or stack that an
    image passes on is reported on its heir), skipped so that the fuzz looks for new ones. Drop
    it once those cases pass."""
    return bool(HEIRS[target.path]) and where in (("os",), ("stack",))


def _assert_clean(code: int, err: str, relative: str, heirs: frozenset[str]) -> None:
    """Exit 0, 1 or 2; a 2 names the mutated file. One exception, by design of `extends`: a
    field that a parent no longer gives its heir is missing where the heir's entry is written
    (loader._place_in_chain), so that error names the heir."""
    event(f"exit {code}")
    assert code in (0, 1, 2), err
    if code == 2:
        line = assert_one_line_error(err)
        named = Path(relative).name in line
        inherited = "required field is missing" in line and any(h in line for h in heirs)
        assert named or inherited, f"{relative} is not named: {line}"


FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.usefixtures("sealed")
@FUZZ
@given(case=_with_command(TARGETS), content=st.binary(max_size=300))
def test_random_bytes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[Target, list[str]],
    content: bytes,
) -> None:
    target, argv = case
    with _workspace(tmp_path) as root:
        (root / target.path).write_bytes(content)
        code, err = _verdict(argv, capsys)
    _assert_clean(code, err, target.path, HEIRS[target.path])
    if target.path == HOPPER_LOCK:
        assert code == 0, err


@pytest.mark.usefixtures("sealed")
@FUZZ
@given(case=_with_command(TARGETS), data=values)
def test_random_documents(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[Target, list[str]],
    data: Any,
) -> None:
    target, argv = case
    with _workspace(tmp_path) as root:
        (root / target.path).write_text(yaml.safe_dump(data), encoding="utf-8")
        code, err = _verdict(argv, capsys)
    _assert_clean(code, err, target.path, HEIRS[target.path])
    if target.entry:
        assert code == 2, err
    if target.path == HOPPER_LOCK:
        assert code == 0, err


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*prefix, index))
    return found


@pytest.mark.usefixtures("sealed")
@FUZZ
@given(
    case=_with_command(YAML_TARGETS),
    choice=st.integers(min_value=0),
    value=st.one_of(st.sampled_from(CATALOG_VALUES), st.just(...), values),
)
def test_one_field_mutated(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    case: tuple[Target, list[str]],
    choice: int,
    value: Any,
) -> None:
    """A valid file with one field replaced (or, for `...`, removed): the closest thing to a
    user's typo, and the way to reach the rules and render with odd but loadable values."""
    target, argv = case
    with _workspace(tmp_path) as root:
        path = root / target.path
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        where = _paths(data)[choice % len(_paths(data))]
        assume(not _known_defect(target, where))
        node = data
        for part in where[:-1]:
            node = node[part]
        if value is ...:
            del node[where[-1]]
        else:
            node[where[-1]] = value
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        code, err = _verdict(argv, capsys)
    _assert_clean(code, err, target.path, HEIRS[target.path])


LOCK_COMMANDS = (["lock", "hopper-2026.12"], ["lock", "hopper-2026.12", "--environment", "train"])


@pytest.mark.usefixtures("sealed")
@FUZZ
@given(
    kind=st.sampled_from(["folder", "fifo", "dangling", "link", "file"]),
    content=st.binary(max_size=100),
    argv=st.sampled_from(LOCK_COMMANDS),
)
def test_what_stands_at_the_lock_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, content: bytes, argv: list[str]
) -> None:
    """`lock` replaces a regular file and refuses anything else, by the lock's name."""
    with _workspace(tmp_path) as root:
        lock = root / HOPPER_LOCK
        lock.unlink()
        if kind == "folder":
            lock.mkdir()
            (lock / "inside.txt").write_bytes(content)
        elif kind == "fifo":
            os.mkfifo(lock)
        elif kind == "dangling":
            lock.symlink_to(content.hex() or "x")
        elif kind == "link":
            lock.symlink_to(SHIPPED / "locks" / "ci" / "train.txt")
        else:
            lock.write_bytes(content)
        code, err = _verdict(argv, capsys)
        written = lock.is_file() and not lock.is_symlink() and lock.read_bytes() != content
    _assert_clean(code, err, HOPPER_LOCK, frozenset())
    assert code == (0 if kind == "file" else 2), err
    assert written == (kind == "file")


@pytest.mark.usefixtures("sealed")
@FUZZ
@given(
    relative=st.one_of(st.from_regex(_LOCK_PATH, fullmatch=True), st.text(max_size=80)),
    stack=st.sampled_from(["hopper-2026.12", "blackwell-2026.12"]),
)
def test_lock_path_in_the_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], relative: str, stack: str
) -> None:
    """Where a stack puts its lock: refused in the stack's file, or written inside the catalog."""
    # cases.yml stack-lock-path-too-long (strict xfail): drop this once it passes
    assume(all(len(part.encode()) < 256 for part in relative.split("/")))
    with _workspace(tmp_path) as root:
        path = root / "images" / "stacks" / f"{stack}.yml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["frameworks"]["environments"]["train"]["locks"] = {"x86_64": relative}
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        argv = ["lock", stack, "--environment", "train", "--arch", "x86_64"]
        code, err = _verdict(argv, capsys)
        if code == 0:
            lock = (root / "images" / relative).resolve()
            assert lock.is_relative_to(root / "images" / "locks"), relative
            assert lock.is_file(), relative
    _assert_clean(code, err, path.name, frozenset())
