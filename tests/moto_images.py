"""Two EC2 image calls that moto does not implement, answered from moto's own state as EC2
documents them, for the in-process fake account (tests/aws/conftest.py) and the moto server of
the end-to-end test alike.

- DescribeImageReferences: the instances, launch template versions and SSM parameters that name
  an AMI (EC2 User Guide, "Identify your resources referencing specified AMIs"; moto has no Image
  Builder recipes, so those types find nothing). Options: `state-name` (default every state) and
  `version-depth` (default the 10 newest versions).
- DeregisterImage with DeleteAssociatedSnapshots: the AMI's snapshots go with it, except one that
  another AMI still uses, which EC2 skips (moto ignores the parameter and keeps them all).
"""

from __future__ import annotations

from typing import Any

from moto.ec2.models import ec2_backends
from moto.ssm.models import ssm_backends

from nodeforge.aws.encryption import snapshot_ids

_DEFAULT_VERSION_DEPTH = 10
_IMAGE_PARAMETER = "aws:ec2:image"


def _options(resource_types: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    return {
        entry["ResourceType"]: {
            option["OptionName"]: option["OptionValues"]
            for option in entry.get("ResourceTypeOptions", [])
        }
        for entry in resource_types
    }


def image_references(
    account: str, region: str, image_ids: list[str], resource_types: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """DescribeImageReferences' ImageReferences for ImageIds and ResourceTypes."""
    wanted = set(image_ids)
    options = _options(resource_types)
    ec2 = ec2_backends[account][region]
    found: list[dict[str, str]] = []

    def add(image_id: str, resource_type: str, arn: str) -> None:
        if image_id in wanted:
            found.append({"ImageId": image_id, "ResourceType": resource_type, "Arn": arn})

    if "ec2:Instance" in options:
        states = options["ec2:Instance"].get("state-name")
        for instance in ec2.all_instances():
            if states is None or instance.state in states:
                arn = f"arn:aws:ec2:{region}:{account}:instance/{instance.id}"
                add(instance.image_id, "ec2:Instance", arn)
    if "ec2:LaunchTemplate" in options:
        depth = int(options["ec2:LaunchTemplate"].get("version-depth", [_DEFAULT_VERSION_DEPTH])[0])
        for template in ec2.launch_templates.values():
            arn = f"arn:aws:ec2:{region}:{account}:launch-template/{template.id}"
            for version in template.versions[-depth:]:
                add(version.image_id, "ec2:LaunchTemplate", arn)
    if "ssm:Parameter" in options:
        for name, versions in ssm_backends[account][region]._parameters.items():
            latest = versions[-1]
            if latest.data_type == _IMAGE_PARAMETER:
                add(
                    latest.value, "ssm:Parameter", f"arn:aws:ssm:{region}:{account}:parameter{name}"
                )
    return found


def deregister_with_snapshots(account: str, region: str, image_id: str) -> list[dict[str, str]]:
    """Deregister the AMI and delete its snapshots that no other AMI uses; DeregisterImage's
    DeleteSnapshotResults."""
    ec2 = ec2_backends[account][region]
    snapshots = _snapshots(ec2.amis[image_id])
    shared = {s for other in ec2.amis.values() if other.id != image_id for s in _snapshots(other)}
    ec2.deregister_image(image_id)
    results = []
    for snapshot in snapshots:
        if snapshot in shared:
            results.append({"SnapshotId": snapshot, "ReturnCode": "skipped"})
            continue
        ec2.delete_snapshot(snapshot)
        results.append({"SnapshotId": snapshot, "ReturnCode": "success"})
    return results


def _snapshots(ami: Any) -> list[str]:
    """A moto AMI's snapshots, read as the code reads DescribeImages' answer."""
    return snapshot_ids({"BlockDeviceMappings": ami.block_device_mappings})
