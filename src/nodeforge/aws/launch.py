"""Launch validation instances of one profile and wait until they pass their status checks."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from botocore.exceptions import ClientError

from nodeforge.aws.config import PipelineConfig
from nodeforge.aws.errors import InstanceUnreachableError, NoCapacityError
from nodeforge.aws.netlayout import Slot
from nodeforge.aws.tags import tag_list
from nodeforge.catalog.models import Profile

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType
    from mypy_boto3_ec2.type_defs import (
        InstanceNetworkInterfaceSpecificationTypeDef,
        RunInstancesRequestTypeDef,
    )

    from nodeforge.aws.capacity import Capacity

NO_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientReservedInstanceCapacity",
        "ReservationCapacityExceeded",
    }
)
_GONE = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Clock:
    """Time as the pipeline sees it; tests pass one that never sleeps."""

    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = field(default=_utcnow)


def network_interfaces(
    slots: Sequence[Slot], *, subnet_id: str, security_group_ids: list[str]
) -> list[InstanceNetworkInterfaceSpecificationTypeDef]:
    """The RunInstances interfaces of a layout (nodeforge.aws.netlayout), all in one subnet."""
    specs: list[InstanceNetworkInterfaceSpecificationTypeDef] = []
    for slot in slots:
        spec: InstanceNetworkInterfaceSpecificationTypeDef = {
            "NetworkCardIndex": slot.card,
            "DeviceIndex": slot.device_index,
            "SubnetId": subnet_id,
            "Groups": list(security_group_ids),
            "DeleteOnTermination": True,
        }
        # ENA ("interface") is EC2's default: sent without a type, as EC2's examples do
        if slot.interface != "interface":
            spec["InterfaceType"] = slot.interface
        specs.append(spec)
    return specs


def run_instances_request(
    *,
    ami_id: str,
    profile: Profile,
    count: int,
    config: PipelineConfig,
    interfaces: list[InstanceNetworkInterfaceSpecificationTypeDef],
    placement_group: str | None,
    capacity: Capacity | None,
    tags: Mapping[str, str],
    client_token: str,
) -> RunInstancesRequestTypeDef:
    request: RunInstancesRequestTypeDef = {
        "ImageId": ami_id,
        # profile names are instance type names; EC2 itself says when one is not
        "InstanceType": cast("InstanceTypeType", profile.name),
        "MinCount": count,
        "MaxCount": count,
        "NetworkInterfaces": interfaces,
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": tag_list(tags)}
            for kind in ("instance", "volume", "network-interface")
        ],
        # the same token on botocore's retries: a retried launch cannot start a second fleet
        "ClientToken": client_token[:64],
        # If the machine running promote dies, the instance still ends: it shuts itself down
        # at its TTL, and a shutdown from inside terminates it (`nodeforge reap` is the second
        # net, for an instance whose timer never ran).
        "InstanceInitiatedShutdownBehavior": "terminate",
        "UserData": self_termination_script(config.ttl_minutes),
    }
    if config.key_name:
        request["KeyName"] = config.key_name
    if config.iam_instance_profile:
        request["IamInstanceProfile"] = {"Name": config.iam_instance_profile}
    if placement_group:
        request["Placement"] = {"GroupName": placement_group}
    if capacity is not None:
        request["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": capacity.reservation_id}
        }
        if capacity.capacity_block:
            request["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return request


def self_termination_script(ttl_minutes: int) -> str:
    """User data that schedules the instance's own shutdown (so its termination) at the TTL."""
    return (
        "#!/bin/sh\n"
        f"# nodeforge validation instance: terminate after {ttl_minutes} minutes\n"
        f"shutdown -h +{ttl_minutes} 'nodeforge validation TTL reached'\n"
    )


def launch_instances(ec2: EC2Client, request: RunInstancesRequestTypeDef) -> list[str]:
    """Start the instances, or raise NoCapacityError saying where capacity may be found."""
    try:
        response = ec2.run_instances(**request)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") not in NO_CAPACITY_CODES:
            raise
        instance_type = request["InstanceType"]
        reservation = request.get("CapacityReservationSpecification", {})
        target = reservation.get("CapacityReservationTarget", {}).get("CapacityReservationId")
        if target:
            fix = (
                f"the capacity reservation {target} has no free {instance_type}: wait for its "
                "instances to end, or point capacity.<profile>.reservation_id at another one"
            )
        else:
            fix = (
                f"request {instance_type} through a capacity reservation or a Capacity Block "
                "for ML (capacity.<profile> in the config), or set subnet_id to a subnet in "
                "another availability zone"
            )
        raise NoCapacityError(
            f"EC2 has no {instance_type} capacity ({error.get('Code')}: "
            f"{error.get('Message', '')}). Fix: {fix}"
        ) from None
    return [instance["InstanceId"] for instance in response["Instances"]]


def wait_ready(
    ec2: EC2Client, instance_ids: list[str], *, timeout_s: float, poll_s: float, clock: Clock
) -> list[str]:
    """Private IP addresses of the instances once running with both status checks ok."""
    started = clock.monotonic()
    while True:
        waiting = _not_ready(ec2, instance_ids)
        if not waiting:
            break
        if clock.monotonic() - started >= timeout_s:
            detail = "; ".join(f"{i}: {why}" for i, why in sorted(waiting.items()))
            raise InstanceUnreachableError(
                f"instances not reachable after {timeout_s:.0f} s ({detail}). The AMI may not "
                "boot: read `aws ec2 get-console-output --instance-id ID`, or raise "
                "ready_timeout_s in the config"
            )
        clock.sleep(poll_s)
    reservations = ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
    addresses = {
        instance["InstanceId"]: instance.get("PrivateIpAddress", "")
        for reservation in reservations
        for instance in reservation.get("Instances", [])
    }
    return [addresses[i] for i in instance_ids]


def _not_ready(ec2: EC2Client, instance_ids: list[str]) -> dict[str, str]:
    """Why each instance that is not ready yet is not; raises once one can never be."""
    try:
        statuses = ec2.describe_instance_status(InstanceIds=instance_ids, IncludeAllInstances=True)
    except ClientError as exc:
        # EC2 is eventually consistent: a fresh instance id may not be visible for a moment
        if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
            return dict.fromkeys(instance_ids, "not visible yet")
        raise
    seen = {s["InstanceId"]: s for s in statuses["InstanceStatuses"]}
    waiting: dict[str, str] = {}
    for instance_id in instance_ids:
        status = seen.get(instance_id)
        if status is None:
            waiting[instance_id] = "not visible yet"
            continue
        state = status["InstanceState"]["Name"]
        if state in _GONE:
            raise InstanceUnreachableError(
                f"{instance_id} went {state} before it became ready: the AMI may not boot, or "
                "the capacity ended; read `aws ec2 describe-instances` StateReason"
            )
        instance = status.get("InstanceStatus", {}).get("Status", "unknown")
        system = status.get("SystemStatus", {}).get("Status", "unknown")
        if (state, instance, system) != ("running", "ok", "ok"):
            waiting[instance_id] = f"state {state}, instance status {instance}, system {system}"
    return waiting
