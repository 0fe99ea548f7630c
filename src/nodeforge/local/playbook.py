"""Run ansible-playbook with the JSON-lines callback and follow it task by task.

The jsonl callback gives one event per line, so progress and the final counts are read from
data rather than scraped from the human output format.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeforge.errors import InputError

Progress = Callable[[str], None]


@dataclass
class RoleClock:
    """Seconds per role: a task's time, from its start to the next task's, goes to its role
    (the part of Ansible's task name before ' : '; tasks of a play's own go to 'play')."""

    seconds: dict[str, float] = field(default_factory=dict)
    _current: str | None = None
    _since: float = 0.0

    def start(self, task_name: str, now: float) -> None:
        self.stop(now)
        role, sep, _ = task_name.partition(" : ")
        self._current, self._since = (role if sep else "play"), now

    def stop(self, now: float) -> None:
        if self._current is not None:
            spent = self.seconds.get(self._current, 0.0) + now - self._since
            self.seconds[self._current] = round(spent, 3)
            self._current = None


@dataclass
class PlaybookResult:
    returncode: int
    tasks: int = 0
    changed: int = 0
    failures: list[str] = field(default_factory=list)
    changed_tasks: list[str] = field(default_factory=list)
    roles: RoleClock = field(default_factory=RoleClock)
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per host, Ansible's recap: ok, changed, failures, unreachable, skipped, rescued, ignored."""
    host_changes: dict[str, list[str]] = field(default_factory=dict)
    """Per host, the tasks that changed (or would, in check mode) something on it."""
    notices: dict[str, list[str]] = field(default_factory=dict)
    """Per host, what the play said of it (a debug of `nodeforge_notice`): skipped as busy, back
    in service ..."""


def ansible_playbook() -> str:
    """ansible-playbook beside this interpreter (the project's venv), else on PATH."""
    beside = Path(sys.executable).with_name("ansible-playbook")
    if beside.exists():
        return str(beside)
    found = shutil.which("ansible-playbook")
    if found is None:
        raise InputError(
            "ansible-playbook is not installed", fix="run `make quickstart` to set up the venv"
        )
    return found


def run_playbook(
    playbook: Path,
    *,
    inventory: Path,
    extra_vars: Path,
    repo_root: Path,
    log: Path,
    progress: Progress,
    extra_args: Sequence[str] = (),
    name_hosts: bool = False,
) -> PlaybookResult:
    """Run the playbook; every raw line goes to `log`, one progress line per task to `progress`
    (with `name_hosts`, a changed or failed line names its hosts: a run against many)."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.jsonl",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        # the venv's bin on PATH: ansible-config and friends are called by name
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    argv = [
        ansible_playbook(),
        str(playbook),
        "--inventory",
        str(inventory),
        "--extra-vars",
        f"@{extra_vars}",
        *extra_args,
    ]
    result = PlaybookResult(returncode=0)
    with (
        log.open("w", encoding="utf-8") as sink,
        subprocess.Popen(
            argv,
            cwd=repo_root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process,
    ):
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            _follow(line, result, progress, name_hosts=name_hosts)
        result.returncode = process.wait()
    result.roles.stop(time.monotonic())
    return result


def run_in_container(
    playbook: Path, container: str, extra_vars: dict[str, Any], *, repo_root: Path
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook against one running podman container, by name, with the repository's
    ansible.cfg and its human output captured (for a harness that reads what failed)."""
    return subprocess.run(
        [
            ansible_playbook(),
            "--inventory",
            f"{container},",
            "--connection",
            "nodeforge_podman",
            "--extra-vars",
            json.dumps({"ansible_python_interpreter": "/usr/bin/python3", **extra_vars}),
            str(playbook),
        ],
        cwd=repo_root,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
            "ANSIBLE_CACHE_PLUGIN": "memory",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        },
        capture_output=True,
        text=True,
        check=False,
    )


def expect_failure(
    playbook: Path, container: str, extra_vars: dict[str, Any], *, repo_root: Path
) -> str:
    """run_in_container for a run that must fail (a negative test): its output on one line,
    whitespace folded so a message Ansible wrapped still matches; AssertionError if it passed."""
    result = run_in_container(playbook, container, extra_vars, repo_root=repo_root)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, f"{playbook.name} passed, but must fail: {output}"
    return output


def _follow(
    line: str, result: PlaybookResult, progress: Progress, *, name_hosts: bool = False
) -> None:
    try:
        event: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError:
        return  # warnings and deprecations are plain text; they stay in the log
    if not isinstance(event, dict):
        return
    kind = event.get("_event", "")
    name = event.get("task", {}).get("name", "")
    if kind in ("v2_playbook_on_task_start", "v2_playbook_on_handler_task_start"):
        result.tasks += 1
        result.roles.start(name, time.monotonic())
        progress(f"[{result.tasks:3d}] {name}")
    elif kind == "v2_runner_on_ok":
        for host, outcome in event.get("hosts", {}).items():
            if "nodeforge_notice" in outcome:
                notice = str(outcome["nodeforge_notice"])
                result.notices.setdefault(host, []).append(notice)
                progress(f"      {host}: {notice}")
        changed = [h for h, outcome in event.get("hosts", {}).items() if outcome.get("changed")]
        for host in changed:
            result.host_changes.setdefault(host, []).append(name)
        if changed:
            result.changed_tasks.append(name)
            on = f" on {', '.join(changed)}" if name_hosts else ""
            progress(f"      changed: {name}{on}")
    elif kind in ("v2_runner_on_failed", "v2_runner_on_unreachable"):
        for host, outcome in event.get("hosts", {}).items():
            if outcome.get("ignore_errors"):
                continue
            message = str(outcome.get("msg") or outcome.get("stderr") or "failed").strip()
            result.failures.append(f"{name} on {host}: {message}")
            on = f" on {host}" if name_hosts else ""
            progress(f"      FAILED: {name}{on}: {message.splitlines()[0] if message else ''}")
    elif kind == "v2_playbook_on_stats":
        result.roles.stop(time.monotonic())
        stats: dict[str, dict[str, int]] = event.get("stats", {})
        result.changed = sum(int(s.get("changed", 0)) for s in stats.values())
        result.hosts = {host: {k: int(v) for k, v in s.items()} for host, s in stats.items()}
