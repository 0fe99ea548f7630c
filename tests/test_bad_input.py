"""Bad input, command by command: every case of tests/bad_input/cases.yml exits 2 with one line
that names the file (and the field) at fault, before any AWS call, podman, Packer, pip or
network access; every catalog of tests/bad_input/findings.yml, which loads but fails a rule, is
a finding (exit 1) and no traceback. A few cases run as a real process, where what reaches the
terminal is the point: a full disk, a reader that leaves, a closed stdout, libyaml's limits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml

from nodeforge.catalog.yamlfile import MAX_FILE_BYTES
from nodeforge.cli import main
from tests.conftest import SHIPPED, Edit

CORPUS = Path(__file__).resolve().parent / "bad_input"
CASES: list[dict[str, Any]] = yaml.safe_load((CORPUS / "cases.yml").read_text(encoding="utf-8"))
FINDINGS: list[dict[str, Any]] = yaml.safe_load(
    (CORPUS / "findings.yml").read_text(encoding="utf-8")
)
COMMANDS = (
    *("list", "show", "check", "render", "matrix"),
    *("build", "validate", "drift", "apply", "lock", "promote", "prune"),
)
ERROR = "nodeforge: error: "


class Escaped(BaseException):
    """A command got past its input checks to what must not run on bad input. A BaseException,
    so that no `except Exception` on the way can take it for an ordinary failure."""


# Where each command would leave the process: every one is reached only after all its input
# has been read and checked, so a stub there proves the refusal came first.
_EXITS = {
    "nodeforge.commands.aws.aws_session": "AWS",
    "nodeforge.commands.aws.clients_for": "AWS",
    "nodeforge.commands.ami.aws_session": "AWS",
    "nodeforge.commands.ami.clients_for": "AWS",
    "nodeforge.packer.build.packer_path": "Packer",
    "nodeforge.local.build._preflight_downloads": "the artifact downloads",
    "nodeforge.local.podman.podman_path": "podman",
    "nodeforge.commands.machines.run_validation": "testinfra",
    "nodeforge.drift.expand": "the nodes",
    "nodeforge.apply.expand": "the nodes",
    "nodeforge.apply.run_playbook": "Ansible",
    "nodeforge.commands.lock.lock_environment": "pip",
}


def seal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace AWS, Packer, podman, testinfra, pip and sockets with stubs raising Escaped; no
    credentials, and a dead endpoint for any client made another way."""

    def escaped(what: str) -> Callable[..., Any]:
        def stub(*_args: object, **_kwargs: object) -> Any:
            raise Escaped(f"the command reached {what}")

        return stub

    for name in list(os.environ):
        if name.startswith(("AWS_", "NODEFORGE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(socket.socket, "connect", escaped("the network"))
    for target, what in _EXITS.items():
        monkeypatch.setattr(target, escaped(what))


@pytest.fixture
def workdir(catalog_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a copy of the catalog (images/) and the corpus's valid files, as the
    current directory: relative paths of the cases and the commands' default outputs land there."""
    seal(monkeypatch)
    for source in (CORPUS / "files").iterdir():
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.chdir(tmp_path)
    assert catalog_dir == tmp_path / "images"
    return tmp_path


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)


def _at(data: Any, at: list[Any]) -> tuple[Any, Any]:
    """The container of the last key of `at`, and that key (KeyError: the corpus is stale)."""
    for key in at[:-1]:
        data = data[key]
    return data, at[-1]


OPS = ("set", "delete", "write", "append", "replace", "remove", "mkdir", "fifo", "symlink", "huge")


def _op(step: dict[str, Any]) -> str:
    [op] = [key for key in step if key in OPS]
    return op


def _apply(root: Path, catalog: Path, edit: Edit, step: dict[str, Any]) -> None:
    op = _op(step)
    path = root / step[op]
    if op in ("set", "delete"):

        def mutate(data: dict[str, Any]) -> None:
            parent, key = _at(data, step["at"])
            if op == "set":
                parent[key] = step["value"]
            else:
                del parent[key]

        edit(os.path.relpath(path, catalog), mutate)
    elif op == "write":
        _clear(path)
        path.write_bytes(step["text"].encode(step.get("encoding", "utf-8")))
    elif op == "append":
        with path.open("a", encoding="utf-8") as stream:
            stream.write(step["text"])
    elif op == "replace":
        text = path.read_text(encoding="utf-8")
        assert step["old"] in text, f"{path}: {step['old']!r} is no longer there"
        path.write_text(text.replace(step["old"], step["new"], 1), encoding="utf-8")
    elif op == "remove":
        _clear(path)
    elif op == "mkdir":
        _clear(path)
        path.mkdir()
    elif op == "fifo":
        _clear(path)
        os.mkfifo(path)
    elif op == "symlink":
        _clear(path)
        path.symlink_to(step["to"])
    else:  # huge: still valid YAML, only too long
        line = "#" + "x" * 1023 + "\n"
        with path.open("a", encoding="utf-8") as stream:
            stream.write(line * (MAX_FILE_BYTES // len(line) + 1))


def _params(cases: list[dict[str, Any]]) -> list[Any]:
    return [
        pytest.param(
            case,
            id=case["id"],
            marks=[pytest.mark.xfail(strict=True, reason=case["xfail"])] if "xfail" in case else [],
        )
        for case in cases
    ]


class HungError(Exception):
    """The command did not answer in time (a read that waits forever, on a FIFO say)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise HungError in the command after `seconds`: a hang fails its case, not the whole run."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise HungError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(
    argv: list[str], capsys: pytest.CaptureFixture[str], *, seconds: float = 10
) -> tuple[int | str | None, str, str]:
    try:
        with deadline(seconds):
            code: int | str | None = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *, usage: bool = False) -> str:
    """The error line of stderr, which holds it alone (after argparse's usage, for a usage
    error); a second line would be a traceback or a report the user must read around."""
    assert "Traceback" not in err
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith(ERROR)]
    assert len(errors) == 1, err
    if usage:
        assert lines[0].startswith("usage: nodeforge"), err
        assert lines[-1] == errors[0], err
    else:
        assert lines == errors, err
    return errors[0]


@pytest.mark.parametrize("case", _params(CASES))
def test_bad_input_is_refused(
    case: dict[str, Any], workdir: Path, edit: Edit, capsys: pytest.CaptureFixture[str]
) -> None:
    for step in case.get("steps", []):
        _apply(workdir, workdir / "images", edit, step)
    argv = [str(arg) for arg in case["argv"]]
    if "--catalog" not in argv:
        argv += ["--catalog", "images"]
    code, out, err = _run(argv, capsys, seconds=case.get("deadline", 10))
    assert code == 2, f"exit {code}\nstdout: {out}\nstderr: {err}"
    assert out == ""
    line = assert_one_line_error(err, usage=case.get("usage", False))
    for key in ("file", "field", "says"):
        if key in case:
            assert case[key] in line, f"{key} {case[key]!r} not in: {line}"


@pytest.mark.parametrize("case", _params(FINDINGS))
def test_incompatible_catalog_is_a_finding(
    case: dict[str, Any], workdir: Path, edit: Edit, capsys: pytest.CaptureFixture[str]
) -> None:
    """A catalog that loads but fails a rule: every command reports the finding (or shows the
    failing check), none ends in a traceback."""
    for step in case["steps"]:
        _apply(workdir, workdir / "images", edit, step)
    image, profile, catalog = case["image"], case["profile"], ["--catalog", "images"]
    code, out, _ = _run(["check", image, *catalog], capsys)
    assert code == 1, out
    assert f"ERROR [{case['rule']}] {image} / {profile}" in out
    build = ["build", image, "--target", "aws", "--dry-run", "--work-dir", "out"]
    for argv, refused in (
        (["render", image, "--profile", profile], "not rendered"),
        ([*build, "--profile", profile], "not built"),
    ):
        code, out, err = _run([*argv, *catalog], capsys)
        assert code == 1, err
        assert out == ""
        assert f"ERROR [{case['rule']}] {image} / {profile}" in err
        assert err.endswith(f"nodeforge: {refused}: fix the errors above first\n")
    for argv in (["show", image], ["matrix"]):
        code, out, err = _run([*argv, *catalog], capsys)
        assert code == 0, err
        assert "fail" in out


def test_the_corpus_covers_every_command_and_file_kind() -> None:
    """The corpus itself: big enough, every command, every kind of file, and each case says
    what the error must name."""
    assert len(CASES) >= 200
    assert len({case["id"] for case in CASES}) == len(CASES)
    commands = {case["argv"][0] for case in CASES if case["argv"]}
    assert set(COMMANDS) <= commands
    targets = {
        case["argv"][case["argv"].index("--target") + 1]
        for case in CASES
        if "--target" in case["argv"] and not case.get("usage")
    }
    assert targets == {"local", "aws"}
    touched = {step[_op(step)] for case in CASES for step in case.get("steps", [])}
    kinds: dict[str, Callable[[str], bool]] = {
        "image": lambda p: p.count("/") == 1 and p.startswith("images/") and p.endswith(".yml"),
        "stack": lambda p: p.startswith("images/stacks/"),
        "profile": lambda p: p.startswith("images/profiles/"),
        "os": lambda p: p.startswith("images/os/"),
        "common": lambda p: p == "images/common.yml",
        "compat": lambda p: p == "images/compat.yml",
        "lock": lambda p: p.startswith("images/locks"),
        "vars": lambda p: p == "vars.yml",
        "config": lambda p: p == "pipeline.yml",
    }
    assert {kind for kind, test in kinds.items() if any(test(p) for p in touched)} == set(kinds)
    for case in CASES:
        assert {"file", "field", "says"} & case.keys(), case["id"]
        broken = [s[_op(s)] for s in case.get("steps", []) if s[_op(s)].startswith("images/")]
        if broken and not case.get("usage"):
            assert "file" in case, f"{case['id']}: a broken catalog file must be named"


# ---------------------------------------------------------------- as a real process


CONSOLE_SCRIPT = str(Path(sys.executable).with_name("nodeforge"))


def _nodeforge(
    args: str, cwd: Path, *, entry: str = CONSOLE_SCRIPT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`nodeforge ARGS` through bash (for its redirections and pipes), from the virtualenv's
    console script, without AWS settings. `exec`, so that a timeout kills nodeforge itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NODEFORGE_"))}
    return subprocess.run(
        ["bash", "-c", f"exec {entry} {args}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def test_full_disk_is_one_line(tmp_path: Path) -> None:
    result = _nodeforge(f"list --catalog {SHIPPED} > /dev/full", tmp_path)
    assert result.returncode == 2
    line = assert_one_line_error(result.stderr)
    assert "No space left" in line


def test_reader_that_leaves_is_not_an_error(tmp_path: Path) -> None:
    result = _nodeforge(f"matrix --catalog {SHIPPED} | head -1; exit ${{PIPESTATUS[0]}}", tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("instance type") and result.stdout.count("\n") == 1
    assert "Exception ignored" not in result.stderr and result.stderr == ""


def test_reader_gone_before_the_first_line(tmp_path: Path) -> None:
    # `| head -1` alone may read everything a small table writes; a reader that has left
    # before the first write makes the write itself fail (EPIPE)
    with subprocess.Popen(
        [CONSOLE_SCRIPT, "list", "--json", "--catalog", str(SHIPPED)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        err = process.stderr.read()
        code = process.wait(timeout=60)
    assert code == 0
    assert err == ""


def test_closed_stdout_is_one_line(tmp_path: Path) -> None:
    result = _nodeforge(f"list --catalog {SHIPPED} >&-", tmp_path)
    assert result.returncode == 2
    assert_one_line_error(result.stderr)


@pytest.mark.parametrize(
    "entry", [CONSOLE_SCRIPT, f"{sys.executable} -m nodeforge.cli"], ids=["script", "module"]
)
def test_broken_catalog_from_each_entry_point(catalog_dir: Path, entry: str) -> None:
    (catalog_dir / "profiles" / "p5.48xlarge.yml").write_text("name: p5.48xlarge\ngpu: [\n")
    result = _nodeforge(f"check --catalog {catalog_dir}", catalog_dir.parent, entry=entry)
    assert result.returncode == 2
    line = assert_one_line_error(result.stderr)
    assert "p5.48xlarge.yml:3:" in line


def test_libyaml_nesting_limit_is_one_line(catalog_dir: Path) -> None:
    # a separate process: were libyaml to overflow its stack, it would take pytest with it
    (catalog_dir / "compat.yml").write_text("[" * 100_000 + "\n")
    result = _nodeforge(f"matrix --catalog {catalog_dir}", catalog_dir.parent)
    assert result.returncode == 2
    assert "compat.yml" in assert_one_line_error(result.stderr)
