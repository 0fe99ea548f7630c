"""The outcome of a validation run, written to AWS: publish a validated AMI, or retire a failed
one so that nothing launches it by accident."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import ImageTypeDef, LaunchPermissionTypeDef
    from mypy_boto3_ssm import SSMClient

SSM_ROOT = "/nodeforge"


def parameter_name(image: str, profile: str) -> str:
    return f"{SSM_ROOT}/{image}/{profile}/ami-id"


def snapshot_ids(image: ImageTypeDef) -> list[str]:
    return [
        mapping["Ebs"]["SnapshotId"]
        for mapping in image.get("BlockDeviceMappings", [])
        if "Ebs" in mapping and "SnapshotId" in mapping["Ebs"]
    ]


def mark_validated(ec2: EC2Client, ami_id: str, run_id: str) -> None:
    ec2.create_tags(
        Resources=[ami_id],
        Tags=tags.tag_list({tags.STATUS: tags.VALIDATED, tags.RUN_ID: run_id}),
    )


def mark_failed(ec2: EC2Client, ami_id: str, *, run_id: str, profile: str, now: datetime) -> None:
    """Tag the AMI failed and deprecate it: it drops out of default image listings."""
    ec2.create_tags(
        Resources=[ami_id],
        Tags=tags.tag_list(
            {tags.STATUS: tags.FAILED, tags.RUN_ID: run_id, tags.FAILED_PROFILE: profile}
        ),
    )
    # EC2 refuses a deprecation time in the past and rounds to the minute: a little ahead
    deprecate_at = now.replace(second=0, microsecond=0) + timedelta(minutes=2)
    ec2.enable_image_deprecation(ImageId=ami_id, DeprecateAt=deprecate_at)


def share(ec2: EC2Client, image: ImageTypeDef, accounts: Sequence[str]) -> None:
    """Launch permission on the AMI, and create-volume permission on its snapshots, without
    which the other account can launch it only if the snapshots are public."""
    if not accounts:
        return
    users: list[LaunchPermissionTypeDef] = [{"UserId": account} for account in accounts]
    ec2.modify_image_attribute(ImageId=image["ImageId"], LaunchPermission={"Add": users})
    for snapshot in snapshot_ids(image):
        ec2.modify_snapshot_attribute(
            SnapshotId=snapshot,
            Attribute="createVolumePermission",
            OperationType="add",
            UserIds=list(accounts),
        )


def copy_to_regions(clients: AwsClients, image: ImageTypeDef, run_id: str) -> dict[str, str]:
    """Start a copy in every configured region, tagged like the source; AMI id by region.

    The copies are not waited for: they become available within the hour, while their tags
    already say where they came from and that the source was validated.
    """
    copy_tags = {
        key: value
        for key, value in tags.tag_map(image.get("Tags", [])).items()
        if not key.startswith("aws:")
    }
    copy_tags |= {
        tags.STATUS: tags.VALIDATED,
        tags.RUN_ID: run_id,
        tags.SOURCE_AMI: image["ImageId"],
        tags.SOURCE_REGION: clients.config.region,
    }
    copies: dict[str, str] = {}
    for region in clients.config.copy_regions:
        response = clients.ec2_in(region).copy_image(
            SourceImageId=image["ImageId"],
            SourceRegion=clients.config.region,
            Name=image.get("Name", image["ImageId"]),
            Description=f"copy of {image['ImageId']} from {clients.config.region}",
            ClientToken=f"{run_id}-{region}"[:64],
            TagSpecifications=[
                {"ResourceType": kind, "Tags": tags.tag_list(copy_tags)}
                for kind in ("image", "snapshot")
            ],
        )
        copies[region] = response["ImageId"]
    return copies


def put_parameters(ssm: SSMClient, image: str, profiles: Sequence[str], ami_id: str) -> list[str]:
    """One `aws:ec2:image` parameter per profile: what launch templates resolve at launch."""
    names = []
    for profile in profiles:
        name = parameter_name(image, profile)
        ssm.put_parameter(
            Name=name,
            Value=ami_id,
            Type="String",
            DataType="aws:ec2:image",
            Overwrite=True,
            Description=f"nodeforge {image} validated on {profile}",
        )
        names.append(name)
    return names
