"""Encrypted AMIs shared with other accounts: which KMS keys an AMI's snapshots use, whether a
key can be shared at all, and the grants that let a consumer account launch from it.

An AMI encrypted with the AWS managed key `aws/ebs` cannot be shared: no other account can be
given that key. With a customer managed key, the consumer account needs the key as well as the
launch permission; nodeforge gives it through KMS grants (one per account, named so that a
re-run finds it), which the key's policy must allow the caller to create (docs/aws-pipeline.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import ImageTypeDef
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_kms.literals import GrantOperationType

DEFAULT_EBS_KEY = "alias/aws/ebs"
"""The key EC2 encrypts with when a request names none (unless the account set another default)."""

# What a consumer account does with the key to launch from the AMI or copy it (EC2 user guide,
# "Share an AMI with specific AWS accounts": kms:CreateGrant, Decrypt, DescribeKey,
# GenerateDataKeyWithoutPlaintext, ReEncrypt*).
GRANT_OPERATIONS: tuple[GrantOperationType, ...] = (
    "CreateGrant",
    "Decrypt",
    "DescribeKey",
    "GenerateDataKeyWithoutPlaintext",
    "ReEncryptFrom",
    "ReEncryptTo",
)


def snapshot_keys(ec2: EC2Client, image: ImageTypeDef) -> list[str]:
    """The KMS keys of the AMI's encrypted snapshots (the default EBS key where one names none),
    without repeats; empty when nothing is encrypted. Read from the snapshots: an image's block
    device mappings say whether a volume is encrypted, not with which key."""
    ids = snapshot_ids(image)
    if not ids:
        return []
    keys: list[str] = []
    for snapshot in ec2.describe_snapshots(SnapshotIds=ids)["Snapshots"]:
        if snapshot.get("Encrypted"):
            key = snapshot.get("KmsKeyId") or DEFAULT_EBS_KEY
            if key not in keys:
                keys.append(key)
    return keys


def snapshot_ids(image: ImageTypeDef) -> list[str]:
    return [
        mapping["Ebs"]["SnapshotId"]
        for mapping in image.get("BlockDeviceMappings", [])
        if "Ebs" in mapping and "SnapshotId" in mapping["Ebs"]
    ]


def aws_managed(kms: KMSClient, key_id: str) -> bool:
    """Whether AWS manages the key (aws/ebs): such a key is never shared with another account."""
    return kms.describe_key(KeyId=key_id)["KeyMetadata"].get("KeyManager") == "AWS"


def grant_name(account: str) -> str:
    return f"nodeforge-share-{account}"


def grant_accounts(kms: KMSClient, key_id: str, accounts: Sequence[str]) -> list[str]:
    """A grant on the key for every account that has none from nodeforge yet; the accounts
    granted now."""
    existing = {
        grant.get("Name")
        for page in kms.get_paginator("list_grants").paginate(KeyId=key_id)
        for grant in page["Grants"]
    }
    granted = []
    for account in accounts:
        if grant_name(account) in existing:
            continue
        kms.create_grant(
            KeyId=key_id,
            GranteePrincipal=f"arn:aws:iam::{account}:root",
            Operations=list(GRANT_OPERATIONS),
            Name=grant_name(account),
        )
        granted.append(account)
    return granted
