"""A testinfra host stand-in for checks and probes fed canned command output."""

from __future__ import annotations

from dataclasses import dataclass

OS_RELEASE = '. /etc/os-release && echo "$ID $ID_LIKE"'


@dataclass
class CannedResult:
    rc: int
    stdout: str
    stderr: str = ""


class CannedHost:
    """Answers the commands it knows (os-release: `release`), and refuses any other: a check
    that runs something unexpected fails instead of reading an empty answer."""

    def __init__(self, answers: dict[str, str | CannedResult], release: str = "debian") -> None:
        self.answers: dict[str, str | CannedResult] = {OS_RELEASE: release, **answers}

    def run(self, command: str, *args: str) -> CannedResult:
        full = command % args if args else command
        assert full in self.answers, f"unexpected command: {full}"
        answer = self.answers[full]
        return answer if isinstance(answer, CannedResult) else CannedResult(0, answer)
