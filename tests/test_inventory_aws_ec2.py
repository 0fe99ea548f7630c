"""inventory/aws_ec2.yml through the real amazon.aws.aws_ec2 plugin and `ansible-inventory`,
against moto_server: running instances tagged by their launch templates are grouped by image,
profile and instance type; untagged and stopped ones are left out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from mypy_boto3_ec2 import EC2Client
from mypy_boto3_ec2.type_defs import TagSpecificationTypeDef, TagTypeDef

from tests.conftest import REPO
from tests.moto_server import moto_endpoint


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with moto_endpoint(monkeypatch) as endpoint:
        yield endpoint


def _launch(ec2: EC2Client, tags: dict[str, str]) -> str:
    """A p5.48xlarge with these tags; its private address."""
    pairs: list[TagTypeDef] = [{"Key": key, "Value": value} for key, value in tags.items()]
    specs: list[TagSpecificationTypeDef] = [{"ResourceType": "instance", "Tags": pairs}]
    started = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="p5.48xlarge",
        TagSpecifications=specs if tags else [],
    )
    return str(started["Instances"][0]["PrivateIpAddress"])


def test_running_nodes_are_grouped_by_image_profile_and_type(aws: str) -> None:
    ec2 = boto3.client("ec2", endpoint_url=aws)
    image = {"nodeforge:image": "hopper-ubuntu2404", "nodeforge:profile": "p5.48xlarge"}
    first = _launch(ec2, image)
    second = _launch(ec2, image)
    _launch(ec2, {})  # not a node nodeforge built
    stopped = ec2.describe_instances(Filters=[{"Name": "private-ip-address", "Values": [second]}])[
        "Reservations"
    ][0]["Instances"][0]["InstanceId"]
    ec2.stop_instances(InstanceIds=[stopped])
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i",
         str(REPO / "inventory" / "aws_ec2.yml"), "--list"],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, check=True,
    )  # fmt: skip
    inventory = json.loads(listed.stdout)
    # hosts by private address (what a node on the cluster's network is reached at)
    for group in ("image_hopper_ubuntu2404", "profile_p5_48xlarge", "type_p5_48xlarge"):
        assert inventory[group]["hosts"] == [first], group
