"""Before validation: does every instance let the runner in over SSH?

An instance can pass both EC2 status checks and still refuse the runner: a security group or
route that does not admit it, sshd still starting, a key the agent does not hold. Then the run
has judged nothing, and the AMI is not at fault; promote counts the profile as unreachable, an
infrastructure failure, instead of letting every check fail against the image.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from nodeforge.aws.errors import InstanceUnreachableError
from nodeforge.aws.launch import Clock

FRESH_HOST_SSH = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
"""A validation instance is minutes old and its private address may have served another host:
a known_hosts entry for it would be stale, and a host-key prompt would hang the run (Packer's own
connection to its builder does not check the key either)."""

Ssh = Callable[[list[str]], tuple[int, str]]
"""Run an ssh command line: (exit code, stderr)."""


def _ssh(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return done.returncode, done.stderr


def wait_for_ssh(
    hosts: Sequence[str],
    user: str,
    *,
    timeout_s: float,
    poll_s: float,
    clock: Clock,
    ssh: Ssh = _ssh,
) -> None:
    """Return once `ssh user@host true` succeeds on every host; InstanceUnreachableError with
    ssh's last words when one has not within timeout_s."""
    started = clock.monotonic()
    for host in hosts:
        while True:
            code, said = ssh(
                [
                    "ssh",
                    *FRESH_HOST_SSH.split(),
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "ConnectTimeout=10",
                    f"{user}@{host}",
                    "true",
                ]
            )
            if code == 0:
                break
            if clock.monotonic() - started > timeout_s:
                last = said.strip().splitlines()[-1:] or [f"ssh exited {code}"]
                raise InstanceUnreachableError(
                    f"{user}@{host} does not answer SSH after {timeout_s:g} s ({last[0]}). "
                    "Check that the security group admits the runner on port 22 and that "
                    "your SSH agent holds the key pair's key"
                )
            clock.sleep(poll_s)
