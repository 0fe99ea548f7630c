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


def passed_profiles(image: ImageTypeDef) -> list[str]:
    """The profiles an earlier run validated this AMI on (its PASSED_PROFILES tag)."""
    value = tags.tag_map(image.get("Tags", [])).get(tags.PASSED_PROFILES, "")
    return [name for name in value.split(",") if name]


def mark_passed(ec2: EC2Client, ami_id: str, profiles: Sequence[str]) -> None:
    ec2.create_tags(
        Resources=[ami_id],
        Tags=tags.tag_list({tags.PASSED_PROFILES: ",".join(profiles)}),
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


def share(ec2: EC2Client, ami_id: str, accounts: Sequence[str]) -> None:
    """Launch permission on the AMI. Its snapshots need no create-volume permission: EC2
    grants the use of an AMI's snapshots with its launch permission. Adding a permission the
    account has already changes nothing, so a re-run repeats this safely."""
    if not accounts:
        return
    users: list[LaunchPermissionTypeDef] = [{"UserId": account} for account in accounts]
    ec2.modify_image_attribute(ImageId=ami_id, LaunchPermission={"Add": users})


def copy_to_regions(clients: AwsClients, image: ImageTypeDef, run_id: str) -> dict[str, str]:
    """A copy in every configured region, tagged like the source, reusing the copy an earlier
    run of this AMI started there; AMI id by region.

    The copies are not waited for: they become available within the hour, while their tags
    already say where they came from.
    """
    copy_tags = {
        key: value
        for key, value in tags.tag_map(image.get("Tags", [])).items()
        if not key.startswith("aws:") and key != tags.PASSED_PROFILES
    }
    copy_tags |= {
        tags.STATUS: tags.VALIDATED,
        tags.RUN_ID: run_id,
        tags.SOURCE_AMI: image["ImageId"],
        tags.SOURCE_REGION: clients.config.region,
    }
    copies: dict[str, str] = {}
    for region in clients.config.copy_regions:
        ec2 = clients.ec2_in(region)
        earlier = existing_copy(ec2, image["ImageId"])
        if earlier is not None:
            copies[region] = earlier
            continue
        response = ec2.copy_image(
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


def existing_copy(ec2: EC2Client, source_ami: str) -> str | None:
    """This account's copy of `source_ami` in the client's region, if a run started one (a
    second CopyImage under the same name fails with InvalidAMIName.Duplicate)."""
    found = ec2.describe_images(
        Owners=["self"],
        Filters=[{"Name": f"tag:{tags.SOURCE_AMI}", "Values": [source_ami]}],
    )["Images"]
    live = [i for i in found if i.get("State") in ("pending", "available")]
    return live[0]["ImageId"] if live else None


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
