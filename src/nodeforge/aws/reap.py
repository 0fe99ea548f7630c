"""The second net under promote's cleanup: validation instances and placement groups of an image
whose `nodeforge:ttl` has passed, left by a run whose machine died before it could end them.

Instances normally end themselves at their TTL (user data schedules a shutdown, which
terminates them); this finds those whose timer never ran. A placement group goes only once no
instance is in it: the instances' termination takes minutes, so a group still holding one is
left for the next reap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.errors import aws_error

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

Action = Literal["terminate", "delete", "keep", "wait"]
_LIVE = ["pending", "running", "stopping", "stopped"]


@dataclass(frozen=True)
class Reaped:
    kind: Literal["instance", "placement-group"]
    name: str
    ttl: str
    action: Action
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def expired(ttl: str, now: datetime) -> bool | None:
    """Whether the TTL tag's time has passed; None when the tag is not a time nodeforge wrote."""
    try:
        moment = datetime.strptime(ttl, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return moment <= now


def _judge(ttl: str, now: datetime, verb: Action) -> tuple[Action, str]:
    verdict = expired(ttl, now)
    if verdict is None:
        return "keep", f"{tags.TTL} {ttl!r} is not a UTC time like 2026-12-02T16:00:00Z"
    if not verdict:
        return "keep", f"lives until {ttl}"
    return verb, f"expired at {ttl}"


def reap(
    clients: AwsClients,
    *,
    image: str,
    now: datetime,
    dry_run: bool,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[Reaped]:
    """Terminate the image's expired validation instances, delete its expired and empty
    placement groups (in the config's region); what was found and done, or would be."""
    ec2 = clients.ec2
    try:
        instances = _instances(ec2, image)
        found = [
            Reaped("instance", instance_id, ttl, *_judge(ttl, now, "terminate"))
            for instance_id, (ttl, _group) in instances.items()
        ]
        ending = [r.name for r in found if r.action == "terminate"]
        if ending and not dry_run:
            progress(f"terminating {', '.join(ending)}")
            ec2.terminate_instances(InstanceIds=ending)
        # an instance being terminated still holds its group for a few minutes
        occupied = {group for _ttl, group in instances.values()}
        for group, ttl in _placement_groups(ec2, image).items():
            action, reason = _judge(ttl, now, "delete")
            if action == "delete" and group in occupied:
                action, reason = "wait", f"{reason}; instances still in it: reap again later"
            if action == "delete" and not dry_run:
                progress(f"deleting placement group {group}")
                ec2.delete_placement_group(GroupName=group)
            found.append(Reaped("placement-group", group, ttl, action, reason))
    except (ClientError, BotoCoreError) as exc:
        raise aws_error(exc, f"reaping validation runs of {image}") from None
    return found


def _instances(ec2: EC2Client, image: str) -> dict[str, tuple[str, str]]:
    """The image's validation instances that are not terminated: id -> (TTL tag, group)."""
    found: dict[str, tuple[str, str]] = {}
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{tags.IMAGE}", "Values": [image]},
            {"Name": "tag-key", "Values": [tags.RUN_ID]},
            {"Name": "instance-state-name", "Values": _LIVE},
        ]
    ):
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                ttl = tags.tag_map(instance.get("Tags", [])).get(tags.TTL, "")
                group = instance.get("Placement", {}).get("GroupName", "")
                found[instance["InstanceId"]] = (ttl, group)
    return found


def _placement_groups(ec2: EC2Client, image: str) -> dict[str, str]:
    """The image's validation placement groups: name -> TTL tag."""
    groups = ec2.describe_placement_groups(
        Filters=[{"Name": f"tag:{tags.IMAGE}", "Values": [image]}]
    )["PlacementGroups"]
    return {
        group["GroupName"]: tags.tag_map(group.get("Tags", [])).get(tags.TTL, "")
        for group in groups
        if "GroupName" in group
    }
