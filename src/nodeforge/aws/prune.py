"""Prune: keep the newest N validated AMIs of an image, deregister the others (and delete their
snapshots), never one that something still launches from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.encryption import snapshot_ids
from nodeforge.aws.errors import aws_error
from nodeforge.aws.publish import SSM_ROOT

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import ImageTypeDef
    from mypy_boto3_ssm import SSMClient

_IN_USE_STATES = ["pending", "running", "stopping", "stopped"]
# DescribeImages' DeregistrationProtection: "disabled", "enabled", "enabled-with-cooldown", and
# "disabled-until <time>" for the 24 hours after protection with cooldown was disabled.
_UNPROTECTED = "disabled"
_WITH_COOLDOWN = "enabled-with-cooldown"
_COOLING_DOWN = "disabled-until"
_SSM_REFERENCE = "resolve:ssm:"


@dataclass(frozen=True)
class Decision:
    region: str
    ami: str
    name: str
    created: str
    status: str
    action: Literal["keep", "delete", "unprotect"]
    """unprotect: its deregistration protection has a cooldown; disabled now, the AMI can be
    deleted by a prune 24 hours later."""
    reasons: list[str]
    snapshots: list[str] = field(default_factory=list)
    """Deleted with the AMI (none for a kept one)."""
    unprotect_first: bool = False
    """A protected AMI to delete: protection (without cooldown) is disabled first."""


@dataclass
class PruneResult:
    image: str
    keep: int
    dry_run: bool
    decisions: list[Decision] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "keep": self.keep,
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
    keep: int,
    dry_run: bool,
    progress: Callable[[str], None] = lambda _line: None,
) -> PruneResult:
    """Decide per AMI in the home region and every copy region, then act unless `dry_run`."""
    result = PruneResult(image=image, keep=keep, dry_run=dry_run)
    config = clients.config
    try:
        for region in (config.region, *config.copy_regions):
            home = region == config.region
            ec2 = clients.ec2 if home else clients.ec2_in(region)
            ssm = clients.ssm if home else clients.ssm_in(region)
            decisions = plan(ec2, ssm, region=region, image=image, keep=keep)
            result.decisions += decisions
            if not dry_run:
                _apply(ec2, decisions, progress)
    except (ClientError, BotoCoreError) as exc:
        raise aws_error(exc, f"pruning {image}") from None
    return result


def plan(ec2: EC2Client, ssm: SSMClient, *, region: str, image: str, keep: int) -> list[Decision]:
    images = _images_of(ec2, image)
    references = _references(ec2, ssm, [i["ImageId"] for i in images])
    validated = sorted(
        (i for i in images if _status(i) == tags.VALIDATED),
        key=lambda i: i.get("CreationDate", ""),
        reverse=True,
    )
    newest = {i["ImageId"] for i in validated[:keep]}
    judged: list[tuple[ImageTypeDef, list[str]]] = []  # each AMI with its reasons to stay
    for ami in sorted(images, key=lambda i: i.get("CreationDate", ""), reverse=True):
        why = list(references.get(ami["ImageId"], []))
        if ami["ImageId"] in newest:
            why.insert(0, f"one of the newest {keep} validated")
        if _status(ami) not in (tags.VALIDATED, tags.FAILED):
            why.append(
                f"status {_status(ami) or '(untagged)'}: not judged yet, a promote may be running"
            )
        protection = ami.get("DeregistrationProtection") or _UNPROTECTED
        if not why and protection.startswith(_COOLING_DOWN):
            why.append(f"deregistration protection cooling down ({protection})")
        judged.append((ami, why))
    # two AMIs can share a snapshot (a copy within the region): one that stays keeps it
    staying = {s for ami, why in judged if why or _cools_down(ami) for s in snapshot_ids(ami)}
    decisions = []
    for ami, why in judged:
        reasons = why or [
            f"validated, older than the newest {keep}"
            if _status(ami) == tags.VALIDATED
            else "failed validation"
        ]
        action: Literal["keep", "delete", "unprotect"] = "keep" if why else "delete"
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


def _cools_down(ami: ImageTypeDef) -> bool:
    return ami.get("DeregistrationProtection") == _WITH_COOLDOWN


def _status(ami: ImageTypeDef) -> str:
    return tags.tag_map(ami.get("Tags", [])).get(tags.STATUS, "")


def _images_of(ec2: EC2Client, image: str) -> list[ImageTypeDef]:
    pages = ec2.get_paginator("describe_images").paginate(
        Owners=["self"], Filters=[{"Name": f"tag:{tags.IMAGE}", "Values": [image]}]
    )
    return [ami for page in pages for ami in page.get("Images", [])]


def _references(ec2: EC2Client, ssm: SSMClient, ami_ids: list[str]) -> dict[str, list[str]]:
    """Why each AMI must stay: the SSM parameters, launch templates and instances using it."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    if ami_ids:
        _parameter_references(ssm, found)
        _template_references(ec2, ssm, found)
        _instance_references(ec2, ami_ids, found)
    return found


def _parameter_references(ssm: SSMClient, found: defaultdict[str, list[str]]) -> None:
    pages = ssm.get_paginator("get_parameters_by_path").paginate(Path=SSM_ROOT, Recursive=True)
    for page in pages:
        for parameter in page.get("Parameters", []):
            found[parameter.get("Value", "")].append(f"SSM parameter {parameter.get('Name')}")


def _template_references(
    ec2: EC2Client, ssm: SSMClient, found: defaultdict[str, list[str]]
) -> None:
    """The latest and the default version of every launch template: what a launch uses when
    it names no version."""
    for page in ec2.get_paginator("describe_launch_templates").paginate():
        for template in page.get("LaunchTemplates", []):
            versions = ec2.describe_launch_template_versions(
                LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Latest", "$Default"]
            )["LaunchTemplateVersions"]
            # one version can be both: EC2 may then list it twice
            unique = {version.get("VersionNumber"): version for version in versions}
            for version in unique.values():
                image_id = version.get("LaunchTemplateData", {}).get("ImageId", "")
                if image_id.startswith(_SSM_REFERENCE):
                    name = image_id.removeprefix(_SSM_REFERENCE)
                    image_id = ssm.get_parameter(Name=name)["Parameter"].get("Value", "")
                number = version.get("VersionNumber")
                labels = [
                    label
                    for label, applies in (
                        ("latest", number == template.get("LatestVersionNumber")),
                        ("default", version.get("DefaultVersion", False)),
                    )
                    if applies
                ]
                found[image_id].append(
                    f"launch template {template.get('LaunchTemplateName')} version {number} "
                    f"({' and '.join(labels)})"
                )


def _instance_references(
    ec2: EC2Client, ami_ids: list[str], found: defaultdict[str, list[str]]
) -> None:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "image-id", "Values": ami_ids},
            {"Name": "instance-state-name", "Values": _IN_USE_STATES},
        ]
    )
    for page in pages:
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                state = instance.get("State", {}).get("Name", "")
                found[instance.get("ImageId", "")].append(
                    f"instance {instance['InstanceId']} ({state})"
                )


def _apply(ec2: EC2Client, decisions: list[Decision], progress: Callable[[str], None]) -> None:
    for decision in decisions:
        if decision.action == "keep":
            continue
        if decision.action == "unprotect" or decision.unprotect_first:
            progress(f"{decision.region}: disabling deregistration protection of {decision.ami}")
            ec2.disable_image_deregistration_protection(ImageId=decision.ami)
        if decision.action == "unprotect":
            continue
        progress(f"{decision.region}: deregistering {decision.ami} ({decision.reasons[0]})")
        ec2.deregister_image(ImageId=decision.ami)
        for snapshot in decision.snapshots:
            ec2.delete_snapshot(SnapshotId=snapshot)
