"""docs/iam-policy.json allows exactly the EC2, SSM and KMS calls the aws package makes, and the
KMS actions EC2 takes on its behalf for encrypted AMIs (IMPLIED).

Two views of "the calls the package makes": a scan of its source (every `ec2.x(...)`,
`ssm.x(...)`, paginator and waiter), and a record of the calls made while a publish, a failure
and a prune run against moto. The record must be part of the scan (the scan misses nothing the
tests exercise), and the scan must equal what the policy grants.
"""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.session
import pytest

from nodeforge.aws import tags
from nodeforge.aws.pipeline import promote
from nodeforge.aws.prune import Policy, prune
from nodeforge.aws.reap import reap
from nodeforge.catalog.loader import Catalog
from tests.aws.conftest import IMAGE, World
from tests.conftest import REPO

PACKAGE = REPO / "src" / "nodeforge" / "aws"
POLICY = REPO / "docs" / "iam-policy.json"
# how the package names its clients: `ec2`, `ssm`, `kms`, `s3`, or `clients.ec2_in(region)` and
# the like
_RECEIVERS = {
    "ec2": "ec2",
    "ssm": "ssm",
    "kms": "kms",
    "s3": "s3",
    "autoscaling": "autoscaling",
    "eks": "eks",
    "autoscaling_in": "autoscaling",
    "eks_in": "eks",
    "ec2_in": "ec2",
    "ssm_in": "ssm",
    "kms_in": "kms",
}
IMPLIED = {
    "kms:Decrypt",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
}
"""What EC2 does with the caller's permissions on a customer managed key when the code calls
CopyImage with KmsKeyId or RunInstances from an encrypted AMI (EBS encryption's required KMS
permissions: CreateGrant, Decrypt, DescribeKey, GenerateDataKeyWithoutPlaintext, ReEncrypt*),
granted only through EC2 (kms:ViaService)."""
SCANNED_BY_IMAGE_REFERENCES = {
    "ec2:DescribeInstances",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
    "ssm:DescribeParameters",
    "ssm:GetParameters",
    "imagebuilder:ListImageRecipes",
    "imagebuilder:ListContainerRecipes",
    "imagebuilder:GetContainerRecipe",
}
"""What DescribeImageReferences reads with the caller's permissions (EC2 User Guide, "Identify
your resources referencing specified AMIs", required IAM permissions), granted only through it
(aws:CalledVia ec2-images.amazonaws.com) where the code does not call them itself."""
DELETED_WITH_THE_AMI = {"ec2:DeleteSnapshot"}
"""DeregisterImage with DeleteAssociatedSnapshots deletes the snapshots as the caller."""
PASSED_WITH_THE_INSTANCE_PROFILE = {"iam:PassRole"}
"""RunInstances with IamInstanceProfile (config iam_instance_profile) passes its role to EC2."""


def _receiver(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return _RECEIVERS.get(node.id)
    if isinstance(node, ast.Attribute):
        return _RECEIVERS.get(node.attr)
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return None


def scanned_actions() -> set[str]:
    session = botocore.session.get_session()
    clients = {
        name: session.create_client(name, region_name="us-east-1")
        for name in ("ec2", "ssm", "kms", "s3", "autoscaling", "eks")
    }
    actions: set[str] = set()
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            service = _receiver(node.func.value)
            if service is None or node.func.attr.endswith("_in"):
                continue
            client = clients[service]
            method = node.func.attr
            if method == "generate_presigned_url":
                # signs a request that someone else sends: its operation is called directly too
                continue
            if method in ("get_paginator", "get_waiter"):
                argument = node.args[0]
                assert isinstance(argument, ast.Constant), f"{path}: name it literally"
                if method == "get_waiter":
                    # botocore's stubs type a waiter's config as a dict; it is a SingleWaiterConfig
                    config: Any = client.get_waiter(str(argument.value)).config
                    actions.add(f"{service}:{config.operation}")
                    continue
                method = str(argument.value)
            operation = client.meta.method_to_api_mapping.get(method)
            assert operation, f"{path}:{node.lineno}: {service} has no method {method}"
            actions.add(f"{service}:{operation}")
    return actions


def _statements() -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = json.loads(POLICY.read_text(encoding="utf-8"))["Statement"]
    return statements


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def granted_actions() -> set[str]:
    return {a for s in _statements() for a in _listed(s["Action"])}


def test_policy_statements_are_named_allows() -> None:
    statements = _statements()
    sids = [s.get("Sid") for s in statements]
    assert all(sids)
    assert len(set(sids)) == len(sids)
    assert {s["Effect"] for s in statements} == {"Allow"}
    assert not any("*" in a for a in granted_actions()), "name actions, no wildcards"


def test_policy_grants_exactly_what_the_code_calls() -> None:
    called = scanned_actions() | IMPLIED | SCANNED_BY_IMAGE_REFERENCES | DELETED_WITH_THE_AMI
    called |= PASSED_WITH_THE_INSTANCE_PROFILE
    granted = granted_actions()
    assert called - granted == set(), "called but not allowed"
    assert granted - called == set(), "allowed but never called"


def test_what_image_references_scans_is_granted_only_through_it() -> None:
    called = scanned_actions()
    for statement in _statements():
        through_ec2 = set(_listed(statement["Action"])) & SCANNED_BY_IMAGE_REFERENCES - called
        if through_ec2:
            assert statement["Condition"] == {
                "ForAnyValue:StringEquals": {"aws:CalledVia": ["ec2-images.amazonaws.com"]}
            }, statement["Sid"]
            assert set(_listed(statement["Action"])) <= SCANNED_BY_IMAGE_REFERENCES


def test_destructive_calls_are_conditioned_on_nodeforge_tags() -> None:
    for statement in _statements():
        actions = set(_listed(statement["Action"]))
        if actions & {"ec2:TerminateInstances", "ec2:DeregisterImage", "ec2:DeleteSnapshot"}:
            condition = json.dumps(statement.get("Condition", {}))
            assert "aws:ResourceTag/nodeforge:" in condition, statement["Sid"]
    terminate = next(s for s in _statements() if s["Action"] == "ec2:TerminateInstances")
    assert terminate["Condition"] == {"Null": {f"aws:ResourceTag/{tags.RUN_ID}": "false"}}


def test_calls_made_against_moto_are_all_scanned_and_granted(
    world: World, shipped: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda _s: None)
    profiles = [shipped.profiles["p5.48xlarge"]]
    settings = {"share_accounts": ["111122223333"], "copy_regions": ["us-west-2"]}
    promote(
        world.clients(**settings),
        image="p5-ubuntu24.04",
        ami_id=world.ami_id,
        profiles=profiles,
        validate=lambda _h, _p: True,
    )
    failed, _ = world.make_ami("p5-ubuntu24.04-failed")
    promote(
        world.clients(),
        image="p5-ubuntu24.04",
        ami_id=failed,
        profiles=profiles,
        validate=lambda _h, _p: False,
    )
    world.session.client("ssm").put_parameter(Name="/team/ami", Value=failed, Type="String")
    world.ec2.create_launch_template(
        LaunchTemplateName="team", LaunchTemplateData={"ImageId": "resolve:ssm:/team/ami"}
    )
    world.make_ami("p5-ubuntu24.04-old", status="failed")
    before = len(world.fake.calls)
    prune(
        world.clients(**settings),
        image="p5-ubuntu24.04",
        policy=Policy(keep=1, unjudged_after=timedelta(days=7), deprecated_for=timedelta(0)),
        now=datetime.now(UTC),
        dry_run=False,
    )
    world.ec2.run_instances(
        ImageId=failed,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": tags.tag_list(
                    {tags.RUN_ID: "run-9", tags.TTL: "2026-12-01T00:00:00Z", tags.IMAGE: IMAGE}
                ),
            }
        ],
    )
    reap(world.clients(), image=IMAGE, now=datetime(2026, 12, 2, tzinfo=UTC), dry_run=False)
    recorded = {f"{service}:{operation}" for service, operation, _ in world.fake.calls}
    housekeeping = {f"{s}:{o}" for s, o, _ in world.fake.calls[before:]}
    assert {"ec2:DeregisterImage", "ec2:DescribeImageReferences"} <= housekeeping
    assert {"ec2:DescribePlacementGroups", "ec2:TerminateInstances"} <= housekeeping
    # the test's own setup calls are not the package's
    recorded -= {"ec2:CreateImage", "ec2:CreateLaunchTemplate"}
    scanned = scanned_actions()
    assert recorded - scanned == set()
    assert recorded - granted_actions() == set()
