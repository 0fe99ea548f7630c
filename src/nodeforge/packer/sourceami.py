"""The base AMI id behind an OS entry's SSM parameter, per region.

Packer's amazon-parameterstore data source would run for every build, even one whose OS is
found by a name filter (data sources cannot be switched off), so nodeforge resolves the
parameter itself and hands Packer the id.
"""

from __future__ import annotations

from collections.abc import Callable

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from nodeforge.errors import InputError

Resolver = Callable[[str, str], str]
"""(ssm parameter, region) -> AMI id."""


def resolve_ssm_parameter(parameter: str, region: str) -> str:
    """AWS_ENDPOINT_URL and the usual credential chain apply (boto3 reads them)."""
    try:
        answer = boto3.client("ssm", region_name=region).get_parameter(Name=parameter)
    except (ClientError, BotoCoreError) as exc:
        raise InputError(
            f"cannot read SSM parameter {parameter} in {region}: {exc}",
            field="source_ami.ssm_parameter",
            fix="check AWS credentials and region, and that the OS entry names a public "
            "parameter that exists in this region",
        ) from None
    value = answer["Parameter"].get("Value", "")
    if not value.startswith("ami-"):
        raise InputError(
            f"SSM parameter {parameter} in {region} holds {value!r}, not an AMI id",
            field="source_ami.ssm_parameter",
            fix="point the OS entry at a parameter whose value is an ami- id",
        )
    return value
