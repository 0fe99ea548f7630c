"""Always terminate: every instance a run launched ends, and its placement group goes, whatever
happens in between (an exception, Ctrl-C, a CI runner's SIGTERM)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from nodeforge.aws import tags
from nodeforge.aws.errors import CleanupError
from nodeforge.aws.launch import launch_instances

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import RunInstancesRequestTypeDef

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Fleet:
    """What one run launched: instances and placement groups, for the cleanup to remove."""

    def __init__(self, ec2: EC2Client, run_id: str) -> None:
        self.ec2 = ec2
        self.run_id = run_id
        self.instance_ids: list[str] = []
        self.placement_groups: list[str] = []

    def placement_group(self, name: str, group_tags: Mapping[str, str]) -> str:
        self.ec2.create_placement_group(
            GroupName=name,
            Strategy="cluster",
            TagSpecifications=[
                {"ResourceType": "placement-group", "Tags": tags.tag_list(group_tags)}
            ],
        )
        self.placement_groups.append(name)
        return name

    def launch(self, request: RunInstancesRequestTypeDef) -> list[str]:
        ids = launch_instances(self.ec2, request)
        self.instance_ids.extend(ids)
        return ids

    def _live_instances(self) -> list[str]:
        """Recorded ids, and any instance tagged with the run id: a launch whose response was
        lost (a timeout after EC2 accepted it) still ends."""
        found = set(self.instance_ids)
        paginator = self.ec2.get_paginator("describe_instances")
        for page in paginator.paginate(
            Filters=[
                {"Name": f"tag:{tags.RUN_ID}", "Values": [self.run_id]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        ):
            for reservation in page.get("Reservations", []):
                found.update(i["InstanceId"] for i in reservation.get("Instances", []))
        return sorted(found)

    def cleanup(self, *, poll_s: float, timeout_s: float, progress: Callable[[str], None]) -> None:
        ids: list[str] = []
        try:
            ids = self._live_instances()
            if ids:
                progress(f"terminating {', '.join(ids)}")
                self.ec2.terminate_instances(InstanceIds=ids)
                delay = int(poll_s)  # botocore's waiter counts whole seconds
                self.ec2.get_waiter("instance_terminated").wait(
                    InstanceIds=ids,
                    WaiterConfig={
                        "Delay": delay,
                        "MaxAttempts": max(1, int(timeout_s / max(delay, 1))),
                    },
                )
            for group in self.placement_groups:
                progress(f"deleting placement group {group}")
                self.ec2.delete_placement_group(GroupName=group)
        except (ClientError, BotoCoreError, WaiterError) as exc:
            raise CleanupError(
                f"could not clean up validation run {self.run_id} ({exc}). Terminate what is "
                f"left by hand: instances tagged {tags.RUN_ID}={self.run_id} "
                f"({', '.join(ids) or 'none recorded'}), then placement groups "
                f"{', '.join(self.placement_groups) or 'none'}"
            ) from exc
        self.instance_ids.clear()
        self.placement_groups.clear()


@contextmanager
def validation_fleet(
    ec2: EC2Client,
    *,
    run_id: str,
    poll_s: float,
    timeout_s: float,
    progress: Callable[[str], None],
) -> Iterator[Fleet]:
    """A Fleet whose instances and placement groups are removed on the way out, however it is
    left. SIGINT and SIGTERM interrupt the body; during the cleanup they wait for it to end."""
    fleet = Fleet(ec2, run_id)
    deferred: list[int] = []

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def defer(signum: int, _frame: FrameType | None) -> None:
        deferred.append(signum)
        progress("interrupted: terminating the validation instances first")

    with _handlers(interrupt):
        try:
            yield fleet
        finally:
            with _handlers(defer):
                fleet.cleanup(poll_s=poll_s, timeout_s=timeout_s, progress=progress)
    if deferred:
        raise KeyboardInterrupt


@contextmanager
def _handlers(handler: Callable[[int, FrameType | None], Any]) -> Iterator[None]:
    """Install `handler` for SIGINT and SIGTERM, and put the previous handlers back after."""
    # Python lets only the main thread set handlers; elsewhere the caller owns signals
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            if old is not None:
                signal.signal(signum, old)
