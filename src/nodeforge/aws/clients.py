"""boto3 clients built from a caller's session, with botocore's retries for throttling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from nodeforge.aws.config import PipelineConfig

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_eks import EKSClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_ssm import SSMClient


@dataclass(frozen=True)
class AwsClients:
    session: boto3.Session
    config: PipelineConfig
    ec2: EC2Client
    ssm: SSMClient
    s3: S3Client
    """In the config's region: validation over Systems Manager keeps its bundles there."""

    def ec2_in(self, region: str) -> EC2Client:
        return self.session.client("ec2", region_name=region, config=_retries(self.config))

    def ssm_in(self, region: str) -> SSMClient:
        return self.session.client("ssm", region_name=region, config=_retries(self.config))

    def kms_in(self, region: str) -> KMSClient:
        return self.session.client("kms", region_name=region, config=_retries(self.config))

    def autoscaling_in(self, region: str) -> AutoScalingClient:
        return self.session.client("autoscaling", region_name=region, config=_retries(self.config))

    def eks_in(self, region: str) -> EKSClient:
        return self.session.client("eks", region_name=region, config=_retries(self.config))


def _retries(config: PipelineConfig) -> Config:
    # botocore backs off and retries RequestLimitExceeded / Throttling (and 5xx) by itself;
    # a request still throttled after max_attempts surfaces as a ClientError (see errors.py)
    return Config(
        retries={"mode": config.retry_mode, "total_max_attempts": config.api_max_attempts}
    )


def clients_for(session: boto3.Session, config: PipelineConfig) -> AwsClients:
    retries = _retries(config)
    return AwsClients(
        session=session,
        config=config,
        ec2=session.client("ec2", region_name=config.region, config=retries),
        ssm=session.client("ssm", region_name=config.region, config=retries),
        # presigned URLs signed with SigV4 (botocore still presigns S3 with SigV2 by default,
        # which regions opened since 2014 refuse) and naming the bucket's region
        s3=session.client(
            "s3", region_name=config.region, config=retries.merge(Config(signature_version="s3v4"))
        ),
    )
