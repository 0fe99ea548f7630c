"""The pipeline settings file (`--config FILE`, YAML or JSON): where and how to launch, publish."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, model_validator

from nodeforge.catalog.loader import input_error_from
from nodeforge.catalog.models import Image, Model, unique
from nodeforge.catalog.yamlfile import read_yaml
from nodeforge.errors import InputError

Region = Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
Account = Annotated[str, Field(pattern=r"^\d{12}$")]
SecurityGroupId = Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]
SubnetId = Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]
OrganizationArn = Annotated[
    str, Field(pattern=r"^arn:aws[a-z-]*:organizations::\d{12}:organization/o-[a-z0-9]{10,32}$")
]
OrganizationalUnitArn = Annotated[
    str,
    Field(
        pattern=r"^arn:aws[a-z-]*:organizations::\d{12}:ou/o-[a-z0-9]{10,32}/"
        r"ou-[a-z0-9]{4,32}-[a-z0-9]{8,32}$"
    ),
]

Ipv4Cidr = Annotated[
    str,
    Field(
        pattern=r"^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}/(3[0-2]|[12]?\d)$"
    ),
]
SshInterface = Literal["public_ip", "private_ip", "public_dns", "private_dns"]
"""Packer's amazon builders' `ssh_interface` values, but `session_manager`: the template's Ansible
passes run with `use_proxy = false` and connect to the builder's address themselves, which an
SSM tunnel does not give them (hashicorp/packer#10035)."""

DeregistrationProtection = Literal["disabled", "enabled", "enabled-with-cooldown"]
"""EC2's own names for an AMI's deregistration protection (DescribeImages)."""

ValidationTransport = Literal["ssh", "ssm"]
"""How the runner reaches the validation instances: testinfra over SSH from the runner, or AWS
Systems Manager Run Command running the suite on the node itself (no inbound port)."""

BucketName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]


class CapacityTarget(Model):
    """An On-Demand Capacity Reservation, or a Capacity Block for ML (`capacity_block: true`),
    named by id, or `find: true`: the active one with room in the subnet's zone."""

    reservation_id: str | None = Field(default=None, pattern=r"^cr-[0-9a-f]{8,17}$")
    capacity_block: bool = False
    find: bool = False

    @model_validator(mode="after")
    def _named_or_found(self) -> CapacityTarget:
        if (self.reservation_id is None) == (not self.find):
            raise ValueError("name a reservation_id, or set find: true (not both)")
        return self


def _instance_profile_name(value: str) -> str:
    if value.startswith("arn:"):
        raise ValueError(
            f"give the instance profile's name, not its ARN: '{value.rsplit('/', 1)[-1]}'"
        )
    if not re.fullmatch(r"[\w+=,.@-]{1,128}", value):
        raise ValueError("an IAM instance profile name: up to 128 of letters, digits and +=,.@_-")
    return value


InstanceProfileName = Annotated[str, AfterValidator(_instance_profile_name)]
"""IAM's instance profile names: RunInstances and Packer take the name."""


class BuilderNetwork(Model):
    """Where and how Packer's builder instance runs, in the config's region (subnets and
    security groups are regional)."""

    subnet_id: SubnetId | None = None
    """Default: the config's subnet_id (Packer's own default, the default VPC, is absent from
    many accounts)."""
    security_group_ids: list[SecurityGroupId] = Field(default_factory=list, max_length=5)
    """Default: a temporary group Packer creates that admits SSH from
    temporary_security_group_source_cidrs."""
    temporary_security_group_source_cidrs: list[Ipv4Cidr] = Field(default_factory=list)
    """Default (Packer's): 0.0.0.0/0."""
    ssh_interface: SshInterface | None = None
    """How Packer and Ansible reach the builder (default: Packer's, the public IP if it has one,
    else the private one)."""
    associate_public_ip_address: bool | None = None
    iam_instance_profile: InstanceProfileName | None = None
    """An instance profile name for the builder (private repositories, S3 artifacts)."""

    @model_validator(mode="after")
    def _consistent(self) -> BuilderNetwork:
        if self.security_group_ids and self.temporary_security_group_source_cidrs:
            raise ValueError(
                "temporary_security_group_source_cidrs applies only to the temporary group Packer "
                "creates when security_group_ids is empty: set one of the two"
            )
        return self


class PipelineConfig(Model):
    region: Region
    subnet_id: SubnetId
    """One subnet, so one availability zone: a cluster placement group cannot span zones."""
    profile_subnets: dict[str, SubnetId] = Field(default_factory=dict)
    """Per profile, another subnet (so zone) than subnet_id: where its capacity is."""
    security_group_ids: list[SecurityGroupId] = Field(min_length=1, max_length=5)
    builder: BuilderNetwork = Field(default_factory=BuilderNetwork)
    """Packer's builder (`nodeforge build --target aws --config FILE`)."""
    key_name: str | None = None
    iam_instance_profile: InstanceProfileName | None = None
    """An instance profile name the validation instances launch with (what the checks on the
    node may call; Systems Manager's agent needs AmazonSSMManagedInstanceCore). The caller needs
    iam:PassRole on its role."""
    ssh_user: str | None = None
    """Default: the OS entry's default_user."""
    validation_transport: ValidationTransport = "ssh"
    """`ssh`: the runner reaches each instance on port 22 (security group, route, key pair).
    `ssm`: Systems Manager Run Command runs the suite on each instance, which needs only
    outbound HTTPS (the SSM endpoints and S3), iam_instance_profile with
    AmazonSSMManagedInstanceCore, and ssm_bucket."""
    ssm_bucket: BucketName | None = None
    """With `ssm`: an S3 bucket in the config's region for the suite bundles and the reports
    (under nodeforge/validation/; the node reaches them through presigned URLs only)."""
    ssm_online_timeout_s: float = Field(default=600, gt=0)
    """With `ssm`: how long each instance may take to come Online in Systems Manager."""
    ssm_command_timeout_s: int = Field(default=3600, ge=60, le=48 * 3600)
    """With `ssm`: how long the suite may run on a node (Run Command's executionTimeout)."""
    share_accounts: list[Account] = Field(default_factory=list)
    share_organization_arns: list[OrganizationArn] = Field(default_factory=list)
    share_ou_arns: list[OrganizationalUnitArn] = Field(default_factory=list)
    """Organizations and organizational units whose accounts may launch the published AMI."""
    copy_regions: Annotated[list[Region], AfterValidator(unique)] = Field(default_factory=list)
    copy_kms_key_ids: dict[Region, str] = Field(default_factory=dict)
    """Per copy region, the KMS key (ARN, id or alias) the copy is encrypted with. Needed to
    share copies of an encrypted AMI: without one, EC2 uses the region's default EBS key."""
    copy_timeout_s: float = Field(default=3600, gt=0)
    """How long to wait for the copies to become available before sharing and publishing them."""
    deprecate_after_days: int | None = Field(default=None, ge=1, le=10 * 365)
    """A published AMI and its copies are deprecated this long after publishing (EC2 then
    leaves them out of default listings, while they still launch); none by default."""
    deregistration_protection: DeregistrationProtection = "disabled"
    """Protection on the published AMI and its copies: `enabled`, or `enabled-with-cooldown`
    (once disabled, the AMI stays protected for another 24 hours); prune disables it first."""
    ttl_minutes: int = Field(default=240, ge=10, le=7 * 24 * 60)
    """How long a reaper should let a validation instance live if nodeforge could not end it."""
    multinode: bool = False
    capacity: dict[str, CapacityTarget] = Field(default_factory=dict)
    """Per profile name."""
    ready_timeout_s: float = Field(default=1800, gt=0)
    ssh_ready_timeout_s: float = Field(default=600, gt=0)
    """After the status checks: how long each instance may take to let the runner in over SSH."""
    poll_interval_s: float = Field(default=15, ge=0)
    terminate_timeout_s: float = Field(default=900, gt=0)
    api_max_attempts: int = Field(default=10, ge=1, le=20)
    retry_mode: Literal["standard", "adaptive"] = "standard"

    @property
    def builder_network(self) -> BuilderNetwork:
        """The builder section with its subnet defaulted to the pipeline's."""
        subnet = self.builder.subnet_id or self.subnet_id
        return self.builder.model_copy(update={"subnet_id": subnet})

    @property
    def shares(self) -> list[str]:
        """Every account, organization and organizational unit the AMI is shared with."""
        return [*self.share_accounts, *self.share_organization_arns, *self.share_ou_arns]

    @model_validator(mode="after")
    def _ssm_needs(self) -> PipelineConfig:
        if self.validation_transport != "ssm":
            return self
        if self.iam_instance_profile is None:
            raise ValueError(
                "validation_transport ssm needs iam_instance_profile: an instance profile whose "
                "role has AmazonSSMManagedInstanceCore, so the SSM agent can register the node"
            )
        if self.ssm_bucket is None:
            raise ValueError(
                "validation_transport ssm needs ssm_bucket: an S3 bucket in the config's region "
                "for the suite bundles and the reports"
            )
        if self.multinode:
            raise ValueError(
                "multinode validation runs over ssh only so far: the cross-node NCCL check "
                "needs every node in one testinfra run, and over ssm each node runs the suite "
                "alone (set validation_transport: ssh, or multinode: false)"
            )
        return self

    @model_validator(mode="after")
    def _copies_elsewhere(self) -> PipelineConfig:
        if self.region in self.copy_regions:
            raise ValueError(
                f"copy_regions lists the home region {self.region}: the AMI is already there"
            )
        if stray := sorted(set(self.copy_kms_key_ids) - set(self.copy_regions)):
            raise ValueError(
                f"copy_kms_key_ids names {', '.join(stray)}, which copy_regions does not list"
            )
        return self


def load_config(path: Path, image: Image) -> PipelineConfig:
    """The settings file for one image: a capacity or profile_subnets entry must name a profile
    of the image."""
    doc = read_yaml(path)
    if not isinstance(doc.data, dict):
        raise InputError(
            "expected a mapping of pipeline settings (region, subnet_id, security_group_ids, ...)",
            file=path,
            line=doc.line_of(()),
            fix="see docs/aws-pipeline.md for an example",
        )
    try:
        config = PipelineConfig.model_validate(doc.data)
    except ValidationError as exc:
        raise input_error_from(exc, path, doc.line_of, doc.data) from None
    for section, entries in (
        ("capacity", config.capacity),
        ("profile_subnets", config.profile_subnets),
    ):
        for profile in entries:
            if profile not in image.profiles:
                raise InputError(
                    f"'{profile}' is no profile of image {image.name}",
                    file=path,
                    field=f"{section}.{profile}",
                    line=doc.line_of((section, profile)),
                    fix=f"name one of: {', '.join(image.profiles)}",
                )
    return config
