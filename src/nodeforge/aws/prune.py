"""Prune: keep the newest N validated AMIs of an image, deregister the others (and delete their
snapshots), never one that something still launches from (EC2's DescribeImageReferences says
what does, and the Auto Scaling and EKS node groups say which launch template versions they
launch: nodeforge.aws.pinned)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.encryption import snapshot_ids
from nodeforge.aws.errors import aws_error
from nodeforge.aws.pinned import auto_scaling_uses, node_group_uses, pinned_images
from nodeforge.aws.publish import deprecate_soon

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import (
        ImageTypeDef,
        ImageUsageReportEntryTypeDef,
        ImageUsageReportTypeDef,
        ResourceTypeRequestTypeDef,
    )

# DescribeImages' DeregistrationProtection: "disabled", "enabled", "enabled-with-cooldown", and
# "disabled-until <time>" for the 24 hours after protection with cooldown was disabled.
_UNPROTECTED = "disabled"
_WITH_COOLDOWN = "enabled-with-cooldown"
_COOLING_DOWN = "disabled-until"
# DescribeImageReferences: at most 10 AMIs a call; every resource type it scans, instances only
# while they exist or may start again, and (EC2's default) the 10 newest versions of each launch
# template. A launch template that names an SSM parameter holds the AMI through the parameter.
_REFERENCE_BATCH = 10
_USAGE_BATCH = 200  # DescribeImageUsageReports' most ImageIds a call
USAGE_REPORT_FRESH = timedelta(days=3)
"""How old a usage report may be for prune to delete a shared AMI by it. EC2 notes that a report
may miss the last day of instance launches and the last few days of launch template changes."""
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
    usage_report: bool = False
    """A shared AMI due for deletion without a recent usage report: EC2 is asked for one (which
    accounts still launch it), and a later prune deletes the AMI once it shows no such account."""


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
                    "usage_report": d.usage_report,
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
            uses = chain(
                auto_scaling_uses(clients.autoscaling_in(region)),
                node_group_uses(clients.eks_in(region)),
            )
            decisions = plan(
                ec2,
                region=region,
                image=image,
                policy=policy,
                now=now,
                shared=bool(config.shares),
                pinned=pinned_images(ec2, uses),
            )
            result.decisions += decisions if dry_run else _apply(ec2, decisions, now, progress)
    except (ClientError, BotoCoreError) as exc:
        raise aws_error(exc, f"pruning {image}") from None
    return result


def plan(
    ec2: EC2Client,
    *,
    region: str,
    image: str,
    policy: Policy,
    now: datetime,
    shared: bool,
    pinned: Mapping[str, list[str]] | None = None,
) -> list[Decision]:
    """What to do with each AMI of the image in the region. `shared`: the config shares the
    image's AMIs with other accounts, whose use only a usage report shows. `pinned`: AMI id ->
    the groups that launch it through a launch template version (nodeforge.aws.pinned)."""
    images = _images_of(ec2, image)
    references = _references(ec2, [i["ImageId"] for i in images])
    for ami_id, users in (pinned or {}).items():
        references[ami_id] += [u for u in users if u not in references[ami_id]]
    # other accounts can launch only what was published (validated, then shared)
    outgoing = [
        i
        for i in images
        if shared and _status(i) == tags.VALIDATED and i["ImageId"] not in references
    ]
    usage = _usage(ec2, outgoing)
    validated = sorted(
        (i for i in images if _status(i) == tags.VALIDATED),
        key=lambda i: i.get("CreationDate", ""),
        reverse=True,
    )
    keep = policy.keep
    newest = {i["ImageId"] for i in validated[:keep]}
    # where each AMI would stand if nothing kept it: deprecate, wait (keep) or delete
    stage = {i["ImageId"]: _stage(i, policy, now) for i in images}
    judged: list[tuple[ImageTypeDef, list[str]]] = []  # each AMI with its reasons to stay
    ask: set[str] = set()  # shared AMIs due for deletion that need a usage report first
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
        if not why and ami["ImageId"] in usage and stage[ami["ImageId"]] == "delete":
            why += usage[ami["ImageId"]].why_it_stays(now)
            if usage[ami["ImageId"]].needs_report(now):
                ask.add(ami["ImageId"])
        judged.append((ami, why))
    # two AMIs can share a snapshot (a copy within the region): one that stays keeps it
    staying = {
        s
        for ami, why in judged
        if why or _cools_down(ami) or stage[ami["ImageId"]] != "delete"
        for s in snapshot_ids(ami)
    }
    decisions = []
    for ami, why in judged:
        reasons = why or [_why_it_goes(ami, keep)]
        action: Literal["keep", "deprecate", "delete", "unprotect"] = (
            "keep" if why else stage[ami["ImageId"]]
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
                usage_report=ami["ImageId"] in ask,
            )
        )
    return decisions


@dataclass(frozen=True)
class Usage:
    """What EC2's usage reports (CreateImageUsageReport) say about a shared AMI: which other
    accounts launch it from instances or launch templates."""

    owner: str
    reports: list[ImageUsageReportTypeDef]
    entries: list[ImageUsageReportEntryTypeDef]

    def _newest(self, now: datetime) -> ImageUsageReportTypeDef | None:
        """The newest report recent enough to go by."""
        recent = [r for r in self.reports if r["CreationTime"] >= now - USAGE_REPORT_FRESH]
        return max(recent, key=lambda r: r["CreationTime"], default=None)

    def needs_report(self, now: datetime) -> bool:
        newest = self._newest(now)
        return newest is None or newest.get("State") == "error"

    def why_it_stays(self, now: datetime) -> list[str]:
        newest = self._newest(now)
        if newest is None or newest.get("State") == "error":
            failed = f" (the last failed: {newest.get('StateReason')})" if newest else ""
            return [
                f"shared: asked EC2 for a usage report{failed}; deleted by a prune once one "
                "shows no other account launches it"
            ]
        if newest.get("State") != "available":
            return [f"shared: usage report {newest['ReportId']} is {newest.get('State')}"]
        return [
            f"used in account {e['AccountId']}: {e.get('UsageCount')} {e.get('ResourceType')} "
            f"(usage report {newest['ReportId']} of {_date(newest['CreationTime'])})"
            for e in self.entries
            if e.get("ReportId") == newest["ReportId"]
            and e.get("AccountId") != self.owner
            and e.get("UsageCount", 0) > 0
        ]


def _usage(ec2: EC2Client, images: list[ImageTypeDef]) -> dict[str, Usage]:
    """Each AMI's usage reports, and the entries of those EC2 has finished."""
    if not images:
        return {}
    paginator = ec2.get_paginator("describe_image_usage_reports")
    reports = [
        report
        for batch in _batches([i["ImageId"] for i in images], _USAGE_BATCH)
        for page in paginator.paginate(ImageIds=batch)
        for report in page.get("ImageUsageReports", [])
    ]
    available = [r["ReportId"] for r in reports if r.get("State") == "available"]
    entries = (
        [
            entry
            for page in ec2.get_paginator("describe_image_usage_report_entries").paginate(
                ReportIds=available
            )
            for entry in page.get("ImageUsageReportEntries", [])
        ]
        if available
        else []
    )
    return {
        i["ImageId"]: Usage(
            owner=i.get("OwnerId", ""),
            reports=[r for r in reports if r.get("ImageId") == i["ImageId"]],
            entries=[e for e in entries if e.get("ImageId") == i["ImageId"]],
        )
        for i in images
    }


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


def _references(ec2: EC2Client, ami_ids: list[str]) -> defaultdict[str, list[str]]:
    """Why each AMI must stay: what EC2 finds referencing it."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    paginator = ec2.get_paginator("describe_image_references")
    for batch in _batches(ami_ids, _REFERENCE_BATCH):
        for page in paginator.paginate(ImageIds=batch, ResourceTypes=_REFERENCE_TYPES):
            for reference in page.get("ImageReferences", []):
                kind = reference.get("ResourceType", "")
                found[reference.get("ImageId", "")].append(
                    f"{_REFERENCE_NAMES.get(kind, kind)} {reference.get('Arn', '')}"
                )
    return found


def _batches(ids: list[str], size: int) -> list[list[str]]:
    return [ids[start : start + size] for start in range(0, len(ids), size)]


def _apply(
    ec2: EC2Client, decisions: list[Decision], now: datetime, progress: Callable[[str], None]
) -> list[Decision]:
    """Act on the decisions; each deleted AMI with the snapshots EC2 deleted with it."""
    done = []
    for decision in decisions:
        if decision.action == "deprecate":
            progress(f"{decision.region}: deprecating {decision.ami} ({decision.reasons[0]})")
            deprecate_soon(ec2, decision.ami, now)
        if decision.usage_report:
            progress(f"{decision.region}: asking EC2 which accounts use {decision.ami}")
            ec2.create_image_usage_report(
                ImageId=decision.ami,
                ResourceTypes=[
                    {"ResourceType": "ec2:Instance"},
                    {"ResourceType": "ec2:LaunchTemplate"},
                ],
            )
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
