"""The Xid watcher's core: kernel-log lines in, Prometheus textfile and a one-time alarm out.

`XidWatcher.feed(line)` takes the kernel log one line at a time, in any format
`nodeforge.parsers.kernel_log.parse_kernel_log` reads, and reads each event as that parser
reads it: the last `WINDOW` lines are parsed together, so the three-line "fallen off the bus"
probe message and an `NVRM: GPU at PCI:... GPU-<uuid>` line just before an Xid come out as they
would from the whole log. Each event is judged by the Xid policy (`nodeforge.xid_policy`),
counted per (xid, action, gpu), and the worst action since start is kept.

`textfile()` is the node_exporter textfile collector's view of that state (the metrics
monitoring/prometheus/nodeforge-gpu-alerts.yml reads). The first event that raises the worst
action to `reset_gpu` or beyond writes the state file, prints one line on stderr with systemd's
`<N>` priority prefix, and runs the hooks (drain the node from Slurm, taint it in Kubernetes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from nodeforge.outfile import write_output
from nodeforge.parsers.kernel_log import ParseError, XidEvent, parse_kernel_log
from nodeforge.xid_policy import ACTIONS, Action, XidPolicy, load_policy

WINDOW = 8
"""Lines parsed together: the probe message needs 3, and the UUID line comes just before."""
_REMEMBERED = 4096
"""Timestamped event lines remembered to recognise a line delivered twice."""
_NO_GPU = "unknown"
# systemd-journald reads a `<N>` prefix on a service's stderr as the line's priority
_PRIORITY: dict[Action, int] = {"replace_node": 2, "reboot_node": 2, "reset_gpu": 3}
_WARNING = 4
HOOK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Alarm:
    """What the first event needing `reset_gpu` or more reports (the state file's fields)."""

    action: Action
    reason: str
    xid: int | None
    gpu: str | None
    gpu_uuid: str | None
    time: str
    """When the watcher read it (UTC, ISO 8601); the kernel's own stamp is in `line`."""
    line: str

    def as_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "reason": self.reason,
            "xid": self.xid,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "time": self.time,
            "line": self.line,
        }


class XidWatcher:
    """The state of one watch: counts, the worst action, and where the alarm goes."""

    def __init__(
        self,
        *,
        state_path: Path,
        hooks: Sequence[Sequence[str]] = (),
        hook_timeout_s: float = HOOK_TIMEOUT_S,
        policy: XidPolicy | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.state_path = state_path
        self.hooks = [list(argv) for argv in hooks]
        self.hook_timeout_s = hook_timeout_s
        self.policy = policy or load_policy()
        self.err = err
        self.counts: Counter[tuple[str, Action, str]] = Counter()
        self.worst: Action | None = None
        self.alarm: Alarm | None = None
        self._window: deque[str] = deque(maxlen=WINDOW)
        self._fed = 0
        self._counted: set[int] = set()
        """Positions (lines fed before it) of the events in the window already counted."""
        self._recent: deque[str] = deque(maxlen=_REMEMBERED)
        self._recent_set: set[str] = set()
        self._uuids: dict[str, str] = {}
        self._seen: dict[tuple[str | None, int | None], XidEvent] = {}
        """The last event of each (GPU, Xid): an Xid 45's cause, when it was in the log."""

    @property
    def healthy(self) -> bool:
        return self.worst is None or self.worst == "application"

    def feed(self, line: str) -> list[XidEvent]:
        """Read one kernel-log line; the events it completes, each counted once."""
        line = line.rstrip("\r\n")
        self._window.append(line)
        self._fed += 1
        first = self._fed - len(self._window)
        self._counted = {position for position in self._counted if position >= first}
        if not any("NVRM:" in text for text in self._window):
            return []  # most of a kernel log is other drivers: nothing to parse
        try:
            events = parse_kernel_log("\n".join(self._window))
        except ParseError:
            # only the newest line can fail: the window without it parsed a line ago. Blanking
            # it keeps the positions, and one bad line must not blind the watcher to the next.
            self._window[-1] = ""
            self._say(_WARNING, f"skipped an Xid line with no readable code: {line}")
            return []
        new: list[XidEvent] = []
        for event in events:
            position = first + event.line - 1
            if position in self._counted:
                continue
            self._counted.add(position)
            if self._delivered_before(self._window[event.line - 1], event):
                continue
            new.append(self._count(event, self._window[event.line - 1]))
        return new

    def _delivered_before(self, text: str, event: XidEvent) -> bool:
        """A timestamped line read twice (overlapping sources, a replayed journal) is one
        event; without a timestamp, a repeat cannot be told from a new event, so it counts."""
        if event.timestamp.raw is None:
            return False
        if text in self._recent_set:
            return True
        if len(self._recent) == self._recent.maxlen:
            self._recent_set.discard(self._recent[0])
        self._recent.append(text)
        self._recent_set.add(text)
        return False

    def _count(self, event: XidEvent, text: str) -> XidEvent:
        if event.bus_id is not None:
            if event.gpu_uuid is not None:
                self._uuids[event.bus_id] = event.gpu_uuid
            elif event.bus_id in self._uuids:
                # the UUID line came before the window: the watcher remembers it for the bus
                event = event.model_copy(update={"gpu_uuid": self._uuids[event.bus_id]})
        cause = self._seen.get((event.bus_id, event.caused_by_xid))
        finding = self.policy.classify([*([cause] if cause else []), event]).findings[-1]
        self._seen[(event.bus_id, event.xid)] = event
        gpu = event.bus_id or _NO_GPU
        code = finding.entry.xid
        # the driver prints "GPU has fallen off the bus" after the Xid 79 of the same incident
        repeat = event.xid is None and any(
            key[0] == str(code) and key[2] == gpu for key in self.counts
        )
        if not repeat:
            label = str(event.xid if event.xid is not None else code)
            self.counts[(label, finding.action, gpu)] += 1
        before = self.worst
        if before is None or ACTIONS.index(finding.action) > ACTIONS.index(before):
            self.worst = finding.action
        if self.alarm is None and self.worst in _PRIORITY:
            self._raise_alarm(event, finding.entry.name, finding.action, text)
        return event

    def _raise_alarm(self, event: XidEvent, name: str, action: Action, text: str) -> None:
        what = f"Xid {event.xid} ({name})" if event.xid is not None else "GPU fell off the bus"
        reason = f"{what} on {event.bus_id or 'an unnamed GPU'}: {event.message}"
        self.alarm = Alarm(
            action=action,
            reason=reason,
            xid=event.xid,
            gpu=event.bus_id,
            gpu_uuid=event.gpu_uuid,
            time=datetime.now(UTC).isoformat(timespec="seconds"),
            line=text,
        )
        write_output(self.state_path, json.dumps(self.alarm.as_dict(), indent=2) + "\n")
        self._say(_PRIORITY[action], f"{action}: {reason}")
        for argv in self.hooks:
            self._run_hook(argv, self.alarm)

    def _run_hook(self, argv: list[str], alarm: Alarm) -> None:
        env = {
            **os.environ,
            "NODEFORGE_ACTION": alarm.action,
            "NODEFORGE_REASON": alarm.reason,
            "NODEFORGE_XID": "" if alarm.xid is None else str(alarm.xid),
            "NODEFORGE_GPU": alarm.gpu or "",
        }
        try:
            done = subprocess.run(  # argv as the node's admin configured it, no shell
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.hook_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            problem = f"did not finish in {self.hook_timeout_s:g} s"
        except OSError as exc:
            problem = f"could not start ({exc.strerror or exc})"
        else:
            if done.returncode == 0:
                return
            output = done.stderr.decode("utf-8", "replace").strip().splitlines()
            problem = f"exited {done.returncode}" + (f": {output[-1]}" if output else "")
        # the alarm is already in the state file and the metrics: a hook is a convenience
        self._say(3, f"hook {argv[0]} {problem}")

    def _say(self, priority: int, text: str) -> None:
        err = self.err or sys.stderr
        err.write(f"<{priority}>nodeforge xid-watch: {' '.join(text.split())}\n")
        err.flush()

    def textfile(self) -> str:
        """The node_exporter textfile collector format of the counts and the verdict."""
        lines = [
            "# HELP nodeforge_gpu_xid_total NVIDIA Xid events in the kernel log since the "
            "watcher started, by Xid, the action nodeforge's Xid policy gives it, and GPU "
            "(PCI bus id).",
            "# TYPE nodeforge_gpu_xid_total counter",
        ]
        lines += [
            f'nodeforge_gpu_xid_total{{xid="{_label(xid)}",action="{action}",'
            f'gpu="{_label(gpu)}"}} {count}'
            for (xid, action, gpu), count in sorted(self.counts.items())
        ]
        lines += [
            "# HELP nodeforge_node_health 1 healthy, 0 once an Xid event asks for reset_gpu or "
            "worse.",
            "# TYPE nodeforge_node_health gauge",
            f"nodeforge_node_health {int(self.healthy)}",
            "# HELP nodeforge_node_action_required 1 for the worst action the Xid events since "
            "start require, 0 for the others.",
            "# TYPE nodeforge_node_action_required gauge",
        ]
        lines += [
            f'nodeforge_node_action_required{{action="{action}"}} {int(action == self.worst)}'
            for action in ACTIONS
        ]
        return "\n".join(lines) + "\n"

    def write_textfile(self, path: Path) -> None:
        write_output(path, self.textfile())


def _label(value: str) -> str:
    """A Prometheus label value, escaped as the text exposition format asks."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
