"""wait_for_ssh(): an instance that never lets the runner in is infrastructure, not the image."""

from __future__ import annotations

import pytest

from nodeforge.aws.errors import InstanceUnreachableError
from nodeforge.aws.reachable import wait_for_ssh
from tests.aws.conftest import FakeClock


class FakeSsh:
    """Answers per host: refuses `refusals` times, then lets in (or never, with None)."""

    def __init__(self, refusals: dict[str, int | None]) -> None:
        self.refusals = refusals
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        host = argv[-2].split("@")[1]
        left = self.refusals[host]
        if left == 0:
            return 0, ""
        if left is not None:
            self.refusals[host] = left - 1
        return 255, f"ssh: connect to host {host} port 22: Connection refused\n"


def test_waits_until_sshd_answers() -> None:
    ssh = FakeSsh({"10.0.0.5": 2, "10.0.0.6": 0})
    clock = FakeClock()
    wait_for_ssh(
        ["10.0.0.5", "10.0.0.6"], "ubuntu", timeout_s=600, poll_s=15, clock=clock.clock(), ssh=ssh
    )
    assert len(ssh.calls) == 4
    first = ssh.calls[0]
    assert first[-2:] == ["ubuntu@10.0.0.5", "true"]
    # never a prompt, never a stale known_hosts entry
    assert {"BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"} <= set(
        first
    )


def test_an_instance_that_never_answers_is_unreachable() -> None:
    ssh = FakeSsh({"10.0.0.5": None})
    with pytest.raises(InstanceUnreachableError) as caught:
        wait_for_ssh(
            ["10.0.0.5"], "ubuntu", timeout_s=60, poll_s=15, clock=FakeClock().clock(), ssh=ssh
        )
    message = str(caught.value)
    assert "ubuntu@10.0.0.5 does not answer SSH after 60 s" in message
    assert "Connection refused" in message and "security group" in message
