"""Which capacity a profile's validation instances launch into: the reservation the config
names, or (`find: true`) an active On-Demand Capacity Reservation or Capacity Block for ML of the
instance type, in the subnet's availability zone, with room for the run's instances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeforge.aws.config import CapacityTarget
from nodeforge.aws.errors import NoCapacityError

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client


@dataclass(frozen=True)
class Capacity:
    """A reservation to launch into, and the cluster placement group it brings (if any)."""

    reservation_id: str
    capacity_block: bool
    placement_group: str | None = None


def resolve_capacity(
    ec2: EC2Client, target: CapacityTarget | None, *, instance_type: str, count: int, subnet_id: str
) -> Capacity | None:
    """The reservation for this profile: as named, found, or None (On-Demand capacity).
    NoCapacityError when `find` finds no active reservation with room."""
    if target is None:
        return None
    if target.reservation_id is not None:
        return Capacity(target.reservation_id, target.capacity_block)
    [subnet] = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
    zone = subnet.get("AvailabilityZone", "")
    reservations = ec2.describe_capacity_reservations(
        Filters=[
            {"Name": "instance-type", "Values": [instance_type]},
            {"Name": "availability-zone", "Values": [zone]},
            {"Name": "state", "Values": ["active"]},
        ]
    )["CapacityReservations"]
    roomy = [r for r in reservations if r.get("AvailableInstanceCount", 0) >= count]
    if not roomy:
        raise NoCapacityError(
            f"no active capacity reservation or Capacity Block for {instance_type} in {zone} "
            f"has {count} free instance(s) ({len(reservations)} active there). Fix: buy a "
            "Capacity Block for ML, wait for a reservation's instances to end, or name a "
            "reservation in capacity.<profile>.reservation_id"
        )
    # the one that ends first is the one to use up
    chosen = min(roomy, key=lambda r: str(r.get("EndDate", "9999")))
    group_arn = chosen.get("PlacementGroupArn", "")
    return Capacity(
        reservation_id=chosen["CapacityReservationId"],
        capacity_block=chosen.get("ReservationType") == "capacity-block",
        placement_group=group_arn.rsplit("/", 1)[-1] if group_arn else None,
    )
