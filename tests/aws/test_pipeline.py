"""promote(): launch, validate through the injected callable, then publish or retire the AMI."""

from __future__ import annotations

import base64
import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeforge.aws import tags
from nodeforge.aws.errors import AwsError, InstanceUnreachableError
from nodeforge.aws.pipeline import Node, PromoteResult, Validator, promote, ssh_validator
from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from nodeforge.validate import ValidationRun
from tests.aws.conftest import IMAGE, REGION, FakeClock, World, failure

PARAMETER = f"/nodeforge/{IMAGE}/p5.48xlarge/ami-id"
PARTNER = "111122223333"


class FakeValidator:
    def __init__(self, ok: bool, world: World) -> None:
        self.ok = ok
        self.world = world
        self.calls: list[tuple[list[str], str, int]] = []

    def __call__(self, nodes: Sequence[Node], profile: str) -> bool:
        # what runs while validation does: the instances, up and reachable
        hosts = [node.address for node in nodes]
        self.calls.append((hosts, profile, len(self.world.live_instances())))
        return self.ok


def _promote(
    world: World,
    shipped: Catalog,
    validate: Validator,
    profiles: tuple[str, ...] = ("p5.48xlarge",),
    launches: bool = True,
    **config: Any,
) -> PromoteResult:
    lines: list[str] = []
    result = promote(
        world.clients(**config),
        image=IMAGE,
        ami_id=world.ami_id,
        profiles=[shipped.profiles[p] for p in profiles],
        validate=validate,
        progress=lines.append,
        clock=FakeClock().clock(),
        run_id="run-1",
    )
    assert any("launching" in line for line in lines) == launches
    return result


def _parameters(world: World) -> list[str]:
    ssm = world.session.client("ssm")
    found = ssm.get_parameters_by_path(Path="/nodeforge", Recursive=True)["Parameters"]
    return [p["Name"] for p in found]


def _launch_permissions(world: World) -> list[str]:
    attribute = world.ec2.describe_image_attribute(
        ImageId=world.ami_id, Attribute="launchPermission"
    )
    return [p.get("UserId", "") for p in attribute.get("LaunchPermissions", [])]


def test_pass_publishes_tags_shares_copies(world: World, shipped: Catalog) -> None:
    validate = FakeValidator(True, world)
    result = _promote(
        world, shipped, validate, share_accounts=[PARTNER], copy_regions=["us-west-2"]
    )
    assert result.status == "published"
    assert validate.calls[0][1:] == ("p5.48xlarge", 1)
    assert len(validate.calls[0][0]) == 1
    assert world.image_tags()[tags.STATUS] == tags.VALIDATED
    ssm = world.session.client("ssm")
    parameter = ssm.get_parameter(Name=PARAMETER)["Parameter"]
    assert (parameter["Value"], parameter.get("DataType")) == (world.ami_id, "aws:ec2:image")
    assert result.parameters == [PARAMETER]
    assert _launch_permissions(world) == [PARTNER]
    # the launch permission lets the account use the snapshots: none is shared on its own
    volume = world.ec2.describe_snapshot_attribute(
        SnapshotId=world.snapshot_id, Attribute="createVolumePermission"
    )
    assert volume["CreateVolumePermissions"] == []
    assert world.fake.operations("ModifySnapshotAttribute") == []
    assert world.image_tags()[tags.PASSED_PROFILES] == "p5.48xlarge"
    copy = result.copies["us-west-2"]
    west = world.session.client("ec2", region_name="us-west-2")
    assert west.describe_images(ImageIds=[copy])["Images"]
    assert world.image_tags(copy, "us-west-2")[tags.STATUS] == tags.VALIDATED
    west_ssm = world.session.client("ssm", region_name="us-west-2")
    assert west_ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == copy
    assert result.copy_parameters == {"us-west-2": [PARAMETER]}
    west_launch = west.describe_image_attribute(ImageId=copy, Attribute="launchPermission")
    assert [p.get("UserId") for p in west_launch["LaunchPermissions"]] == [PARTNER]
    regions = result.to_json()["regions"]
    assert {r: v["status"] for r, v in regions.items()} == {
        REGION: "published",
        "us-west-2": "published",
    }
    (copy_request,) = world.fake.operations("CopyImage")
    assert copy_request["SourceRegion"] == REGION
    for spec in copy_request["TagSpecifications"]:
        copied = tags.tag_map(spec["Tags"])
        assert copied[tags.IMAGE] == IMAGE
        assert copied[tags.SOURCE_AMI] == world.ami_id
        assert copied[tags.STATUS] == "built"  # until it is shared and published
    # the validation instances are gone, their placement group too
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()
    assert world.fake.deleted_groups == ["nodeforge-run-1-p5.48xlarge"]
    assert world.fake.deprecated == {}


def test_launch_request_of_the_run(world: World, shipped: Catalog) -> None:
    _promote(world, shipped, FakeValidator(True, world), key_name="ops", ttl_minutes=90)
    (request,) = world.fake.operations("RunInstances")
    assert request["ImageId"] == world.ami_id
    assert request["InstanceType"] == "p5.48xlarge"
    # ENA primary, then the 32 EFA-only interfaces EC2 describes for p5
    interfaces = request["NetworkInterfaces"]
    assert len(interfaces) == 33
    assert "InterfaceType" not in interfaces[0]
    assert {i["InterfaceType"] for i in interfaces[1:]} == {"efa-only"}
    assert request["Placement"] == {"GroupName": "nodeforge-run-1-p5.48xlarge"}
    instance_tags = tags.tag_map(request["TagSpecifications"][0]["Tags"])
    assert instance_tags[tags.RUN_ID] == "run-1"
    assert instance_tags[tags.TTL] == "2026-12-02T13:30:00Z"  # the fake clock's noon + 90 min
    assert instance_tags[tags.IMAGE] == IMAGE
    # the instance ends itself at its TTL even if promote's machine died
    assert request["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert "shutdown -h +90 " in base64.b64decode(request["UserData"]).decode()  # botocore's


def test_capacity_reservation_launches_without_a_fresh_placement_group(
    world: World, shipped: Catalog
) -> None:
    capacity = {"p5.48xlarge": {"reservation_id": "cr-0123456789abcdef0", "capacity_block": True}}
    _promote(world, shipped, FakeValidator(True, world), capacity=capacity)
    (request,) = world.fake.operations("RunInstances")
    assert "Placement" not in request
    assert request["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert world.fake.operations("CreatePlacementGroup") == []


def test_multinode_launches_two_and_validates_both(world: World, shipped: Catalog) -> None:
    validate = FakeValidator(True, world)
    result = _promote(world, shipped, validate, multinode=True)
    assert result.status == "published"
    hosts, _, running = validate.calls[0]
    assert (len(hosts), running) == (2, 2)
    assert world.live_instances() == []


def test_failure_tags_failed_deprecates_publishes_nothing(world: World, shipped: Catalog) -> None:
    result = _promote(
        world,
        shipped,
        FakeValidator(False, world),
        share_accounts=[PARTNER],
        copy_regions=["us-west-2"],
    )
    assert result.status == "failed"
    assert result.runs[0].outcome == "failed"
    image_tags = world.image_tags()
    assert image_tags[tags.STATUS] == tags.FAILED
    assert image_tags[tags.FAILED_PROFILE] == "p5.48xlarge"
    assert world.fake.deprecated[world.ami_id].startswith("2026-12-02T12:02:00")
    assert _parameters(world) == []
    assert _launch_permissions(world) == []
    assert world.fake.operations("CopyImage") == []
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()


def test_first_failing_profile_stops_the_run(world: World, shipped: Catalog) -> None:
    validate = FakeValidator(False, world)
    result = _promote(world, shipped, validate, profiles=("p5.48xlarge", "p5en.48xlarge"))
    assert [run.profile for run in result.runs] == ["p5.48xlarge"]
    assert len(validate.calls) == 1


def test_every_profile_passes_one_parameter_each(world: World, shipped: Catalog) -> None:
    result = _promote(
        world, shipped, FakeValidator(True, world), profiles=("p5.48xlarge", "p5en.48xlarge")
    )
    assert result.status == "published"
    assert sorted(_parameters(world)) == [
        PARAMETER,
        f"/nodeforge/{IMAGE}/p5en.48xlarge/ami-id",
    ]


def test_no_capacity_leaves_the_ami_untouched(world: World, shipped: Catalog) -> None:
    world.session.events.register(
        "before-call.ec2.RunInstances",
        lambda **_: failure("InsufficientInstanceCapacity", "no capacity", 500),
    )
    result = _promote(world, shipped, FakeValidator(True, world))
    assert result.status == "infrastructure-failed"
    assert result.runs[0].outcome == "no-capacity"
    assert "another availability zone" in result.runs[0].message
    assert world.image_tags()[tags.STATUS] == "built"
    assert world.fake.deprecated == {}
    assert _parameters(world) == []
    assert world.fake.placement_groups == set()


def test_unreachable_is_infrastructure_and_leaves_the_ami_built(
    world: World, shipped: Catalog
) -> None:
    # moto's instances pass their checks at once: make them never do
    world.session.events.register(
        "before-call.ec2.DescribeInstanceStatus",
        lambda **_: failure("InvalidInstanceID.NotFound", "not yet"),
    )
    validate = FakeValidator(True, world)
    result = _promote(world, shipped, validate, ready_timeout_s=1, poll_interval_s=5)
    assert result.status == "infrastructure-failed"
    assert result.runs[0].outcome == "unreachable"
    assert "not reachable after 1 s" in result.runs[0].message
    assert validate.calls == []
    assert world.image_tags()[tags.STATUS] == "built"
    assert world.fake.deprecated == {}
    assert _parameters(world) == []
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_halfway_leaves_nothing(world: World, shipped: Catalog, signum: int) -> None:
    def interrupted(_nodes: Sequence[Node], _profile: str) -> bool:
        os.kill(os.getpid(), signum)
        pytest.fail("the signal should have interrupted validation")

    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt):
        _promote(world, shipped, interrupted, share_accounts=[PARTNER])
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()
    assert _parameters(world) == []
    assert _launch_permissions(world) == []
    assert world.image_tags()[tags.STATUS] == "built"
    assert signal.getsignal(signum) is before


def test_ami_of_another_image_is_bad_input(world: World, shipped: Catalog) -> None:
    other, _ = world.make_ami("other-20261202", image="p6-ubuntu24.04")
    world.fake.calls.clear()
    with pytest.raises(InputError, match=r"tagged nodeforge:image=p6-ubuntu24.04, not p5"):
        promote(
            world.clients(),
            image=IMAGE,
            ami_id=other,
            profiles=[shipped.profiles["p5.48xlarge"]],
            validate=FakeValidator(True, world),
        )
    with pytest.raises(InputError, match="ami-0123456789abcdef0 does not exist in us-east-1"):
        promote(
            world.clients(),
            image=IMAGE,
            ami_id="ami-0123456789abcdef0",
            profiles=[shipped.profiles["p5.48xlarge"]],
            validate=FakeValidator(True, world),
        )
    assert world.fake.operations("RunInstances") == []


def test_unknown_subnet_names_the_config_field(
    world: World, shipped: Catalog, tmp_path: Any
) -> None:
    config_file = tmp_path / "pipeline.yml"
    with pytest.raises(InputError) as caught:
        promote(
            world.clients(subnet_id="subnet-0123456789abcdef0"),
            image=IMAGE,
            ami_id=world.ami_id,
            profiles=[shipped.profiles["p5.48xlarge"]],
            validate=FakeValidator(True, world),
            config_path=config_file,
        )
    text = str(caught.value)
    assert text.startswith(f"{config_file}: field 'subnet_id': ")
    assert "Fix: use a subnet of the configured region" in text
    assert world.fake.placement_groups == set()


class FailOnce:
    """A before-call handler that fails the first matching call of an operation, as an AWS
    outage halfway through a publish would."""

    def __init__(self, matching: str = "") -> None:
        self.matching = matching
        self.failed = False

    def __call__(self, params: Any = None, **_: Any) -> Any:
        if self.failed or self.matching not in str(params):
            return None
        self.failed = True
        return failure("InternalError", "AWS had a bad moment", 400)


@pytest.mark.parametrize(
    ("event", "matching"),
    [
        ("before-call.ec2.ModifyImageAttribute", ""),
        ("before-call.ec2.CopyImage", ""),
        ("before-call.ec2.CreateTags", tags.VALIDATED),
        ("before-call.ssm.PutParameter", ""),
    ],
    ids=["share", "copy", "tag-validated", "ssm-parameter"],
)
def test_a_rerun_after_a_failed_publish_step_finishes_it(
    world: World, shipped: Catalog, event: str, matching: str
) -> None:
    validate = FakeValidator(True, world)
    settings: dict[str, Any] = {"share_accounts": [PARTNER], "copy_regions": ["us-west-2"]}
    handler = FailOnce(matching)
    world.session.events.register(event, handler)
    with pytest.raises(AwsError, match="InternalError"):
        _promote(world, shipped, validate, **settings)
    assert handler.failed
    # nothing consumers follow points at the AMI, and it is not "validated" unless published
    assert _parameters(world) == []
    if event != "before-call.ssm.PutParameter":
        assert world.image_tags()[tags.STATUS] == "built"
    assert world.image_tags()[tags.PASSED_PROFILES] == "p5.48xlarge"
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()

    result = _promote(world, shipped, validate, launches=False, **settings)
    assert result.status == "published"
    assert [run.outcome for run in result.runs] == ["passed-earlier"]
    assert len(validate.calls) == 1  # validated once, in the first run
    assert world.image_tags()[tags.STATUS] == tags.VALIDATED
    assert _launch_permissions(world) == [PARTNER]
    assert _parameters(world) == [PARAMETER]
    west = world.session.client("ec2", region_name="us-west-2")
    copies = west.describe_images(Owners=["self"])["Images"]
    assert [c["ImageId"] for c in copies] == [result.copies["us-west-2"]]


def test_a_second_promote_of_a_published_ami_copies_nothing_again(
    world: World, shipped: Catalog
) -> None:
    validate = FakeValidator(True, world)
    first = _promote(world, shipped, validate, copy_regions=["us-west-2"])
    again = _promote(world, shipped, validate, launches=False, copy_regions=["us-west-2"])
    assert again.status == first.status == "published"
    assert again.copies == first.copies
    assert len(world.fake.operations("CopyImage")) == 1


def _encrypt(world: World, key: str) -> None:
    world.fake.encrypted[world.snapshot_id] = key


def test_an_ami_encrypted_with_aws_ebs_is_not_shared(world: World, shipped: Catalog) -> None:
    _encrypt(world, "alias/aws/ebs")
    with pytest.raises(InputError) as caught:
        _promote(world, shipped, FakeValidator(True, world), share_accounts=[PARTNER])
    assert caught.value.field == "share_accounts"
    assert "AWS managed key alias/aws/ebs, which cannot be shared" in caught.value.message
    assert "--kms-key-id" in (caught.value.fix or "")
    assert world.fake.operations("RunInstances") == []


def test_a_customer_key_is_granted_to_the_consumer_in_every_region(
    world: World, shipped: Catalog
) -> None:
    kms = world.session.client("kms")
    home_key = kms.create_key()["KeyMetadata"]["Arn"]
    west_kms = world.session.client("kms", region_name="us-west-2")
    west_key = west_kms.create_key()["KeyMetadata"]["Arn"]
    _encrypt(world, home_key)
    settings: dict[str, Any] = {
        "share_accounts": [PARTNER],
        "copy_regions": ["us-west-2"],
        "copy_kms_key_ids": {"us-west-2": west_key},
    }
    result = _promote(world, shipped, FakeValidator(True, world), **settings)
    assert result.status == "published"
    (copy_request,) = world.fake.operations("CopyImage")
    assert (copy_request["Encrypted"], copy_request["KmsKeyId"]) == (True, west_key)
    # each AMI's snapshot keys are read once: the source's by the check before launch, which the
    # publish reuses, and the copy's
    assert len(world.fake.operations("DescribeSnapshots")) == 2
    for client, key in ((kms, home_key), (west_kms, west_key)):
        [grant] = client.list_grants(KeyId=key)["Grants"]
        assert grant["GranteePrincipal"] == f"arn:aws:iam::{PARTNER}:root"
        assert {"Decrypt", "CreateGrant", "ReEncryptFrom"} <= set(grant["Operations"])
    world.ec2.create_tags(Resources=[world.ami_id], Tags=tags.tag_list({tags.STATUS: "built"}))
    _promote(world, shipped, FakeValidator(True, world), launches=False, **settings)
    assert len(kms.list_grants(KeyId=home_key)["Grants"]) == 1  # found, not granted again


def test_an_encrypted_ami_needs_a_shareable_key_for_each_copy(
    world: World, shipped: Catalog
) -> None:
    _encrypt(world, world.session.client("kms").create_key()["KeyMetadata"]["Arn"])
    with pytest.raises(InputError) as caught:
        _promote(
            world,
            shipped,
            FakeValidator(True, world),
            share_accounts=[PARTNER],
            copy_regions=["us-west-2"],
        )
    assert caught.value.field == "copy_kms_key_ids.us-west-2"
    assert "would be encrypted with the AWS managed key alias/aws/ebs" in caught.value.message
    assert world.fake.operations("RunInstances") == []


def test_ssh_validation_trusts_no_stale_host_key(
    shipped: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def run_validation(**kwargs: Any) -> Any:
        seen.update(kwargs)
        report_dir = kwargs["report_dir"]
        return ValidationRun(
            ok=True,
            returncode=0,
            report={"ok": True, "checks": []},
            junit=report_dir / "validation-target.xml",
            json_report=report_dir / "validation-target.json",
            log=report_dir / "validation-target.log",
        )

    monkeypatch.setattr("nodeforge.aws.pipeline.run_validation", run_validation)
    monkeypatch.setattr("nodeforge.aws.pipeline.wait_for_ssh", lambda *_a, **_k: None)
    validate = ssh_validator(shipped, IMAGE, report_root=tmp_path, ssh_user=None)
    assert validate([Node("i-1", "10.0.0.5"), Node("i-2", "10.0.0.6")], "p5.48xlarge")
    assert seen["hosts"] == "ssh://ubuntu@10.0.0.5,ssh://ubuntu@10.0.0.6"
    assert seen["stage"] == "target"
    # a reused private address must not stop the run at a host-key prompt or mismatch
    assert "StrictHostKeyChecking=no" in seen["ssh_extra_args"]
    assert "UserKnownHostsFile=/dev/null" in seen["ssh_extra_args"]
    assert (tmp_path / "p5.48xlarge" / "vars.json").is_file()


def test_ssh_lost_during_the_suite_is_infrastructure_not_a_verdict(
    shipped: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the real suite over real ssh to a port where nothing listens: every check fails because
    # ssh exits 255, which judges nothing about the image
    monkeypatch.setattr("nodeforge.aws.pipeline.wait_for_ssh", lambda *_a, **_k: None)
    validate = ssh_validator(shipped, IMAGE, report_root=tmp_path, ssh_user=None)
    with pytest.raises(InstanceUnreachableError, match=r"SSH lost 127\.0\.0\.1 during") as lost:
        validate([Node("i-1", "127.0.0.1:1")], "p5.48xlarge")
    assert "ssh: connect to host 127.0.0.1 port 1: Connection refused" in str(lost.value)
    report = json.loads((tmp_path / "p5.48xlarge" / "validation-target.json").read_text())
    failed = [c for c in report["checks"] if c["outcome"] == "failed"]
    assert failed and all(c["unreachable"] for c in failed)


def test_a_validator_that_cannot_reach_the_instances_is_infrastructure(
    world: World, shipped: Catalog
) -> None:
    def unreachable(_nodes: Sequence[Node], _profile: str) -> bool:
        raise InstanceUnreachableError("ubuntu@10.0.0.5 does not answer SSH after 600 s")

    result = _promote(world, shipped, unreachable)
    assert result.status == "infrastructure-failed"
    assert result.runs[0].outcome == "unreachable"
    assert world.image_tags()[tags.STATUS] == "built"
    assert world.fake.deprecated == {}
    assert world.live_instances() == []


def test_a_published_ami_and_its_copies_are_deprecated_after_their_life(
    world: World, shipped: Catalog
) -> None:
    result = _promote(
        world,
        shipped,
        FakeValidator(True, world),
        copy_regions=["us-west-2"],
        deprecate_after_days=90,
    )
    assert result.status == "published"
    # the fake clock's noon, 2026-12-02, plus 90 days
    expected = "2027-03-02T12:00:00"
    assert world.fake.deprecated[world.ami_id].startswith(expected)
    assert world.fake.deprecated[result.copies["us-west-2"]].startswith(expected)


def test_without_a_life_a_published_ami_is_not_deprecated(world: World, shipped: Catalog) -> None:
    _promote(world, shipped, FakeValidator(True, world))
    assert world.fake.deprecated == {}


def test_a_published_ami_and_its_copies_are_protected_from_deregistration(
    world: World, shipped: Catalog
) -> None:
    result = _promote(
        world,
        shipped,
        FakeValidator(True, world),
        copy_regions=["us-west-2"],
        deregistration_protection="enabled-with-cooldown",
    )
    assert result.status == "published"
    copy = result.copies["us-west-2"]
    assert world.fake.protection == {
        world.ami_id: "enabled-with-cooldown",
        copy: "enabled-with-cooldown",
    }
    # protected before the SSM parameters that point consumers at it
    order = [op for _, op, _ in world.fake.calls]
    assert order.index("EnableImageDeregistrationProtection") < order.index("PutParameter")
    # a re-run (as after a failed later step) validates nothing again and asks again
    again = _promote(
        world,
        shipped,
        FakeValidator(True, world),
        launches=False,
        copy_regions=["us-west-2"],
        deregistration_protection="enabled",
    )
    assert again.status == "published"
    assert len(world.fake.operations("EnableImageDeregistrationProtection")) == 4


def test_without_protection_nothing_is_protected(world: World, shipped: Catalog) -> None:
    _promote(world, shipped, FakeValidator(True, world))
    assert world.fake.protection == {}
    assert world.fake.operations("EnableImageDeregistrationProtection") == []


def test_a_failed_ami_is_not_protected(world: World, shipped: Catalog) -> None:
    _promote(world, shipped, FakeValidator(False, world), deregistration_protection="enabled")
    assert world.fake.protection == {}


ORG = "arn:aws:organizations::123456789012:organization/o-a1b2c3d4e5"
OU = "arn:aws:organizations::123456789012:ou/o-a1b2c3d4e5/ou-ab12-cd34ef56"


def test_shared_with_an_organization_and_an_ou(world: World, shipped: Catalog) -> None:
    result = _promote(
        world,
        shipped,
        FakeValidator(True, world),
        share_accounts=[PARTNER],
        share_organization_arns=[ORG],
        share_ou_arns=[OU],
    )
    assert result.shared_with == [PARTNER, ORG, OU]
    (request,) = world.fake.operations("ModifyImageAttribute")
    assert request["LaunchPermission"]["Add"] == [
        {"UserId": PARTNER},
        {"OrganizationArn": ORG},
        {"OrganizationalUnitArn": OU},
    ]


def test_a_failed_copy_leaves_nothing_validated_or_published(
    world: World, shipped: Catalog
) -> None:
    def copy_failed(parsed: dict[str, Any], **_: Any) -> None:
        for image in parsed.get("Images", []):
            if tags.SOURCE_AMI in tags.tag_map(image.get("Tags", [])):
                image["State"] = "failed"
                image["StateReason"] = {"Message": "snapshot copy failed"}

    world.session.events.register("after-call.ec2.DescribeImages", copy_failed)
    with pytest.raises(AwsError, match="is failed: snapshot copy failed"):
        _promote(world, shipped, FakeValidator(True, world), copy_regions=["us-west-2"])
    assert world.image_tags()[tags.STATUS] == "built"
    west = world.session.client("ec2", region_name="us-west-2")
    [copy] = west.describe_images(Owners=["self"])["Images"]
    assert tags.tag_map(copy.get("Tags", []))[tags.STATUS] == "built"
    assert _parameters(world) == []
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()


def test_a_rerun_replaces_a_failed_copy(world: World, shipped: Catalog) -> None:
    def copy_failed(parsed: dict[str, Any], **_: Any) -> None:
        for image in parsed.get("Images", []):
            if tags.SOURCE_AMI in tags.tag_map(image.get("Tags", [])):
                image["State"] = "failed"

    world.session.events.register("after-call.ec2.DescribeImages", copy_failed)
    validate = FakeValidator(True, world)
    with pytest.raises(AwsError, match="is failed"):
        _promote(world, shipped, validate, copy_regions=["us-west-2"])
    west = world.session.client("ec2", region_name="us-west-2")
    [first] = [i["ImageId"] for i in west.describe_images(Owners=["self"])["Images"]]
    world.session.events.unregister("after-call.ec2.DescribeImages", copy_failed)

    def failed_until_seen(parsed: dict[str, Any], **_: Any) -> None:
        for image in parsed.get("Images", []):
            if image.get("ImageId") == first:
                image["State"] = "failed"

    # the next run finds the failed copy, deregisters it and copies again
    world.session.events.register("after-call.ec2.DescribeImages", failed_until_seen)
    result = _promote(world, shipped, validate, launches=False, copy_regions=["us-west-2"])
    assert result.status == "published"
    assert result.copies["us-west-2"] != first
    assert [i["ImageId"] for i in west.describe_images(Owners=["self"])["Images"]] == [
        result.copies["us-west-2"]
    ]


def test_a_profile_launches_in_its_own_subnet(world: World, shipped: Catalog) -> None:
    vpc = world.ec2.describe_subnets(SubnetIds=[world.subnet_id])["Subnets"][0]["VpcId"]
    other = world.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.16.0/20")["Subnet"]["SubnetId"]
    _promote(
        world,
        shipped,
        FakeValidator(True, world),
        ("p5.48xlarge", "p5en.48xlarge"),
        profile_subnets={"p5en.48xlarge": other},
    )
    first, second = world.fake.operations("RunInstances")
    assert {i["SubnetId"] for i in first["NetworkInterfaces"]} == {world.subnet_id}
    assert {i["SubnetId"] for i in second["NetworkInterfaces"]} == {other}
