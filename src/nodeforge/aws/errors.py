"""AWS failures that reach the user as one paragraph saying what happened and what to do."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})


class AwsError(Exception):
    """An AWS step failed for a reason that is not the AMI's fault (exit code 1)."""


class NoCapacityError(AwsError):
    """EC2 had no capacity for the instance type in the subnet's availability zone."""


class InstanceUnreachableError(AwsError):
    """Launched instances did not pass their status checks in time: the AMI may not boot."""


class CleanupError(AwsError):
    """Instances or the placement group of a run could not be removed: a person must."""


def aws_error(exc: ClientError | BotoCoreError, doing: str) -> AwsError:
    """Turn a botocore failure into an AwsError whose message says what to do next."""
    if isinstance(exc, BotoCoreError):
        return AwsError(f"{doing}: {exc}. Check credentials, region and network access to AWS")
    code = exc.response.get("Error", {}).get("Code", "")
    message = exc.response.get("Error", {}).get("Message", "")
    if code in THROTTLING_CODES:
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        return AwsError(
            f"{doing}: AWS kept throttling the request ({code}) after {attempts + 1} attempts. "
            "Retry later, or raise api_max_attempts in the pipeline config"
        )
    if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
        return AwsError(
            f"{doing}: access denied ({message}). Grant the caller docs/iam-policy.json"
        )
    return AwsError(f"{doing}: {code}: {message}")
