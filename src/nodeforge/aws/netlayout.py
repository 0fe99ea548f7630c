"""The network interfaces a validation instance is launched with: read from EC2
(DescribeInstanceTypes), not written by hand, and laid out as the EC2 User Guide recommends for
EFA on instance types with several network cards ("Maximize network bandwidth on Amazon EC2
instances with multiple network cards", efa-acc-inst-types):

- the primary interface (default card, device index 0) is ENA: an EFA-only interface cannot be
  primary;
- if that card supports EFA, an EFA-only interface at its device index 1;
- an EFA-only interface at device index 0 of each further card that supports EFA, up to the
  type's MaximumEfaInterfaces.

A card that offers `efa` but not `efa-only` gets an EFA (with ENA) interface instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import ClientError

from nodeforge.catalog.models import Profile
from nodeforge.errors import InputError

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType
    from mypy_boto3_ec2.type_defs import NetworkCardInfoTypeDef, NetworkInfoTypeDef

Interface = Literal["interface", "efa", "efa-only"]
"""EC2's InterfaceType values; `interface` is ENA."""
EFA_TYPES: frozenset[str] = frozenset({"efa", "efa-only"})


@dataclass(frozen=True)
class Slot:
    """One network interface to request: card, device index, type."""

    card: int
    device_index: int
    interface: Interface


def recommended_layout(network: NetworkInfoTypeDef) -> list[Slot]:
    """The interfaces for one instance of the type whose NetworkInfo this is."""
    default = network.get("DefaultNetworkCardIndex", 0)
    cards = sorted(network.get("NetworkCards", []), key=lambda c: c.get("NetworkCardIndex", 0))
    efa_left = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    if not network.get("EfaSupported"):
        efa_left = 0
    slots: list[Slot] = []
    for card in cards:
        index = card.get("NetworkCardIndex", 0)
        efa = _efa_type(card, index == default, efa_left, len(cards))
        if index == default:
            # an EFA-only interface cannot be primary; a card without efa-only keeps EFA there
            slots.append(Slot(index, 0, "efa" if efa == "efa" else "interface"))
            if efa == "efa-only":
                slots.append(Slot(index, 1, "efa-only"))
        elif efa is not None:
            slots.append(Slot(index, 0, efa))
        efa_left -= efa is not None
    if not slots:  # an answer without card details: one ENA interface, as EC2 would give
        slots.append(Slot(default, 0, "interface"))
    return sorted(slots, key=lambda s: (s.card, s.device_index))


def _efa_type(
    card: NetworkCardInfoTypeDef, is_default: bool, efa_left: int, card_count: int
) -> Literal["efa", "efa-only"] | None:
    if efa_left <= 0:
        return None
    offered = card.get("InterfaceTypes")
    if offered is None:
        # Older answers name no interface types: every card has EFA, but the default card
        # when the type has fewer EFA interfaces than cards.
        return None if is_default and efa_left < card_count else "efa-only"
    if "efa-only" in offered:
        return "efa-only"
    return "efa" if "efa" in offered else None


def efa_count(slots: Sequence[Slot]) -> int:
    return sum(slot.interface in EFA_TYPES for slot in slots)


def profile_layouts(
    ec2: EC2Client,
    profiles: Sequence[Profile],
    *,
    region: str,
    config_path: Path | None,
    profile_files: Mapping[str, Path],
) -> dict[str, list[Slot]]:
    """Each profile's layout, from one DescribeInstanceTypes call, held to the catalog's
    network.efa_interfaces (what validation then expects to find on the node)."""
    names: list[InstanceTypeType] = [p.name for p in profiles]  # type: ignore[misc]
    try:
        answer = ec2.describe_instance_types(InstanceTypes=names)["InstanceTypes"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "InvalidInstanceType":
            raise
        raise InputError(
            exc.response.get("Error", {}).get("Message", "an instance type is not offered"),
            file=config_path,
            field="region",
            fix=f"promote in a region that offers {', '.join(names)}",
        ) from None
    found = {t.get("InstanceType", ""): t.get("NetworkInfo", {}) for t in answer}
    layouts = {}
    for profile in profiles:
        if profile.name not in found:
            raise InputError(
                f"EC2 does not describe instance type {profile.name} in {region}",
                file=config_path,
                field="region",
                fix=f"promote in a region that offers {profile.name}",
            )
        slots = recommended_layout(found[profile.name])
        if efa_count(slots) != profile.network.efa_interfaces:
            raise InputError(
                f"EC2 gives {profile.name} {efa_count(slots)} EFA interfaces "
                f"(DescribeInstanceTypes in {region}), the profile says "
                f"{profile.network.efa_interfaces}",
                file=profile_files.get(profile.name),
                field="network.efa_interfaces",
                fix="set it to EC2's number: validation expects that many EFA devices",
            )
        layouts[profile.name] = slots
    return layouts
