"""The outcome of a validation run, written to AWS: publish a validated AMI, or retire a failed
one so that nothing launches it by accident."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nodeforge.aws import encryption, tags
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.config import DeregistrationProtection, PipelineConfig
from nodeforge.aws.errors import AwsError
from nodeforge.aws.launch import Clock

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import (
        CopyImageRequestTypeDef,
        ImageTypeDef,
        LaunchPermissionTypeDef,
    )
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_ssm import SSMClient

SSM_ROOT = "/nodeforge"


def parameter_name(image: str, profile: str) -> str:
    return f"{SSM_ROOT}/{image}/{profile}/ami-id"


def mark_validated(ec2: EC2Client, ami_id: str, run_id: str) -> None:
    ec2.create_tags(
        Resources=[ami_id],
        Tags=tags.tag_list({tags.STATUS: tags.VALIDATED, tags.RUN_ID: run_id}),
    )


def schedule_deprecation(ec2: EC2Client, ami_id: str, at: datetime) -> None:
    """EC2 deprecates the AMI at `at` (rounded down to the minute), as a published AMI's end of
    life; repeating it with the same time changes nothing."""
    ec2.enable_image_deprecation(ImageId=ami_id, DeprecateAt=at.replace(second=0, microsecond=0))


def protect(ec2: EC2Client, ami_id: str, protection: DeregistrationProtection) -> None:
    """Deregistration protection as the config asks (repeating it changes nothing)."""
    if protection != "disabled":
        ec2.enable_image_deregistration_protection(
            ImageId=ami_id, WithCooldown=protection == "enabled-with-cooldown"
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
    deprecate_soon(ec2, ami_id, now)


def deprecate_soon(ec2: EC2Client, ami_id: str, now: datetime) -> None:
    """Deprecate the AMI now, as EC2 allows: it refuses a time in the past and rounds to the
    minute, so a little ahead."""
    deprecate_at = now.replace(second=0, microsecond=0) + timedelta(minutes=2)
    ec2.enable_image_deprecation(ImageId=ami_id, DeprecateAt=deprecate_at)


def share(
    ec2: EC2Client,
    kms: KMSClient,
    image: ImageTypeDef,
    snapshot_keys: Sequence[str],
    config: PipelineConfig,
) -> None:
    """The config's accounts, organizations and organizational units may launch the AMI: a KMS
    grant for each account on every customer managed key of its snapshots (`snapshot_keys`,
    encryption.snapshot_keys; pipeline checks
    refused AWS managed ones before anything ran; an organization is let in by the key's policy,
    see docs/aws-pipeline.md), then the launch permission. The snapshots need no create-volume
    permission: the launch permission covers them. Each step finds what an earlier run did, so
    a re-run repeats this safely."""
    if not config.shares:
        return
    if config.share_accounts:
        for key in snapshot_keys:
            encryption.grant_accounts(kms, key, config.share_accounts)
    permissions: list[LaunchPermissionTypeDef] = []
    permissions += [{"UserId": account} for account in config.share_accounts]
    permissions += [{"OrganizationArn": arn} for arn in config.share_organization_arns]
    permissions += [{"OrganizationalUnitArn": arn} for arn in config.share_ou_arns]
    ec2.modify_image_attribute(ImageId=image["ImageId"], LaunchPermission={"Add": permissions})


def copy_to_regions(clients: AwsClients, image: ImageTypeDef, run_id: str) -> dict[str, str]:
    """A copy in every configured region, tagged like the source but `built` until it is shared
    and published, encrypted with the region's `copy_kms_key_ids` key where one is set; the copy
    an earlier run of this AMI started there is reused. AMI id by region."""
    config = clients.config
    copy_tags = {
        key: value
        for key, value in tags.tag_map(image.get("Tags", [])).items()
        if not key.startswith("aws:") and key != tags.PASSED_PROFILES
    }
    copy_tags |= {
        tags.STATUS: tags.BUILT,
        tags.RUN_ID: run_id,
        tags.SOURCE_AMI: image["ImageId"],
        tags.SOURCE_REGION: config.region,
    }
    copies: dict[str, str] = {}
    for region in config.copy_regions:
        ec2 = clients.ec2_in(region)
        earlier = existing_copy(ec2, image["ImageId"])
        if earlier is not None:
            copies[region] = earlier
            continue
        request: CopyImageRequestTypeDef = {
            "SourceImageId": image["ImageId"],
            "SourceRegion": config.region,
            "Name": image.get("Name", image["ImageId"]),
            "Description": f"copy of {image['ImageId']} from {config.region}",
            "ClientToken": f"{run_id}-{region}"[:64],
            "TagSpecifications": [
                {"ResourceType": kind, "Tags": tags.tag_list(copy_tags)}
                for kind in ("image", "snapshot")
            ],
        }
        if key := config.copy_kms_key_ids.get(region):
            request["Encrypted"] = True
            request["KmsKeyId"] = key
        copies[region] = ec2.copy_image(**request)["ImageId"]
    return copies


def wait_for_copies(
    clients: AwsClients, copies: Mapping[str, str], clock: Clock
) -> dict[str, ImageTypeDef]:
    """Each copy once available; AwsError when one failed or the wait outlasted
    copy_timeout_s (a re-run waits for the same copies again)."""
    config = clients.config
    waiting = dict(copies)
    done: dict[str, ImageTypeDef] = {}
    started = clock.monotonic()
    while True:
        for region, ami in list(waiting.items()):
            [found] = clients.ec2_in(region).describe_images(ImageIds=[ami])["Images"]
            state = found.get("State")
            if state == "available":
                done[region] = found
                del waiting[region]
            elif state != "pending":
                reason = found.get("StateReason", {}).get("Message", "")
                raise AwsError(f"the copy {ami} in {region} is {state}: {reason}".rstrip(": "))
        if not waiting:
            return done
        if clock.monotonic() - started > config.copy_timeout_s:
            pending = ", ".join(f"{ami} in {region}" for region, ami in waiting.items())
            raise AwsError(
                f"copies still pending after {config.copy_timeout_s:g} s: {pending}. Run the "
                "same promote again later (it finds the copies), or raise copy_timeout_s"
            )
        clock.sleep(config.poll_interval_s)


def existing_copy(ec2: EC2Client, source_ami: str) -> str | None:
    """This account's copy of `source_ami` in the client's region, if a run started one (a
    second CopyImage under the same name fails with InvalidAMIName.Duplicate). A copy that
    ended `failed` is deregistered, so that a new one can take its name."""
    found = ec2.describe_images(
        Owners=["self"],
        Filters=[{"Name": f"tag:{tags.SOURCE_AMI}", "Values": [source_ami]}],
    )["Images"]
    for failed in (i for i in found if i.get("State") in ("failed", "error")):
        ec2.deregister_image(ImageId=failed["ImageId"])
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
