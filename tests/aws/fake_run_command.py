"""Systems Manager's side of validation over Run Command, for the in-process moto account.

moto records SendCommand but runs nothing, answers every GetCommandInvocation with Success and
has no DescribeInstanceInformation. `FakeRunCommand` answers those from a scripted node: it
reads the bundle the runner uploaded (through moto's S3), hands its run.json and vars to the
scenario, and uploads the reports the scenario returns to the keys of the presigned URLs, as the
node's PUTs would. The real node side (nodeforge.remote_suite fetching and uploading over HTTP)
runs in tests/integration/test_ami_pipeline.py against a moto server.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3

from tests.aws.conftest import ok


@dataclass
class Invocation:
    """What a node got: the command's parameters and the unpacked bundle."""

    instance_id: str
    commands: list[str]
    execution_timeout: str
    files: dict[str, bytes]

    @property
    def run(self) -> dict[str, Any]:
        run: dict[str, Any] = json.loads(self.files["run.json"])
        return run

    @property
    def vars(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.files["vars.json"])
        return document


@dataclass
class Ended:
    """How the command ended on the node, and the reports it uploaded (by file name)."""

    status: str = "Success"
    code: int = 0
    details: str = ""
    output: str = ""
    reports: dict[str, str] = field(default_factory=dict)


Node = Callable[[Invocation], Ended]


def report(ok: bool, stage: str = "target") -> dict[str, str]:
    """The three files of a suite run that passed or failed."""
    document = {"schema": 3, "stage": stage, "hosts": "local://", "ok": ok, "checks": []}
    return {
        f"validation-{stage}.json": json.dumps(document),
        f"validation-{stage}.xml": "<testsuites/>",
        f"validation-{stage}.log": "1 passed" if ok else "1 failed",
    }


def passed(_invocation: Invocation) -> Ended:
    return Ended(reports=report(True))


def bucket_and_key(url: str) -> tuple[str, str]:
    """From a presigned S3 URL, virtual-hosted or path-style."""
    parts = urlsplit(url)
    path = unquote(parts.path).lstrip("/")
    host = parts.hostname or ""
    if host.startswith("s3.") or host.startswith("127.") or host == "localhost":
        bucket, _, key = path.partition("/")
        return bucket, key
    return host.split(".s3", 1)[0], path


@dataclass
class FakeRunCommand:
    session: boto3.Session
    node: Node = passed
    online: set[str] | None = None
    """Instances whose agent is Online; None: every instance moto has."""
    invocations: list[Invocation] = field(default_factory=list)
    pending_polls: int = 1
    """GetCommandInvocation answers InProgress this many times before the end."""
    ended: dict[str, Ended] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def install(self) -> FakeRunCommand:
        events = self.session.events
        events.register("before-call.ssm.DescribeInstanceInformation", self.describe)
        events.register("before-parameter-build.ssm.SendCommand", self.asked)
        events.register("after-call.ssm.SendCommand", self.sent)
        events.register("before-call.ssm.GetCommandInvocation", self.invocation)
        return self

    def describe(self, params: dict[str, Any], **_: Any) -> Any:
        body = json.loads(params["body"])
        wanted = next(f["Values"] for f in body["Filters"] if f["Key"] == "InstanceIds")
        online = self.online if self.online is not None else set(wanted)
        listed = [
            {"InstanceId": i, "PingStatus": "Online" if i in online else "ConnectionLost"}
            for i in wanted
            if i in online or self.online is not None
        ]
        return ok({"InstanceInformationList": listed})

    def asked(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(dict(params))

    def sent(self, parsed: dict[str, Any], **_: Any) -> None:
        # the request's instances: moto's answer adds every instance it has when no Targets
        # are given
        request = self.requests[-1]
        command = parsed["Command"]
        [instance_id] = request["InstanceIds"]
        commands = request["Parameters"]["commands"]
        url = next(
            word.strip("'") for line in commands for word in line.split() if "suite.zip" in word
        )
        s3 = self.session.client("s3")
        bucket, key = bucket_and_key(url)
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
        invocation = Invocation(
            instance_id, commands, request["Parameters"]["executionTimeout"][0], files
        )
        self.invocations.append(invocation)
        ended = self.node(invocation)
        for name, text in ended.reports.items():
            target_bucket, target_key = bucket_and_key(invocation.run["reports"][name])
            s3.put_object(Bucket=target_bucket, Key=target_key, Body=text.encode())
        self.ended[command["CommandId"]] = ended

    def invocation(self, params: dict[str, Any], **_: Any) -> Any:
        body = json.loads(params["body"])
        command_id = body["CommandId"]
        self.polls[command_id] = self.polls.get(command_id, 0) + 1
        ended = self.ended[command_id]
        status = ended.status if self.polls[command_id] > self.pending_polls else "InProgress"
        return ok(
            {
                "CommandId": command_id,
                "InstanceId": body["InstanceId"],
                "Status": status,
                "StatusDetails": ended.details or status,
                "ResponseCode": ended.code if status != "InProgress" else -1,
                "StandardOutputContent": ended.output,
                "StandardErrorContent": "",
            }
        )
