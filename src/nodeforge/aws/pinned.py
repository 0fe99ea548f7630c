"""The AMIs that Auto Scaling groups and EKS managed node groups launch, through the launch
template version each one names.

DescribeImageReferences reads only the newest versions of each launch template (EC2's
default: 10). A group pinned to an older version, as a controlled rollout leaves it, still
launches that version's AMI the next time it scales out; prune must see it. So prune asks the
groups themselves which template version they use (`$Default` and `$Latest` included) and
reads each version's AMI.

A version that names its AMI through an SSM parameter (`resolve:ssm:`) holds the AMI through
that parameter, which DescribeImageReferences already reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_eks import EKSClient

_GONE = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidLaunchTemplateId.Malformed",
    }
)
"""A group that names a template or version deleted since launches nothing from it."""


@dataclass(frozen=True)
class TemplateUse:
    """A launch template version that something launches from."""

    user: str
    """Who: "Auto Scaling group NAME", "EKS node group CLUSTER/NAME"."""
    template_id: str | None
    template_name: str | None
    version: str
    """A number, `$Default` or `$Latest`."""


def _spec_use(user: str, spec: Any, id_key: str, name_key: str, version_key: str) -> TemplateUse:
    return TemplateUse(
        user=user,
        template_id=spec.get(id_key),
        template_name=spec.get(name_key),
        version=str(spec.get(version_key) or "$Default"),
    )


def auto_scaling_uses(autoscaling: AutoScalingClient) -> Iterator[TemplateUse]:
    """Every template version of every Auto Scaling group: its own, or its mixed instances
    policy's and that policy's per-instance-type overrides."""
    for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate():
        for group in page["AutoScalingGroups"]:
            user = f"Auto Scaling group {group['AutoScalingGroupName']}"
            policy = group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {})
            specs: list[Any] = [
                group.get("LaunchTemplate"),
                policy.get("LaunchTemplateSpecification"),
                *(o.get("LaunchTemplateSpecification") for o in policy.get("Overrides", [])),
            ]
            for spec in specs:
                if spec:
                    yield _spec_use(user, spec, "LaunchTemplateId", "LaunchTemplateName", "Version")


def node_group_uses(eks: EKSClient) -> Iterator[TemplateUse]:
    """The launch template version of every EKS managed node group that has one (a node group
    without a template runs EKS's own AMI)."""
    for clusters in eks.get_paginator("list_clusters").paginate():
        for cluster in clusters["clusters"]:
            pages = eks.get_paginator("list_nodegroups").paginate(clusterName=cluster)
            for names in pages:
                for name in names["nodegroups"]:
                    group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)
                    spec = group["nodegroup"].get("launchTemplate")
                    if spec:
                        yield _spec_use(
                            f"EKS node group {cluster}/{name}", spec, "id", "name", "version"
                        )


def pinned_images(ec2: EC2Client, uses: Iterator[TemplateUse]) -> dict[str, list[str]]:
    """AMI id -> who launches it, for every use whose template version names an AMI."""
    found: dict[str, list[str]] = defaultdict(list)
    for use in uses:
        try:
            versions = (
                ec2.describe_launch_template_versions(
                    LaunchTemplateId=use.template_id, Versions=[use.version]
                )
                if use.template_id
                else ec2.describe_launch_template_versions(
                    LaunchTemplateName=str(use.template_name), Versions=[use.version]
                )
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _GONE:
                continue
            raise
        for version in versions["LaunchTemplateVersions"]:
            image = version.get("LaunchTemplateData", {}).get("ImageId", "")
            if image.startswith("ami-"):
                name = version.get("LaunchTemplateName") or use.template_id
                alias = f" as {use.version}" if use.version.startswith("$") else ""
                found[image].append(
                    f"{use.user} launches it (launch template {name} version "
                    f"{version.get('VersionNumber')}{alias})"
                )
    return dict(found)
