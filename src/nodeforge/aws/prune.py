"""Prune: keep the newest N validated AMIs of an image, deregister the others (and delete their
snapshots), never one that something still launches from (EC2's DescribeImageReferences says
what does)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.encryption import snapshot_ids
from nodeforge.aws.errors import aws_error
from nodeforge.aws.publish import deprecate_soon

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import ImageTypeDef, ResourceTypeRequestTypeDef

# DescribeImages' DeregistrationProtection: "disabled", "enabled", "enabled-with-cooldown", and
# "disabled-until <time>" for the 24 hours after protection with cooldown was disabled.
_UNPROTECTED = "disabled"
_WITH_COOLDOWN = "enabled-with-cooldown"
_COOLING_DOWN = "disabled-until"
# DescribeImageReferences: at most 10 AMIs a call; every resource type it scans, instances only
# while they exist or may start again, and (EC2's default) the 10 newest versions of each launch
# template. A launch template that names an SSM parameter holds the AMI through the parameter.
_REFERENCE_BATCH = 10
_REFERENCE_TYPES: list[ResourceTypeRequestTypeDef] = [
    {
        "ResourceType": "ec2:Instance",
        "ResourceTypeOptions": [
            {
                "OptionName": "state-name",
                "OptionValues": ["pending", "running", "stopping", "stopped"],
            }
        ],
    },
    {"ResourceType": "ec2:LaunchTemplate"},
    {"ResourceType": "ssm:Parameter"},
    {"ResourceType": "imagebuilder:ImageRecipe"},
    {"ResourceType": "imagebuilder:ContainerRecipe"},
]
_REFERENCE_NAMES: dict[str, str] = {
    "ec2:Instance": "instance",
    "ec2:LaunchTemplate": "launch template",
    "ssm:Parameter": "SSM parameter",
    "imagebuilder:ImageRecipe": "Image Builder image recipe",
    "imagebuilder:ContainerRecipe": "Image Builder container recipe",
}


@dataclass(frozen=True)
class Policy:
    keep: int
    """The newest validated AMIs that stay."""
    unjudged_after: timedelta
    """An AMI this old that no promote judged was left by one that did not finish."""
    deprecated_for: timedelta
    """How long an AMI is deprecated before a prune deletes it (zero: deleted at once)."""


@dataclass(frozen=True)
class Decision:
    region: str
    ami: str
    name: str
    created: str
    status: str
    action: Literal["keep", "deprecate", "delete", "unprotect"]
    """deprecate: to go, but not deprecated yet: deprecated now, deleted by a prune once it has
    been deprecated for the policy's time. unprotect: its deregistration protection has a
    cooldown; disabled now, the AMI can be deleted by a prune 24 hours later."""
    reasons: list[str]
    snapshots: list[str] = field(default_factory=list)
    """Deleted with the AMI (none for a kept one): planned, and once applied those EC2 reports
    deleted (it skips one that another AMI still uses)."""
    unprotect_first: bool = False
    """A protected AMI to delete: protection (without cooldown) is disabled first."""


@dataclass
class PruneResult:
    image: str
    policy: Policy
    dry_run: bool
    decisions: list[Decision] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "keep": self.policy.keep,
            "unjudged_after_days": self.policy.unjudged_after.days,
            "deprecated_for_days": self.policy.deprecated_for.days,
            "dry_run": self.dry_run,
            "amis": [
                {
                    "region": d.region,
                    "ami": d.ami,
                    "name": d.name,
                    "created": d.created,
                    "status": d.status,
                    "action": d.action,
                    "reasons": d.reasons,
                    "snapshots": d.snapshots,
                    "unprotect_first": d.unprotect_first,
                }
                for d in self.decisions
            ],
        }


def prune(
    clients: AwsClients,
    *,
    image: str,
    policy: Policy,
    now: datetime,
    dry_run: bool,
    progress: Callable[[str], None] = lambda _line: None,
) -> PruneResult:
    """Decide per AMI in the home region and every copy region, then act unless `dry_run`."""
    result = PruneResult(image=image, policy=policy, dry_run=dry_run)
    config = clients.config
    try:
        for region in (config.region, *config.copy_regions):
            ec2 = clients.ec2 if region == config.region else clients.ec2_in(region)
            decisions = plan(ec2, region=region, image=image, policy=policy, now=now)
            result.decisions += decisions if dry_run else _apply(ec2, decisions, now, progress)
    except (ClientError, BotoCoreError) as exc:
        raise aws_error(exc, f"pruning {image}") from None
    return result


def plan(
    ec2: EC2Client, *, region: str, image: str, policy: Policy, now: datetime
) -> list[Decision]:
    """What to do with each AMI of the image in the region."""
    images = _images_of(ec2, image)
    references = _references(ec2, [i["ImageId"] for i in images])
    validated = sorted(
        (i for i in images if _status(i) == tags.VALIDATED),
        key=lambda i: i.get("CreationDate", ""),
        reverse=True,
    )
    keep = policy.keep
    newest = {i["ImageId"] for i in validated[:keep]}
    judged: list[tuple[ImageTypeDef, list[str]]] = []  # each AMI with its reasons to stay
    for ami in sorted(images, key=lambda i: i.get("CreationDate", ""), reverse=True):
        why = list(references.get(ami["ImageId"], []))
        if ami["ImageId"] in newest:
            why.insert(0, f"one of the newest {keep} validated")
        if not _judged(ami) and _created(ami) >= now - policy.unjudged_after:
            why.append(
                f"status {_status(ami) or '(untagged)'}: not judged yet, a promote may be running"
            )
        protection = ami.get("DeregistrationProtection") or _UNPROTECTED
        if not why and protection.startswith(_COOLING_DOWN):
            why.append(f"deregistration protection cooling down ({protection})")
        judged.append((ami, why))
    # two AMIs can share a snapshot (a copy within the region): one that stays keeps it
    staying = {
        s
        for ami, why in judged
        if why or _cools_down(ami) or _stage(ami, policy, now) != "delete"
        for s in snapshot_ids(ami)
    }
    decisions = []
    for ami, why in judged:
        reasons = why or [_why_it_goes(ami, keep)]
        action: Literal["keep", "deprecate", "delete", "unprotect"] = (
            "keep" if why else _stage(ami, policy, now)
        )
        if action == "deprecate":
            reasons.append(
                f"deprecated now, deleted by a prune from {_date(now + policy.deprecated_for)}"
            )
        if action == "keep" and not why and (since := _deprecated_since(ami)):
            reasons.append(
                f"deprecated since {_date(since)}, deleted by a prune from "
                f"{_date(since + policy.deprecated_for)}"
            )
        if action == "delete" and _cools_down(ami):
            action = "unprotect"
            reasons.append("protected with a 24 h cooldown: disabled now, deleted by a later prune")
        decisions.append(
            Decision(
                region=region,
                ami=ami["ImageId"],
                name=ami.get("Name", ""),
                created=ami.get("CreationDate", ""),
                status=_status(ami),
                action=action,
                reasons=reasons,
                snapshots=[s for s in snapshot_ids(ami) if s not in staying]
                if action == "delete"
                else [],
                unprotect_first=action == "delete"
                and ami.get("DeregistrationProtection", _UNPROTECTED) != _UNPROTECTED,
            )
        )
    return decisions


def _stage(
    ami: ImageTypeDef, policy: Policy, now: datetime
) -> Literal["deprecate", "keep", "delete"]:
    """Where an AMI that is to go stands: not deprecated yet (deprecate it), deprecated for less
    than the policy's time (wait), or long enough (delete it)."""
    if not policy.deprecated_for:
        return "delete"
    since = _deprecated_since(ami)
    if since is None or since > now:
        return "deprecate"
    return "delete" if since <= now - policy.deprecated_for else "keep"


def _deprecated_since(ami: ImageTypeDef) -> datetime | None:
    """When EC2 deprecated (or will deprecate) the AMI; DescribeImages' DeprecationTime."""
    value = ami.get("DeprecationTime")
    return datetime.fromisoformat(value) if value else None


def _date(moment: datetime) -> str:
    return moment.date().isoformat()


def _why_it_goes(ami: ImageTypeDef, keep: int) -> str:
    if _status(ami) == tags.VALIDATED:
        return f"validated, older than the newest {keep}"
    if _status(ami) == tags.FAILED:
        return "failed validation"
    status = _status(ami) or "(untagged)"
    return f"status {status} since {ami.get('CreationDate', '')[:10]}: never judged"


def _judged(ami: ImageTypeDef) -> bool:
    return _status(ami) in (tags.VALIDATED, tags.FAILED)


def _created(ami: ImageTypeDef) -> datetime:
    return datetime.fromisoformat(ami["CreationDate"])


def _cools_down(ami: ImageTypeDef) -> bool:
    return ami.get("DeregistrationProtection") == _WITH_COOLDOWN


def _status(ami: ImageTypeDef) -> str:
    return tags.tag_map(ami.get("Tags", [])).get(tags.STATUS, "")


def _images_of(ec2: EC2Client, image: str) -> list[ImageTypeDef]:
    pages = ec2.get_paginator("describe_images").paginate(
        Owners=["self"], Filters=[{"Name": f"tag:{tags.IMAGE}", "Values": [image]}]
    )
    return [ami for page in pages for ami in page.get("Images", [])]


def _references(ec2: EC2Client, ami_ids: list[str]) -> dict[str, list[str]]:
    """Why each AMI must stay: what EC2 finds referencing it."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    paginator = ec2.get_paginator("describe_image_references")
    for start in range(0, len(ami_ids), _REFERENCE_BATCH):
        batch = ami_ids[start : start + _REFERENCE_BATCH]
        for page in paginator.paginate(ImageIds=batch, ResourceTypes=_REFERENCE_TYPES):
            for reference in page.get("ImageReferences", []):
                kind = reference.get("ResourceType", "")
                found[reference.get("ImageId", "")].append(
                    f"{_REFERENCE_NAMES.get(kind, kind)} {reference.get('Arn', '')}"
                )
    return found


def _apply(
    ec2: EC2Client, decisions: list[Decision], now: datetime, progress: Callable[[str], None]
) -> list[Decision]:
    """Act on the decisions; each deleted AMI with the snapshots EC2 deleted with it."""
    done = []
    for decision in decisions:
        if decision.action == "deprecate":
            progress(f"{decision.region}: deprecating {decision.ami} ({decision.reasons[0]})")
            deprecate_soon(ec2, decision.ami, now)
        if decision.action == "unprotect" or decision.unprotect_first:
            progress(f"{decision.region}: disabling deregistration protection of {decision.ami}")
            ec2.disable_image_deregistration_protection(ImageId=decision.ami)
        if decision.action != "delete":
            done.append(decision)
            continue
        progress(f"{decision.region}: deregistering {decision.ami} ({decision.reasons[0]})")
        # the snapshots go in the same call: no AMI gone with its snapshots left behind
        answer = ec2.deregister_image(ImageId=decision.ami, DeleteAssociatedSnapshots=True)
        deleted = [
            r.get("SnapshotId", "")
            for r in answer.get("DeleteSnapshotResults", [])
            if r.get("ReturnCode") == "success"
        ]
        done.append(replace(decision, snapshots=deleted))
    return done
