"""The tags nodeforge reads and writes: AMIs, validation instances, placement groups, copies.

The IAM policy (docs/iam-policy.json) keys its conditions on these names; change both together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import TagTypeDef


IMAGE = "nodeforge:image"
STATUS = "nodeforge:status"
RUN_ID = "nodeforge:run-id"
TTL = "nodeforge:ttl"
PROFILE = "nodeforge:profile"
SOURCE_AMI = "nodeforge:source-ami"
SOURCE_REGION = "nodeforge:source-region"
FAILED_PROFILE = "nodeforge:failed-profile"
PASSED_PROFILES = "nodeforge:passed-profiles"
"""Profiles the AMI passed on, comma-separated: a re-run after a failed publish skips them."""
BUILT, VALIDATED, FAILED = "built", "validated", "failed"


def tag_list(tags: Mapping[str, str]) -> list[TagTypeDef]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def tag_map(tags: Iterable[TagTypeDef]) -> dict[str, str]:
    """A describe_* result's Tags list as a mapping."""
    return {tag.get("Key", ""): tag.get("Value", "") for tag in tags}


def iso(moment: datetime) -> str:
    """UTC, second precision, 'Z': what reapers and `date -d` parse alike."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
