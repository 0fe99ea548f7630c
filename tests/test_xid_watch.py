"""`nodeforge xid-watch` and its core, fed the real kernel logs of the parser's fixtures."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from nodeforge.cli import main
from nodeforge.parsers.kernel_log import ParseError, parse_kernel_log
from nodeforge.xid_policy import ACTIONS, classify
from nodeforge.xid_watch import XidWatcher
from tests.conftest import REPO

LOGS = REPO / "tests" / "fixtures" / "outputs" / "kernel_log"
HEALTHY = LOGS / "dmesg_decode_iso_boot_clean.log"
XID79 = LOGS / "dmesg_ctime_xid79_crash_dump_continuation.log"
XID79_KMSG = LOGS / "kmsg_raw_xid79_constructed.log"
XID48_63 = LOGS / "dmesg_iso_xid48_63_94_dbe.log"
XID63 = LOGS / "bare_xid63_row_remapper.log"
# no fixture holds an Xid 64: this line follows the Xid 63 line's form (constructed)
XID64_LINE = "NVRM: Xid (PCI:0000:10:1c): 64, pid=1896, Row Remapper: remapping failed."
FALLEN = LOGS / "dmesg_fallen_off_bus_multiline_no_xid.log"

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _metrics(text: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """The textfile read back: name -> labels -> value; also checks each has HELP and TYPE."""
    found: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    declared: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            _, kind, name, *_ = line.split(" ", 3)
            declared.setdefault(name, set()).add(kind)
            continue
        match = _SAMPLE.match(line)
        assert match, line
        name, labels, value = match.groups()
        assert declared.get(name) == {"HELP", "TYPE"}, name
        found.setdefault(name, {})[frozenset(_LABEL.findall(labels or ""))] = float(value)
    return found


def _xid_counts(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (dict(k)["xid"], dict(k)["action"], dict(k)["gpu"]): v
        for k, v in _metrics(text).get("nodeforge_gpu_xid_total", {}).items()
    }


def _health(text: str) -> tuple[float, dict[str, float]]:
    metrics = _metrics(text)
    (health,) = metrics["nodeforge_node_health"].values()
    actions = {dict(k)["action"]: v for k, v in metrics["nodeforge_node_action_required"].items()}
    return health, actions


def _watch(
    path: Path,
    tmp_path: Path,
    hooks: Sequence[Sequence[str]] = (),
    hook_timeout_s: float = 60.0,
) -> tuple[XidWatcher, io.StringIO]:
    err = io.StringIO()
    watcher = XidWatcher(
        state_path=tmp_path / "state.json", hooks=hooks, hook_timeout_s=hook_timeout_s, err=err
    )
    for line in path.read_text(encoding="utf-8").splitlines():
        watcher.feed(line)
    return watcher, err


def test_a_healthy_log_exports_health_1_and_no_alarm(tmp_path: Path) -> None:
    watcher, err = _watch(HEALTHY, tmp_path)
    health, actions = _health(watcher.textfile())
    assert health == 1
    assert actions == dict.fromkeys(ACTIONS, 0)
    assert _xid_counts(watcher.textfile()) == {}
    assert not (tmp_path / "state.json").exists()
    assert err.getvalue() == ""


def test_xid79_reboots_once_with_the_uuid_line_read(tmp_path: Path) -> None:
    watcher, err = _watch(XID79, tmp_path)
    # the Xid 79 and the "GPU has fallen off the bus" after it are one incident
    assert _xid_counts(watcher.textfile()) == {("79", "reboot_node", "0000:a1:00"): 1}
    health, actions = _health(watcher.textfile())
    assert (health, actions["reboot_node"], sum(actions.values())) == (0, 1, 1)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["action"] == "reboot_node"
    assert (state["xid"], state["gpu"]) == (79, "0000:a1:00")
    assert state["gpu_uuid"] == "GPU-979426f2-893a-7cbb-c4cf-81472f89a462"
    assert state["line"].startswith("[Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:a1:00): 79")
    assert "Xid 79" in state["reason"] and state["time"]
    assert err.getvalue().splitlines() == [
        "<2>nodeforge xid-watch: reboot_node: Xid 79 (GPU has fallen off the bus) on "
        "0000:a1:00: GPU has fallen off the bus."
    ]


def test_xid63_and_64_replace_the_node(tmp_path: Path) -> None:
    watcher, err = _watch(XID63, tmp_path)
    watcher.feed(XID64_LINE)
    assert _xid_counts(watcher.textfile()) == {
        ("63", "replace_node", "0000:10:1c"): 1,
        ("64", "replace_node", "0000:10:1c"): 1,
    }
    assert _health(watcher.textfile()) == (0, {**dict.fromkeys(ACTIONS, 0), "replace_node": 1})
    assert json.loads((tmp_path / "state.json").read_text())["xid"] == 63
    assert err.getvalue().splitlines() == [
        "<2>nodeforge xid-watch: replace_node: Xid 63 (GPU memory remapping event) on 0000:10:1c: "
        "Row Remapper: New row marked for remapping, reset gpu to activate."
    ]


def test_first_alarm_is_kept_while_the_gauge_follows_the_worst(tmp_path: Path) -> None:
    watcher, err = _watch(XID48_63, tmp_path)
    assert _xid_counts(watcher.textfile()) == {
        ("48", "reset_gpu", "0000:19:00"): 1,
        ("63", "replace_node", "0000:19:00"): 1,
        ("94", "application", "0000:19:00"): 9,
    }
    assert _health(watcher.textfile())[1] == {**dict.fromkeys(ACTIONS, 0), "replace_node": 1}
    # the state file, the priority line and the hooks are the first escalation's, once
    assert json.loads((tmp_path / "state.json").read_text())["action"] == "reset_gpu"
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith("<3>nodeforge xid-watch: reset_gpu: Xid 48")


def test_the_three_line_fallen_off_bus_message_is_one_event(tmp_path: Path) -> None:
    watcher, err = _watch(FALLEN, tmp_path)
    assert _xid_counts(watcher.textfile()) == {("79", "reboot_node", "0000:b3:00"): 1}
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["xid"], state["gpu"], state["action"]) == (None, "0000:b3:00", "reboot_node")
    assert "fallen off the bus and is not responding" in state["reason"]
    assert err.getvalue().startswith("<2>")


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_line_by_line_agrees_with_the_whole_log(log: Path, tmp_path: Path) -> None:
    text = log.read_text(encoding="utf-8")
    try:
        verdict = classify(parse_kernel_log(text))
    except ParseError:
        pytest.skip("the whole log does not parse")
    watcher, _ = _watch(log, tmp_path)
    assert watcher.worst == verdict.action
    assert watcher.healthy == verdict.healthy


def test_an_event_fed_twice_counts_once(tmp_path: Path) -> None:
    lines = XID48_63.read_text(encoding="utf-8").splitlines()
    watcher = XidWatcher(state_path=tmp_path / "state.json", err=io.StringIO())
    # two overlapping reads of the same log (a replayed journal, a rotated file read again)
    for line in [*lines[:14], *lines[10:]]:
        watcher.feed(line)
    assert _xid_counts(watcher.textfile())[("94", "application", "0000:19:00")] == 9
    assert _xid_counts(watcher.textfile())[("48", "reset_gpu", "0000:19:00")] == 1


def test_an_unreadable_xid_line_is_reported_and_skipped(tmp_path: Path) -> None:
    err = io.StringIO()
    watcher = XidWatcher(state_path=tmp_path / "state.json", err=err)
    watcher.feed("[ 10.000000] NVRM: Xid (PCI:0000:3b:00): INVALID")
    assert err.getvalue().startswith("<4>nodeforge xid-watch: skipped an Xid line")
    events = watcher.feed(
        "[ 11.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    )
    assert [e.xid for e in events] == [79]


_HOOK = (
    "import json, os, sys; "
    "open(sys.argv[1], 'a').write(json.dumps("
    "{k: v for k, v in os.environ.items() if k.startswith('NODEFORGE_')}) + '\\n')"
)


def test_hooks_run_once_with_the_environment_and_a_failing_one_does_not_stop_it(
    tmp_path: Path,
) -> None:
    record = tmp_path / "hook.jsonl"
    hooks = [
        [sys.executable, "-c", "import sys; sys.exit('drain refused')"],
        [str(tmp_path / "no-such-command")],
        [sys.executable, "-c", _HOOK, str(record)],
    ]
    watcher, err = _watch(XID48_63, tmp_path, hooks=hooks)
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 1
    assert runs[0]["NODEFORGE_ACTION"] == "reset_gpu"
    assert (runs[0]["NODEFORGE_XID"], runs[0]["NODEFORGE_GPU"]) == ("48", "0000:19:00")
    assert runs[0]["NODEFORGE_REASON"].startswith("Xid 48 (Double Bit ECC Error) on 0000:19:00")
    problems = err.getvalue().splitlines()[1:]
    assert (
        problems[0].startswith("<3>nodeforge xid-watch: hook ") and "drain refused" in problems[0]
    )
    assert "could not start" in problems[1]
    assert watcher.worst == "replace_node"  # it read on after the hooks


def test_a_hook_that_hangs_is_stopped(tmp_path: Path) -> None:
    hooks = [[sys.executable, "-c", "import time; time.sleep(30)"]]
    started = time.monotonic()
    _, err = _watch(XID79, tmp_path, hooks=hooks, hook_timeout_s=0.5)
    assert time.monotonic() - started < 10
    assert "did not finish in 0.5 s" in err.getvalue()


def _args(tmp_path: Path, *more: str) -> list[str]:
    prom, state = tmp_path / "xid.prom", tmp_path / "state.json"
    return ["xid-watch", "--textfile", str(prom), "--state", str(state), *more]


def test_command_reads_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "hook.jsonl"
    hook = f'{sys.executable} -c "{_HOOK}" {record}'
    assert main(_args(tmp_path, "--once", "--source", str(XID79_KMSG), "--hook", hook)) == 0
    prom = (tmp_path / "xid.prom").read_text()
    assert _xid_counts(prom) == {("79", "reboot_node", "0000:a1:00"): 1}
    assert _health(prom)[0] == 0
    assert json.loads((tmp_path / "state.json").read_text())["gpu_uuid"].startswith("GPU-9794")
    assert json.loads(record.read_text())["NODEFORGE_XID"] == "79"
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("<2>nodeforge xid-watch: reboot_node: Xid 79")
    assert not list(tmp_path.glob(".*.part"))  # written by rename, nothing left beside it


def test_command_reads_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(HEALTHY.read_bytes())))
    # without --once too: standard input ends when its writer does
    assert main(_args(tmp_path)) == 0
    assert _health((tmp_path / "xid.prom").read_text()) == (1, dict.fromkeys(ACTIONS, 0))
    assert not (tmp_path / "state.json").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("more", "expected"),
    [
        (["--source", "/no/such/kernel.log"], "/no/such/kernel.log: field '--source': cannot read"),
        (["--source", "."], "field '--source': cannot read"),
        (["--hook", "scontrol 'update"], "field '--hook': cannot split"),
        (["--hook", "  "], "field '--hook': an empty hook"),
    ],
)
def test_command_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], more: list[str], expected: str
) -> None:
    assert main(_args(tmp_path, "--once", *more)) == 2
    err = capsys.readouterr().err
    assert expected in err and "Fix:" in err and "Traceback" not in err


def test_command_needs_the_textfile_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "textfile_collector" / "xid.prom"
    code = main(
        ["xid-watch", "--once", "--source", str(HEALTHY), "--textfile", str(missing),
         "--state", str(tmp_path / "s.json")]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"{missing.parent}: field '--textfile': the folder of the textfile does not exist" in err
    assert not missing.parent.exists()
    wrong = tmp_path / "xid.txt"
    assert main(["xid-watch", "--textfile", str(wrong), "--state", str(tmp_path / "s")]) == 2
    assert "reads only files named *.prom" in capsys.readouterr().err


def test_command_follows_a_growing_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    lines = XID79.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:1]))
    prom = tmp_path / "xid.prom"
    command = [sys.executable, "-m", "nodeforge.cli", *_args(tmp_path)]
    command += ["--source", str(log), "--poll-interval", "0.05"]
    watcher = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        assert _wait_for(lambda: prom.exists() and _health(prom.read_text())[0] == 1)
        with log.open("a", encoding="utf-8") as stream:
            # a line in two writes: the watcher waits for its newline
            stream.write("".join(lines[1:3])[:-20])
            stream.flush()
            time.sleep(0.3)
            assert _health(prom.read_text())[0] == 1
            stream.write("".join(lines[1:3])[-20:] + "".join(lines[3:]))
        assert _wait_for(lambda: _health(prom.read_text())[0] == 0)
        assert _xid_counts(prom.read_text()) == {("79", "reboot_node", "0000:a1:00"): 1}
        assert watcher.poll() is None  # still following
    finally:
        watcher.terminate()
        _, err = watcher.communicate(timeout=10)
    assert err.decode().startswith("<2>nodeforge xid-watch: reboot_node: Xid 79")


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _fake_journalctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: Path) -> Path:
    """journalctl replaced on PATH: prints `log` and records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "journalctl.args"
    script = bin_dir / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" > {called}\ncat {log}\n', encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return called


@pytest.mark.parametrize(
    ("once", "follow"), [(["--once"], ""), ([], " --follow --no-tail")], ids=["once", "follow"]
)
def test_command_reads_this_boots_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, once: list[str], follow: str
) -> None:
    called = _fake_journalctl(tmp_path, monkeypatch, LOGS / "journal_xid120_gsp_crashcat.log")
    # following: the watcher ends when journalctl does, as with standard input
    assert main(_args(tmp_path, *once, "--source", "journal")) == 0
    assert called.read_text().strip() == (
        "--dmesg --boot --no-pager --output=short-monotonic" + follow
    )
    counts = _xid_counts((tmp_path / "xid.prom").read_text())
    assert {xid for xid, _, _ in counts} == {"120"}
    assert json.loads((tmp_path / "state.json").read_text())["xid"] == 120


def test_command_without_journalctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(_args(tmp_path, "--once", "--source", "journal")) == 2
    err = capsys.readouterr().err
    assert "field '--source': cannot run journalctl" in err and "/dev/kmsg" in err
    assert "Traceback" not in err
