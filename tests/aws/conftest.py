"""A fake AWS account (moto) with what nodeforge's AWS steps need: a VPC, a subnet, a security
group, and an AMI of the image as Packer leaves it (tagged nodeforge:image, status built).

moto does not implement placement groups, capacity reservations, image deprecation,
deregistration protection, image references or image usage reports, ignores DeregisterImage's
DeleteAssociatedSnapshots, CopyImage's TagSpecifications and instances' placement groups, models no
snapshot encryption and calls every KMS key customer managed: `FakeEc2` answers or completes those
calls through botocore `before-call`/`after-call` hooks on the session (the image calls through
tests/moto_images.py, shared with the end-to-end test's moto server), and records every call the
code makes (operation and parameters), which the IAM policy test reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.model import OperationModel
from moto import mock_aws
from moto.core.botocore_stubber import MockRawResponse
from mypy_boto3_ec2 import EC2Client

from nodeforge.aws import tags
from nodeforge.aws.clients import AwsClients, clients_for
from nodeforge.aws.config import PipelineConfig
from nodeforge.aws.launch import Clock
from tests.moto_images import deregister_with_snapshots, image_references

REGION = "us-east-1"
BASE_AMI = "ami-0b0b0b0b0b0b0b0b0"  # the builder's source AMI: moto does not check it exists
IMAGE = "p5-ubuntu24.04"
ACCOUNT = "123456789012"  # moto's default


@dataclass
class FakeEc2:
    """Calls the code made, and the state of the calls moto cannot answer."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    placement_groups: set[str] = field(default_factory=set)
    deleted_groups: list[str] = field(default_factory=list)
    group_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)
    """Instance id -> its placement group, which moto drops from its answers."""
    capacity_reservations: list[dict[str, Any]] = field(default_factory=list)
    """What DescribeCapacityReservations answers (moto implements no capacity reservations)."""
    deprecated: dict[str, str] = field(default_factory=dict)
    encrypted: dict[str, str] = field(default_factory=dict)
    """Snapshot id -> its KMS key: moto models no encryption of AMIs' snapshots."""
    aws_managed_keys: set[str] = field(default_factory=lambda: {"alias/aws/ebs"})
    """Keys DescribeKey reports as AWS managed: moto calls every key, aws/ebs too, CUSTOMER."""
    protection: dict[str, str] = field(default_factory=dict)
    """AMI id -> DescribeImages' DeregistrationProtection, where not "disabled"."""
    usage_reports: list[dict[str, Any]] = field(default_factory=list)
    """What DescribeImageUsageReports answers; CreateImageUsageReport adds a pending one."""
    usage_entries: list[dict[str, Any]] = field(default_factory=list)
    """What DescribeImageUsageReportEntries answers, by ReportId."""

    def operations(self, name: str) -> list[dict[str, Any]]:
        return [params for _, op, params in self.calls if op == name]

    def record(self, model: OperationModel, params: dict[str, Any], **_: Any) -> None:
        self.calls.append((model.service_model.signing_name, model.name, dict(params)))

    def answer(self, model: OperationModel, params: dict[str, Any], **_: Any) -> Any:
        body = params["body"]
        if model.name == "CreatePlacementGroup":
            self.placement_groups.add(body["GroupName"])
            [request] = self.operations("CreatePlacementGroup")[-1:]
            self.group_tags[body["GroupName"]] = {
                tag["Key"]: tag["Value"]
                for spec in request.get("TagSpecifications", [])
                for tag in spec["Tags"]
            }
            return ok({"PlacementGroup": {"GroupName": body["GroupName"]}})
        if model.name == "DescribeCapacityReservations":
            [request] = self.operations("DescribeCapacityReservations")[-1:]
            fields = {"instance-type": "InstanceType", "availability-zone": "AvailabilityZone"}
            fields |= {"state": "State"}
            wanted = {fields[f["Name"]]: f["Values"] for f in request.get("Filters", [])}
            return ok(
                {
                    "CapacityReservations": [
                        r
                        for r in self.capacity_reservations
                        if all(r.get(k) in v for k, v in wanted.items())
                    ]
                }
            )
        if model.name == "DescribePlacementGroups":
            [request] = self.operations("DescribePlacementGroups")[-1:]
            wanted = {
                f["Name"].removeprefix("tag:"): f["Values"] for f in request.get("Filters", [])
            }
            return ok(
                {
                    "PlacementGroups": [
                        {"GroupName": name, "Tags": tags.tag_list(self.group_tags.get(name, {}))}
                        for name in sorted(self.placement_groups)
                        if all(self.group_tags.get(name, {}).get(k) in v for k, v in wanted.items())
                    ]
                }
            )
        if model.name == "EnableImageDeregistrationProtection":
            cooldown = body.get("WithCooldown") == "true"
            self.protection[body["ImageId"]] = "enabled-with-cooldown" if cooldown else "enabled"
            return ok({"Return": "true"})
        if model.name == "DisableImageDeregistrationProtection":
            if self.protection.pop(body["ImageId"], None) == "enabled-with-cooldown":
                self.protection[body["ImageId"]] = "disabled-until 2026-12-03T12:00:00.000Z"
            return ok({"Return": "true"})
        if model.name == "DeregisterImage":
            if body["ImageId"] in self.protection:
                # the code is this stand-in's: EC2 documents none for this refusal
                return failure("OperationNotPermitted", "the AMI has deregistration protection")
            if body.get("DeleteAssociatedSnapshots") != "true":
                return None  # moto deregisters it
            region = params["context"]["client_region"]
            results = deregister_with_snapshots(ACCOUNT, region, body["ImageId"])
            return ok({"Return": True, "DeleteSnapshotResults": results})
        if model.name == "CreateImageUsageReport":
            report_id = f"amiur-{len(self.usage_reports) + 1:017x}"
            self.usage_reports.append(
                {
                    "ReportId": report_id,
                    "ImageId": body["ImageId"],
                    "State": "pending",
                    "CreationTime": datetime.now(UTC),
                }
            )
            return ok({"ReportId": report_id})
        if model.name == "DescribeImageUsageReports":
            [request] = self.operations("DescribeImageUsageReports")[-1:]
            images = set(request.get("ImageIds", []))
            return ok(
                {"ImageUsageReports": [r for r in self.usage_reports if r["ImageId"] in images]}
            )
        if model.name == "DescribeImageUsageReportEntries":
            [request] = self.operations("DescribeImageUsageReportEntries")[-1:]
            reports = set(request.get("ReportIds", []))
            found = [e for e in self.usage_entries if e["ReportId"] in reports]
            return ok({"ImageUsageReportEntries": found})
        if model.name == "DescribeImageReferences":
            [request] = self.operations("DescribeImageReferences")[-1:]
            region = params["context"]["client_region"]
            found = image_references(
                ACCOUNT, region, request["ImageIds"], request.get("ResourceTypes", [])
            )
            return ok({"ImageReferences": found})
        if model.name == "DeletePlacementGroup":
            self.placement_groups.discard(body["GroupName"])
            self.deleted_groups.append(body["GroupName"])
            return ok({})
        self.deprecated[body["ImageId"]] = body["DeprecateAt"]
        return ok({"Return": True})

    def tag_copy(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        """CopyImage's TagSpecifications, which EC2 applies and moto ignores, put on the copy
        (the image ones; moto has no snapshots of copies)."""
        if "ImageId" not in parsed:
            return
        [request] = self.operations("CopyImage")[-1:]
        specs = [s for s in request.get("TagSpecifications", []) if s["ResourceType"] == "image"]
        region = context["client_region"]
        ec2 = boto3.client("ec2", region_name=region)
        for spec in specs:
            ec2.create_tags(Resources=[parsed["ImageId"]], Tags=spec["Tags"])
        if request.get("Encrypted"):
            [copy] = ec2.describe_images(ImageIds=[parsed["ImageId"]])["Images"]
            for mapping in copy.get("BlockDeviceMappings", []):
                key = request.get("KmsKeyId") or "alias/aws/ebs"
                self.encrypted[mapping["Ebs"]["SnapshotId"]] = key

    def place(self, parsed: dict[str, Any], **_: Any) -> None:
        """RunInstances' Placement.GroupName, kept for DescribeInstances (moto drops it)."""
        [request] = self.operations("RunInstances")[-1:]
        group = request.get("Placement", {}).get("GroupName")
        for instance in parsed.get("Instances", []) if group else []:
            self.placed[instance["InstanceId"]] = group

    def placement(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if group := self.placed.get(instance.get("InstanceId", "")):
                    instance.setdefault("Placement", {})["GroupName"] = group

    def protected(self, parsed: dict[str, Any], **_: Any) -> None:
        """DescribeImages as EC2 answers: DeregistrationProtection, and DeprecationTime where
        the AMI was deprecated."""
        for image in parsed.get("Images", []):
            image["DeregistrationProtection"] = self.protection.get(image["ImageId"], "disabled")
            if deprecated := self.deprecated.get(image["ImageId"]):
                image["DeprecationTime"] = deprecated

    def encryption(self, parsed: dict[str, Any], **_: Any) -> None:
        """DescribeSnapshots as EC2 answers for encrypted snapshots: Encrypted and KmsKeyId."""
        for snapshot in parsed.get("Snapshots", []):
            if key := self.encrypted.get(snapshot.get("SnapshotId", "")):
                snapshot.update(Encrypted=True, KmsKeyId=key)

    def describe_key(self, params: dict[str, Any], **_: Any) -> Any:
        key = json.loads(params["body"])["KeyId"]
        if key not in self.aws_managed_keys:
            return None
        return ok({"KeyMetadata": {"KeyId": key, "KeyManager": "AWS", "Enabled": True}})


def ok(parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    return AWSResponse("https://ec2.fake", 200, HTTPHeaders(), None), parsed


def failure(code: str, message: str, status: int = 400) -> Any:
    """A before-call answer that botocore turns into ClientError(code).

    Typed Any: botocore's stubs type event handlers as returning None, though a before-call
    handler may answer the call with (response, parsed)."""
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": 0},
    }
    return AWSResponse("https://ec2.fake", status, HTTPHeaders(), None), parsed


def raw_failure(url: str, code: str, status: int) -> AWSResponse:
    """A before-send answer: an EC2 error on the wire, which botocore's retry logic sees."""
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>slow down</Message></Error>"
        "</Errors><RequestID>r-1</RequestID></Response>"
    ).encode()
    return AWSResponse(url, status, HTTPHeaders(), MockRawResponse(body))


@dataclass
class FakeClock:
    """Time that moves only when the code sleeps."""

    t: float = 0.0
    slept: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(seconds, 1.0)

    def clock(self) -> Clock:
        return Clock(
            sleep=self.sleep,
            monotonic=lambda: self.t,
            now=lambda: datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        )


@dataclass
class World:
    session: boto3.Session
    fake: FakeEc2
    ec2: EC2Client
    subnet_id: str
    security_group_id: str
    ami_id: str
    snapshot_id: str

    def config(self, **changes: Any) -> PipelineConfig:
        settings: dict[str, Any] = {
            "region": REGION,
            "subnet_id": self.subnet_id,
            "security_group_ids": [self.security_group_id],
            "poll_interval_s": 0,
            "ready_timeout_s": 60,
            "terminate_timeout_s": 60,
            "api_max_attempts": 3,
        }
        return PipelineConfig.model_validate(settings | changes)

    def clients(self, **changes: Any) -> AwsClients:
        return clients_for(self.session, self.config(**changes))

    def image_tags(self, ami_id: str | None = None, region: str = REGION) -> dict[str, str]:
        ec2 = self.session.client("ec2", region_name=region)
        image = ec2.describe_images(ImageIds=[ami_id or self.ami_id])["Images"][0]
        return tags.tag_map(image.get("Tags", []))

    def live_instances(self) -> list[str]:
        reservations = self.ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]
        return [i["InstanceId"] for r in reservations for i in r["Instances"]]

    def make_ami(self, name: str, status: str = "built", image: str = IMAGE) -> tuple[str, str]:
        """An AMI with one snapshot, tagged as Packer and promote leave it; (ami, snapshot)."""
        builder = self.ec2.run_instances(
            ImageId=BASE_AMI, InstanceType="t3.micro", MinCount=1, MaxCount=1
        )["Instances"][0]["InstanceId"]
        ami = self.ec2.create_image(
            InstanceId=builder,
            Name=name,
            TagSpecifications=[
                {
                    "ResourceType": "image",
                    "Tags": tags.tag_list({tags.IMAGE: image, tags.STATUS: status}),
                }
            ],
        )["ImageId"]
        self.ec2.terminate_instances(InstanceIds=[builder])
        described = self.ec2.describe_images(ImageIds=[ami])["Images"][0]
        return ami, described["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]


@pytest.fixture(autouse=True)
def _fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # moto's thousands of stock AMIs take seconds to load per region, and no test needs them
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


_LOADER = botocore.loaders.create_loader()
"""Parsing EC2's service model takes most of a second: once per test run, not per client."""


def fake_session(fake: FakeEc2) -> boto3.Session:
    core = botocore.session.get_session()
    core.register_component("data_loader", _LOADER)
    session = boto3.Session(botocore_session=core, region_name=REGION)
    # the API parameters as the code passed them, before EC2's query serialisation
    session.events.register_first("before-parameter-build", fake.record)
    for operation in (
        "CreatePlacementGroup",
        "DeletePlacementGroup",
        "DescribePlacementGroups",
        "DescribeCapacityReservations",
        "EnableImageDeprecation",
        "EnableImageDeregistrationProtection",
        "DisableImageDeregistrationProtection",
        "DeregisterImage",
        "DescribeImageReferences",
        "CreateImageUsageReport",
        "DescribeImageUsageReports",
        "DescribeImageUsageReportEntries",
    ):
        session.events.register(f"before-call.ec2.{operation}", fake.answer)
    session.events.register("after-call.ec2.CopyImage", fake.tag_copy)
    session.events.register("after-call.ec2.DescribeSnapshots", fake.encryption)
    session.events.register("after-call.ec2.DescribeImages", fake.protected)
    session.events.register("after-call.ec2.RunInstances", fake.place)
    session.events.register("after-call.ec2.DescribeInstances", fake.placement)
    session.events.register("before-call.kms.DescribeKey", fake.describe_key)
    return session


@pytest.fixture
def world() -> Iterator[World]:
    with mock_aws():
        fake = FakeEc2()
        session = fake_session(fake)
        ec2 = session.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName="nodeforge", Description="ssh", VpcId=vpc)
        w = World(session, fake, ec2, subnet, group["GroupId"], "", "")
        w.ami_id, w.snapshot_id = w.make_ami("p5-ubuntu24.04-20261202")
        fake.calls.clear()
        yield w


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()
