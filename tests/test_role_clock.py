"""Seconds per role of a converge, from the task-start events of Ansible's JSON stream."""

from __future__ import annotations

import pytest

from nodeforge.local.playbook import PlaybookResult, _follow


def _start(name: str) -> str:
    return f'{{"_event": "v2_playbook_on_task_start", "task": {{"name": "{name}"}}}}'


def test_each_task_counts_for_its_role_until_the_next_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 2.0, 5.0, 6.0, 10.0])
    monkeypatch.setattr("nodeforge.local.playbook.time.monotonic", lambda: next(clock))
    result = PlaybookResult(returncode=0)
    for line in (
        _start("base : Packages | install"),
        _start("base : Tuning | sysctl"),
        _start("nvidia_driver : Install | packages"),
        _start("Gathering Facts"),
        '{"_event": "v2_playbook_on_stats", "stats": {"h": {"changed": 3}}}',
    ):
        _follow(line, result, lambda _: None)
    assert result.roles.seconds == {"base": 5.0, "nvidia_driver": 1.0, "play": 4.0}
    assert result.tasks == 4
    assert result.changed == 3
