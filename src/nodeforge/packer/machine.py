"""Packer's machine-readable output (`-machine-readable`): one event per line.

Format (Packer's MachineReadableUi): `TIMESTAMP,TARGET,TYPE,DATA...`. Inside a data field a
comma is written `%!(PACKER_COMMA)`, a newline a literal `\\n` and a carriage return `\\r`, so
splitting on commas is exact. Lines that do not start with a timestamp (plugin chatter, panics)
are kept as plain text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_COMMA = "%!(PACKER_COMMA)"


@dataclass(frozen=True)
class Event:
    timestamp: int
    target: str
    type: str
    data: tuple[str, ...]

    @property
    def ui_text(self) -> str | None:
        """The message of a `ui` event (say, message, error), else None."""
        if self.type == "ui" and len(self.data) >= 2:
            return self.data[1]
        return None


def unescape(field_text: str) -> str:
    return field_text.replace(_COMMA, ",").replace("\\n", "\n").replace("\\r", "\r")


def parse_line(line: str) -> Event | None:
    """One machine-readable line as an event; None when the line is not machine-readable."""
    parts = line.rstrip("\r\n").split(",")
    if len(parts) < 3 or not parts[0].isdigit() or not parts[2]:
        return None
    return Event(int(parts[0]), parts[1], parts[2], tuple(unescape(p) for p in parts[3:]))


@dataclass
class Output:
    """What a run said: ui lines, artifacts (target -> region -> AMI id), errors, error count."""

    ui: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text): kind is say, message or error."""
    artifacts: dict[str, dict[str, str]] = field(default_factory=dict)
    build_errors: dict[str, list[str]] = field(default_factory=dict)
    error_count: int = 0
    version: str | None = None
    plain: list[str] = field(default_factory=list)

    def add(self, event: Event) -> None:
        if event.type == "ui" and len(event.data) >= 2:
            self.ui.append((event.data[0], event.data[1]))
        elif event.type == "artifact" and len(event.data) >= 3 and event.data[1] == "id":
            # amazon-ebs writes every region's AMI into one id: `us-east-1:ami-1,us-west-2:ami-2`
            # (the commas arrive escaped, so they are data, not field separators)
            for pair in event.data[2].split(","):
                region, _, ami = pair.partition(":")
                if ami:
                    self.artifacts.setdefault(event.target, {})[region] = ami
        elif event.type == "error-count" and event.data and event.data[0].isdigit():
            self.error_count = int(event.data[0])
        elif event.type == "error" and event.data:
            self.build_errors.setdefault(event.target, []).append(event.data[0])
        elif event.type == "version" and event.data:
            self.version = event.data[0]

    def feed(self, line: str) -> Event | None:
        event = parse_line(line)
        if event is None:
            if line.strip():
                self.plain.append(line.rstrip("\r\n"))
        else:
            self.add(event)
        return event

    @property
    def amis(self) -> dict[str, str]:
        """Region -> AMI id over every build target."""
        return {r: ami for regions in self.artifacts.values() for r, ami in regions.items()}

    def error_lines(self, limit: int = 10) -> list[str]:
        """The last error lines: per-build errors first, then ui errors, then plain output."""
        lines = [f"{t}: {m}" if t else m for t, ms in self.build_errors.items() for m in ms]
        if not lines:
            lines = [text for kind, text in self.ui if kind == "error"]
        if not lines:
            lines = self.plain
        flat = [part for text in lines for part in text.splitlines() if part.strip()]
        return flat[-limit:]
