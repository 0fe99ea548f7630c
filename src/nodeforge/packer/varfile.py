"""The Packer var file (`*.pkrvars.json`) for one image in one region, from its resolved target.

Every value is read from the catalog (image build settings, the OS entry, the stack) or, for
where the builder runs, from the pipeline config; never chosen here, so the AMI's tags and the
vars Ansible gets describe the same build.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from pathlib import Path

from pydantic import Field

from nodeforge.aws.config import BuilderNetwork
from nodeforge.catalog.arch import Arch
from nodeforge.catalog.models import LAYERS, AmiLookup, Model
from nodeforge.errors import InputError
from nodeforge.outfile import write_output
from nodeforge.target import Target

TAG_PREFIX = "nodeforge:"


class PackerVars(Model):
    """Exactly the variables of images/packer/variables.pkr.hcl (the var-declared rule checks)."""

    region: str
    instance_type: str
    source_ami: str | None = None
    source_ami_owners: list[str] = Field(default_factory=list)
    source_ami_name_filter: str | None = None
    source_ami_architecture: Arch
    volume_size_gib: int
    root_device: str
    ssh_username: str
    kms_key_id: str | None = None
    volume_iops: int | None = None
    volume_throughput_mibps: int | None = None
    subnet_id: str | None = None
    security_group_ids: list[str] | None = None
    temporary_security_group_source_cidrs: list[str] | None = None
    ssh_interface: str | None = None
    associate_public_ip_address: bool | None = None
    iam_instance_profile: str | None = None
    vars_file: str
    builder_check_command: str
    ami_name: str
    image_name: str
    stack_name: str
    tags: dict[str, str]
    manifest_path: str

    def to_json(self) -> dict[str, object]:
        # Unset optional variables are left out rather than written as null, so Packer uses
        # the template's default.
        return self.model_dump(mode="json", exclude_none=True)


def source_lookup(target: Target, catalog_file: Path) -> AmiLookup:
    """The OS entry's base-AMI lookup for the image's architecture."""
    os_arch = target.os_arch
    if os_arch is None:
        raise InputError(
            f"OS {target.os.name} has no entry for {target.image.arch}, the architecture of "
            f"image {target.image.name}",
            file=catalog_file,
            field=f"architectures.{target.image.arch}",
            fix="add the architecture's source_ami and kernel to the OS entry",
        )
    return os_arch.source_ami


def ami_name(target: Target, now: datetime) -> str:
    """Unique per build: image, stack, UTC time (AMI names allow letters, digits, . - _ only)."""
    return f"nodeforge-{target.image.name}-{target.stack.name}-{now:%Y%m%dT%H%M%SZ}"


def bom_tags(target: Target, lookup: AmiLookup) -> dict[str, str]:
    """The bill of materials as AMI tags: the stack's pins for the enabled layers."""
    tags = {
        "os": target.os.name,
        "arch": target.image.arch,
        "profiles": " ".join(target.image.profiles),
        "layers": " ".join(layer for layer in LAYERS if target.layer(layer)),
        "source-ami-lookup": lookup.ssm_parameter
        or f"{' '.join(lookup.owners or [])}/{lookup.name_filter}",
    }
    if target.os_arch is not None and target.layer("base"):
        tags["kernel"] = target.os_arch.kernel.image_package
    tags.update(target.pinned_versions())
    return {f"{TAG_PREFIX}{key}": value for key, value in tags.items()}


def packer_vars(
    target: Target,
    *,
    catalog_file: Path,
    region: str,
    vars_path: Path,
    manifest_path: Path,
    builder_check: list[str],
    now: datetime,
    source_ami: str | None = None,
    kms_key_id: str | None = None,
    network: BuilderNetwork | None = None,
) -> PackerVars:
    """The var file's content; `source_ami` is the id resolved from the OS's SSM parameter,
    `network` the pipeline config's builder settings (none: Packer's defaults)."""
    lookup = source_lookup(target, catalog_file)
    build = target.image.build
    network = network or BuilderNetwork()
    return PackerVars(
        region=region,
        instance_type=build.builder_instance_type,
        source_ami=source_ami if lookup.ssm_parameter else None,
        source_ami_owners=list(lookup.owners or []),
        source_ami_name_filter=lookup.name_filter,
        source_ami_architecture=target.image.arch,
        volume_size_gib=build.volume_size_gib,
        root_device=target.os.root_device,
        ssh_username=target.os.default_user,
        kms_key_id=kms_key_id,
        volume_iops=build.volume_iops,
        volume_throughput_mibps=build.volume_throughput_mibps,
        subnet_id=network.subnet_id,
        # empty lists are left to the template's default (null) like every unset value
        security_group_ids=network.security_group_ids or None,
        temporary_security_group_source_cidrs=network.temporary_security_group_source_cidrs or None,
        ssh_interface=network.ssh_interface,
        associate_public_ip_address=network.associate_public_ip_address,
        iam_instance_profile=network.iam_instance_profile,
        vars_file=str(vars_path.resolve()),
        builder_check_command=shlex.join(builder_check),
        ami_name=ami_name(target, now),
        image_name=target.image.name,
        stack_name=target.stack.name,
        tags=bom_tags(target, lookup),
        manifest_path=str(manifest_path.resolve()),
    )


def write_var_file(path: Path, values: PackerVars) -> Path:
    write_output(path, json.dumps(values.to_json(), indent=2, sort_keys=True) + "\n")
    return path
