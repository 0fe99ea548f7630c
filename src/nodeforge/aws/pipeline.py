"""Promote an AMI: launch each target profile from it, validate, then publish it or retire it."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.aws import encryption, publish, tags
from nodeforge.aws.capacity import resolve_capacity
from nodeforge.aws.clients import AwsClients
from nodeforge.aws.errors import InstanceUnreachableError, NoCapacityError, aws_error
from nodeforge.aws.fleet import validation_fleet
from nodeforge.aws.launch import Clock, network_interfaces, run_instances_request, wait_ready
from nodeforge.aws.netlayout import Slot, profile_layouts
from nodeforge.aws.reachable import FRESH_HOST_SSH, wait_for_ssh
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Profile
from nodeforge.errors import InputError
from nodeforge.outfile import output_folder, write_output
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import Target, target_for
from nodeforge.validate import UNREACHABLE, Stage, ValidationRun, run_validation

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import ImageTypeDef


@dataclass(frozen=True)
class Node:
    """A validation instance: its id and its private address."""

    instance_id: str
    address: str


Validator = Callable[[Sequence[Node], str], bool]
"""validate(nodes, profile) -> every check passed. It raises InstanceUnreachableError when it
could not reach them: nothing was judged."""
Outcome = Literal["passed", "failed", "unreachable", "no-capacity", "passed-earlier"]
Status = Literal["published", "failed", "infrastructure-failed"]
_PASSED = ("passed", "passed-earlier")

# EC2 errors that mean the config file or the command line is wrong, not AWS or the AMI
_INPUT_ERRORS: Mapping[str, tuple[str, str]] = {
    "InvalidSubnetID.NotFound": (
        "subnet_id",
        "use a subnet of the configured region (subnet_id, or the profile's profile_subnets)",
    ),
    "InvalidGroup.NotFound": ("security_group_ids", "use security groups of the subnet's VPC"),
    "InvalidKeyPair.NotFound": ("key_name", "use a key pair of the configured region"),
    "InvalidCapacityReservationId.NotFound": (
        "capacity",
        "use a reservation id of the configured region",
    ),
    "InvalidCapacityReservationId.Malformed": ("capacity", "use an id like cr-0123456789abcdef0"),
}


@dataclass(frozen=True)
class ProfileRun:
    profile: str
    outcome: Outcome
    instances: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class PromoteResult:
    image: str
    ami: str
    region: str
    run_id: str
    runs: list[ProfileRun] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    shared_with: list[str] = field(default_factory=list)
    copies: dict[str, str] = field(default_factory=dict)
    copy_parameters: dict[str, list[str]] = field(default_factory=dict)
    """Per copy region, the SSM parameters written there (the same names as `parameters`)."""

    @property
    def status(self) -> Status:
        """failed: the AMI did not pass (tagged and deprecated); infrastructure-failed: no
        capacity, or instances that never became reachable, so nothing was judged and the AMI
        stays `built` for a re-run."""
        if any(run.outcome == "failed" for run in self.runs):
            return "failed"
        if self.parameters:
            return "published"
        return "infrastructure-failed"

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "ami": self.ami,
            "region": self.region,
            "run_id": self.run_id,
            "status": self.status,
            "profiles": [
                {
                    "profile": run.profile,
                    "outcome": run.outcome,
                    "instances": run.instances,
                    "hosts": run.hosts,
                    "message": run.message,
                }
                for run in self.runs
            ],
            "ssm_parameters": self.parameters,
            "shared_with": self.shared_with,
            "copies": self.copies,
            "regions": self.regions(),
        }

    def regions(self) -> dict[str, dict[str, Any]]:
        """What the run did in each region: the AMI there, its share and SSM parameters, and
        its status (a copy counts as published once its parameters are written)."""
        home = {
            "ami": self.ami,
            "shared_with": self.shared_with if self.parameters else [],
            "ssm_parameters": self.parameters,
            "status": self.status,
        }
        copies = {
            region: {
                "ami": ami,
                "shared_with": self.shared_with if region in self.copy_parameters else [],
                "ssm_parameters": self.copy_parameters.get(region, []),
                "status": "published" if region in self.copy_parameters else "copied",
            }
            for region, ami in self.copies.items()
        }
        return {self.region: home, **copies}


def nodes_for(profile: Profile, multinode: bool) -> int:
    """One node, or as many as the profile's multi-node NCCL baseline was measured on."""
    if not multinode:
        return 1
    return profile.baselines.nccl_all_reduce_multi_node.nodes or 2


def promote(
    clients: AwsClients,
    *,
    image: str,
    ami_id: str,
    profiles: Sequence[Profile],
    validate: Validator,
    progress: Callable[[str], None] = lambda _line: None,
    clock: Clock | None = None,
    run_id: str | None = None,
    config_path: Path | None = None,
    profile_files: Mapping[str, Path] | None = None,
) -> PromoteResult:
    """Validate `ami_id` on every profile in turn (stopping at the first that does not pass),
    then publish it (tags, SSM parameters, shares, copies) or mark it failed and deprecate it.

    Raises InputError for a wrong AMI or config (naming `config_path`), AwsError for AWS
    failures; instances are terminated in every case.
    """
    clock = clock or Clock()
    run_id = run_id or f"{clock.now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    result = PromoteResult(image=image, ami=ami_id, region=clients.config.region, run_id=run_id)
    try:
        source = _checked_ami(clients, ami_id, image, profiles)
        source_keys = _check_shareable(clients, source, config_path)
        layouts = profile_layouts(
            clients.ec2,
            profiles,
            region=clients.config.region,
            config_path=config_path,
            profile_files=profile_files or {},
        )
        passed = publish.passed_profiles(source)
        for profile in profiles:
            if profile.name in passed:
                # an earlier run validated it and then failed to publish: not again
                result.runs.append(ProfileRun(profile.name, "passed-earlier"))
                progress(f"{profile.name}: passed in an earlier run")
                continue
            run = _run_profile(
                clients,
                ami_id=ami_id,
                image=image,
                profile=profile,
                validate=validate,
                progress=progress,
                clock=clock,
                run_id=run_id,
                layout=layouts[profile.name],
            )
            result.runs.append(run)
            progress(f"{profile.name}: {run.outcome}{': ' + run.message if run.message else ''}")
            if run.outcome != "passed":
                break
            passed.append(profile.name)
            publish.mark_passed(clients.ec2, ami_id, passed)
        if result.status == "failed":
            failed = result.runs[-1].profile
            progress(f"marking {ami_id} failed and deprecating it")
            publish.mark_failed(clients.ec2, ami_id, run_id=run_id, profile=failed, now=clock.now())
        elif all(run.outcome in _PASSED for run in result.runs):
            names = [p.name for p in profiles]
            _publish(clients, source, source_keys, result, names, progress=progress, clock=clock)
        else:
            progress(f"infrastructure failed: {ami_id} stays {tags.STATUS}=built for a re-run")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in _INPUT_ERRORS:
            field_name, fix = _INPUT_ERRORS[code]
            message = exc.response.get("Error", {}).get("Message", code)
            raise InputError(message, file=config_path, field=field_name, fix=fix) from None
        raise aws_error(exc, f"promoting {ami_id}") from None
    except BotoCoreError as exc:
        raise aws_error(exc, f"promoting {ami_id}") from None
    return result


def _checked_ami(
    clients: AwsClients, ami_id: str, image: str, profiles: Sequence[Profile]
) -> ImageTypeDef:
    """The AMI, once it is known to be this image's, available, and of the profiles' arch."""
    where = f"in {clients.config.region}"
    try:
        found = clients.ec2.describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as exc:
        if not exc.response.get("Error", {}).get("Code", "").startswith("InvalidAMIID"):
            raise
        found = []
    if not found:
        raise InputError(
            f"AMI {ami_id} does not exist {where}",
            field="--ami",
            fix="pass the AMI id Packer printed, and the region it built in (config region)",
        )
    ami = found[0]
    if ami.get("State") != "available":
        raise InputError(
            f"AMI {ami_id} is {ami.get('State')}, not available",
            field="--ami",
            fix="wait until Packer's AMI is available (aws ec2 wait image-available)",
        )
    tagged = tags.tag_map(ami.get("Tags", [])).get(tags.IMAGE)
    if tagged != image:
        raise InputError(
            f"AMI {ami_id} is tagged {tags.IMAGE}={tagged or '(none)'}, not {image}",
            field="--ami",
            fix="promote the AMI that `nodeforge build --target aws` built for this image",
        )
    arch = ami.get("Architecture", "")
    for profile in profiles:
        if arch and arch != profile.arch:
            raise InputError(
                f"AMI {ami_id} is {arch}, profile {profile.name} is {profile.arch}",
                field="--ami",
                fix="build the image for the profile's architecture",
            )
    return ami


def _check_shareable(
    clients: AwsClients, source: ImageTypeDef, config_path: Path | None
) -> list[str]:
    """Before any instance starts: every key the shared AMI and its copies are encrypted with
    can be granted to other accounts (aws/ebs cannot). The keys of the AMI's snapshots (none
    read when nothing is shared)."""
    config = clients.config
    if not config.shares:
        return []
    ami_id = source["ImageId"]
    fix = (
        "build the AMI with a customer managed KMS key (`nodeforge build --kms-key-id`), or "
        "leave share_accounts empty"
    )
    source_keys = encryption.snapshot_keys(clients.ec2, source)
    for source_key in source_keys:
        if encryption.aws_managed(clients.kms_in(config.region), source_key):
            raise InputError(
                f"AMI {ami_id} is encrypted with the AWS managed key {source_key}, which cannot be "
                "shared with other accounts",
                file=config_path,
                field="share_accounts",
                fix=fix,
            )
    for region in config.copy_regions:
        key = config.copy_kms_key_ids.get(region) or (
            encryption.DEFAULT_EBS_KEY if source_keys else None
        )
        if key is not None and encryption.aws_managed(clients.kms_in(region), key):
            raise InputError(
                f"the copy in {region} would be encrypted with the AWS managed key {key}, which "
                "cannot be shared with other accounts",
                file=config_path,
                field=f"copy_kms_key_ids.{region}",
                fix=f"name a customer managed key of {region} there",
            )
    return source_keys


def _run_profile(
    clients: AwsClients,
    *,
    ami_id: str,
    image: str,
    profile: Profile,
    validate: Validator,
    progress: Callable[[str], None],
    clock: Clock,
    run_id: str,
    layout: list[Slot],
) -> ProfileRun:
    config = clients.config
    count = nodes_for(profile, config.multinode)
    subnet_id = config.profile_subnets.get(profile.name, config.subnet_id)
    interfaces = network_interfaces(
        layout, subnet_id=subnet_id, security_group_ids=config.security_group_ids
    )
    run_tags = {
        "Name": f"nodeforge-validate-{image}-{profile.name}",
        tags.RUN_ID: run_id,
        tags.TTL: tags.iso(clock.now() + timedelta(minutes=config.ttl_minutes)),
        tags.IMAGE: image,
        tags.PROFILE: profile.name,
        tags.SOURCE_AMI: ami_id,
    }
    with validation_fleet(
        clients.ec2,
        run_id=run_id,
        poll_s=config.poll_interval_s,
        timeout_s=config.terminate_timeout_s,
        progress=progress,
    ) as fleet:
        try:
            capacity = resolve_capacity(
                clients.ec2,
                config.capacity.get(profile.name),
                instance_type=profile.name,
                count=count,
                subnet_id=subnet_id,
            )
            # a capacity reservation or block fixes placement itself (its own cluster group,
            # if it has one): a fresh group would not match it and EC2 would refuse the launch
            group: str | None
            if capacity is None:
                group = fleet.placement_group(f"nodeforge-{run_id}-{profile.name}", run_tags)
            else:
                group = capacity.placement_group
                progress(f"{profile.name}: launching into {capacity.reservation_id}")
            request = run_instances_request(
                ami_id=ami_id,
                profile=profile,
                count=count,
                config=config,
                interfaces=interfaces,
                placement_group=group,
                capacity=capacity,
                tags=run_tags,
                client_token=f"{run_id}-{profile.name}",
            )
            progress(f"{profile.name}: launching {count} instance(s) from {ami_id}")
            ids = fleet.launch(request)
        except NoCapacityError as exc:
            return ProfileRun(profile.name, "no-capacity", message=str(exc))
        progress(f"{profile.name}: waiting for {', '.join(ids)} to pass status checks")
        try:
            hosts = wait_ready(
                clients.ec2,
                ids,
                timeout_s=config.ready_timeout_s,
                poll_s=config.poll_interval_s,
                clock=clock,
            )
        except InstanceUnreachableError as exc:
            return ProfileRun(profile.name, "unreachable", ids, message=str(exc))
        progress(f"{profile.name}: validating on {', '.join(hosts)}")
        try:
            ok = validate([Node(i, host) for i, host in zip(ids, hosts, strict=True)], profile.name)
        except InstanceUnreachableError as exc:
            return ProfileRun(profile.name, "unreachable", ids, hosts, message=str(exc))
        return ProfileRun(profile.name, "passed" if ok else "failed", ids, hosts)


def _publish(
    clients: AwsClients,
    source: ImageTypeDef,
    source_keys: list[str],
    result: PromoteResult,
    profiles: list[str],
    *,
    progress: Callable[[str], None],
    clock: Clock,
) -> None:
    # In every region: shared first, then tagged validated (deprecation and deregistration
    # protection with it), then the SSM parameters, which consumers follow: a step that fails
    # leaves no "validated" AMI that was never shared, and no parameter pointing at one that is
    # not protected yet. Each step is safe to repeat, so a re-run finishes the publish. The
    # copies are published before the source, whose parameters come last.
    config = clients.config
    ami_id = source["ImageId"]
    end_of_life = (
        clock.now() + timedelta(days=config.deprecate_after_days)
        if config.deprecate_after_days
        else None
    )
    if config.shares:
        progress(f"sharing {ami_id} with {', '.join(config.shares)}")
        publish.share(clients.ec2, clients.kms_in(config.region), source, source_keys, config)
        result.shared_with = config.shares
    if config.copy_regions:
        progress(f"copying {ami_id} to {', '.join(config.copy_regions)}")
        result.copies = publish.copy_to_regions(clients, source, result.run_id)
        progress(f"waiting for {', '.join(result.copies.values())} to become available")
        for region, copy in publish.wait_for_copies(clients, result.copies, clock).items():
            ec2 = clients.ec2_in(region)  # a new client each call: one per region here
            copy_keys = encryption.snapshot_keys(ec2, copy)
            publish.share(ec2, clients.kms_in(region), copy, copy_keys, config)
            publish.mark_validated(ec2, copy["ImageId"], result.run_id)
            if end_of_life is not None:
                publish.schedule_deprecation(ec2, copy["ImageId"], end_of_life)
            publish.protect(ec2, copy["ImageId"], config.deregistration_protection)
            result.copy_parameters[region] = publish.put_parameters(
                clients.ssm_in(region), result.image, profiles, copy["ImageId"]
            )
            progress(f"published {copy['ImageId']} in {region}")
    progress(f"tagging {ami_id} validated")
    publish.mark_validated(clients.ec2, ami_id, result.run_id)
    if end_of_life is not None:
        progress(f"{ami_id} is deprecated from {tags.iso(end_of_life)}")
        publish.schedule_deprecation(clients.ec2, ami_id, end_of_life)
    publish.protect(clients.ec2, ami_id, config.deregistration_protection)
    result.parameters = publish.put_parameters(clients.ssm, result.image, profiles, ami_id)
    progress(f"published {', '.join(result.parameters)}")


def ssh_validator(
    catalog: Catalog,
    image: str,
    *,
    report_root: Path,
    ssh_user: str | None,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
    ssh_ready_timeout_s: float = 600,
    clock: Clock | None = None,
) -> Validator:
    """The real validator: the target stage of validation/ over SSH to the instances, once
    each answers SSH. InstanceUnreachableError when one does not, or when SSH lost a host
    during the suite: its checks judged nothing, so the AMI is not failed for them."""

    def validate(nodes: Sequence[Node], profile: str) -> bool:
        target = target_for(catalog, image, profile)
        user = ssh_user or target.os.default_user
        hosts = [node.address for node in nodes]
        wait_for_ssh(hosts, user, timeout_s=ssh_ready_timeout_s, poll_s=15, clock=clock or Clock())
        run = run_suite(
            catalog,
            target,
            hosts=",".join(f"ssh://{user}@{host}" for host in hosts),
            stage="target",
            report_dir=report_root / profile,
            ssh_extra_args=FRESH_HOST_SSH,
            overrides=overrides,
            overrides_path=overrides_path,
        )
        if lost := run.unreachable():
            where = sorted({str(c.get("host")) for c in lost})
            raise InstanceUnreachableError(
                f"SSH lost {', '.join(where)} during validation ({len(lost)} check(s) could not "
                f"run: {lost[0][UNREACHABLE]}); reports in {run.json_report.parent}"
            )
        return run.ok

    return validate


def run_suite(
    catalog: Catalog,
    target: Target,
    *,
    hosts: str,
    stage: Stage,
    report_dir: Path,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
    ssh_extra_args: str | None = None,
) -> ValidationRun:
    """validation/ against testinfra `hosts`, compared with the target's resolved vars (written
    beside the reports, so a failed run can be replayed with `nodeforge validate`)."""
    vars_path = output_folder(report_dir) / "vars.json"
    document = render(catalog, target, overrides=overrides, overrides_path=overrides_path)
    write_output(vars_path, to_json(document))
    return run_validation(
        hosts=hosts,
        vars_path=vars_path,
        stage=stage,
        report_dir=report_dir,
        ssh_extra_args=ssh_extra_args,
    )
