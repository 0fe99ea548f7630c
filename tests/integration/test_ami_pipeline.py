"""The golden AMI pipeline end to end, through the real CLI: `nodeforge build --target aws
--promote` against a fake AWS account (moto_server on loopback), with the test-double `packer`
registering the AMI in that account, then `nodeforge prune`.

The validation instances are launched for real (in moto, with the profile's EFA layout) but
cannot be reached, so NODEFORGE_VALIDATION_STAND_IN (src/nodeforge/aws/standin.py) points the
validation suite at a container of the local image instead:

- the passing runs use the build stage against a container that was never booted. A GPU-less
  container cannot pass the target stage (no GPU, no EFA), and a booted one cannot pass the
  build stage either: systemd writes /etc/machine-id at boot, which the build stage's image
  hygiene forbids. An unbooted container is the image as Packer leaves it;
- the failing run uses the target stage against a booted SystemdContainer: what a GPU-less
  instance of the image meets, failing on the missing GPU and EFA.

The suite compares the container with the local image's resolved vars (local-debian13), not the
promoted image's, since that is what the container was built from.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.responses import ActionResult
from moto.ec2.responses import EC2Response
from moto.server import ThreadedMotoServer
from moto.ssm.responses import SimpleSystemManagerResponse
from mypy_boto3_ec2 import EC2Client
from mypy_boto3_ssm import SSMClient

from nodeforge.aws import tags
from nodeforge.local.podman import SystemdContainer
from nodeforge.local.podman import run as podman
from tests.conftest import REPO, Edit
from tests.integration.conftest import LOCAL_IMAGE, local_image_group
from tests.moto_images import deregister_with_snapshots, image_references
from tests.packer.conftest import DOUBLE
from tests.packer.test_moto import PARAMETER

pytestmark = local_image_group

IMAGE = "p5-ubuntu24.04"
PROFILE = "p5.48xlarge"
REGION = "us-east-1"
PUBLISHED = f"/nodeforge/{IMAGE}/{PROFILE}/ami-id"
CLI_TIMEOUT_S = 150


@dataclass
class NodeCommand:
    """One SendCommand as the SSM agent runs it: the commands as one shell script, as root, on
    the node (here a booted container of the local image), on a thread of its own."""

    container: str
    script: str
    done: subprocess.CompletedProcess[str] | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.done = podman(["exec", self.container, "sh", "-c", self.script], check=False)

    def invocation(self, command_id: str, instance_id: str) -> dict[str, Any]:
        if self.done is None:
            return {"CommandId": command_id, "InstanceId": instance_id, "Status": "InProgress"}
        status = "Success" if self.done.returncode == 0 else "Failed"
        return {
            "CommandId": command_id,
            "InstanceId": instance_id,
            "Status": status,
            "StatusDetails": status,
            "ResponseCode": self.done.returncode,
            "StandardOutputContent": self.done.stdout[-24000:],
            "StandardErrorContent": self.done.stderr[-8000:],
        }


@dataclass
class Unimplemented:
    """What the fake account answered for the EC2 and Systems Manager calls moto does not
    implement."""

    created_groups: list[str] = field(default_factory=list)
    deleted_groups: list[str] = field(default_factory=list)
    deprecated: dict[str, str] = field(default_factory=dict)
    node: str | None = None
    """The container that Run Command's commands run in, for every instance (None: moto's
    default, which runs nothing)."""
    commands: dict[str, NodeCommand] = field(default_factory=dict)

    def clear(self) -> None:
        self.created_groups.clear()
        self.deleted_groups.clear()
        self.deprecated.clear()
        self.node = None
        for command in self.commands.values():
            command.thread.join()
        self.commands.clear()


@pytest.fixture(scope="module")
def moto_server() -> Iterator[tuple[str, Unimplemented]]:
    """moto_server on a free loopback port, answering placement groups, image deprecation,
    image references and Systems Manager's instance information (which moto lacks), running Run
    Command's scripts in `Unimplemented.node` and deleting a deregistered AMI's snapshots (which
    moto ignores) the way EC2 does; placement groups and deprecations are recorded."""
    unimplemented = Unimplemented()

    def create_placement_group(self: EC2Response) -> ActionResult:
        name = str(self._get_param("GroupName"))
        unimplemented.created_groups.append(name)
        return ActionResult({"PlacementGroup": {"GroupName": name, "Strategy": "cluster"}})

    def delete_placement_group(self: EC2Response) -> ActionResult:
        unimplemented.deleted_groups.append(str(self._get_param("GroupName")))
        return ActionResult({})

    def enable_image_deprecation(self: EC2Response) -> ActionResult:
        unimplemented.deprecated[str(self._get_param("ImageId"))] = str(
            self._get_param("DeprecateAt")
        )
        return ActionResult({"Return": True})

    def describe_image_references(self: EC2Response) -> ActionResult:
        asked = self._get_params()
        found = image_references(
            self.current_account, self.region, asked["ImageIds"], asked.get("ResourceTypes", [])
        )
        return ActionResult({"ImageReferences": found})

    moto_deregister = EC2Response.deregister_image

    def deregister_image(self: EC2Response) -> ActionResult:
        asked = self._get_params()
        if not asked.get("DeleteAssociatedSnapshots"):
            return moto_deregister(self)
        results = deregister_with_snapshots(self.current_account, self.region, asked["ImageId"])
        return ActionResult({"Return": True, "DeleteSnapshotResults": results})

    def describe_instance_information(self: SimpleSystemManagerResponse) -> ActionResult:
        filters = self._get_param("Filters", [])
        wanted = next(f["Values"] for f in filters if f["Key"] == "InstanceIds")
        listed = [{"InstanceId": i, "PingStatus": "Online"} for i in wanted]
        return ActionResult({"InstanceInformationList": listed})

    moto_send_command = SimpleSystemManagerResponse.send_command

    def send_command(self: SimpleSystemManagerResponse) -> ActionResult:
        sent = moto_send_command(self)
        if unimplemented.node is not None:
            result: Any = sent.result
            script = "\n".join(self._get_param("Parameters")["commands"])
            unimplemented.commands[result["Command"]["CommandId"]] = NodeCommand(
                unimplemented.node, script
            )
        return sent

    moto_get_command_invocation = SimpleSystemManagerResponse.get_command_invocation

    def get_command_invocation(self: SimpleSystemManagerResponse) -> ActionResult:
        command = unimplemented.commands.get(str(self._get_param("CommandId")))
        if command is None:
            return moto_get_command_invocation(self)
        return ActionResult(
            command.invocation(self._get_param("CommandId"), self._get_param("InstanceId"))
        )

    with pytest.MonkeyPatch.context() as patch:
        for ssm_handler in (describe_instance_information, send_command, get_command_invocation):
            patch.setattr(
                SimpleSystemManagerResponse, ssm_handler.__name__, ssm_handler, raising=False
            )
        # moto's catalogue of public AMIs takes seconds to load and nothing here needs it
        patch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        for handler in (
            create_placement_group,
            delete_placement_group,
            enable_image_deprecation,
            describe_image_references,
            deregister_image,
        ):
            patch.setattr(EC2Response, handler.__name__, handler, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}", unimplemented
        finally:
            server.stop()


@dataclass
class Account:
    """One fresh fake account, and how to run the CLI against it."""

    endpoint: str
    unimplemented: Unimplemented
    ec2: EC2Client
    ssm: SSMClient
    config: Path
    catalog: Path
    work_dir: Path

    def env(self, stand_in: dict[str, str] | None) -> dict[str, str]:
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "NODEFORGE_PACKER_DOUBLE_"))
        }
        return {
            **environ,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            **({"NODEFORGE_VALIDATION_STAND_IN": json.dumps(stand_in)} if stand_in else {}),
            # the double's `#!/usr/bin/env python3` must find this venv's python (it has boto3)
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "nodeforge.cli", *args, "--catalog", str(self.catalog)]

    def build(
        self, stand_in: dict[str, str], *, as_json: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*self.build_args(), *(["--json"] if as_json else [])),
            cwd=REPO,
            env=self.env(stand_in),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )

    def build_args(self) -> list[str]:
        return [
            "build", IMAGE, "--target", "aws", "--profile", PROFILE, "--packer", str(DOUBLE),
            "--promote", "--config", str(self.config), "--work-dir", str(self.work_dir),
        ]  # fmt: skip

    def image(self, ami: str) -> dict[str, Any] | None:
        found = self.ec2.describe_images(Filters=[{"Name": "image-id", "Values": [ami]}])
        return dict(found["Images"][0]) if found["Images"] else None

    def image_tags(self, ami: str) -> dict[str, str]:
        image = self.image(ami)
        assert image is not None, f"{ami} is gone"
        return tags.tag_map(image.get("Tags", []))

    def live_instances(self) -> list[str]:
        states = ["pending", "running", "stopping", "stopped"]
        reservations = self.ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": states}]
        )["Reservations"]
        return [i["InstanceId"] for r in reservations for i in r["Instances"]]

    def amis(self) -> list[str]:
        images = self.ec2.describe_images(Owners=["self"])["Images"]
        return [i["ImageId"] for i in images if tags.tag_map(i.get("Tags", [])).get(tags.IMAGE)]

    def published(self) -> dict[str, str]:
        found = self.ssm.get_parameters_by_path(Path=f"/nodeforge/{IMAGE}", Recursive=True)
        return {p["Name"]: p["Value"] for p in found["Parameters"]}


@pytest.fixture
def account(
    moto_server: tuple[str, Unimplemented], edit: Edit, catalog_dir: Path, tmp_path: Path
) -> Account:
    endpoint, unimplemented = moto_server
    # moto keeps its accounts in module globals: every test starts from an empty one
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    unimplemented.clear()
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    ec2 = session.client("ec2", endpoint_url=endpoint)
    ssm = session.client("ssm", endpoint_url=endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="nodeforge", Description="ssh", VpcId=vpc)

    # moto refuses names under /aws/: the OS entry of the catalog copy points at its own
    def own_parameter(doc: dict[str, dict[str, dict[str, dict[str, str]]]]) -> None:
        doc["architectures"]["x86_64"]["source_ami"]["ssm_parameter"] = PARAMETER

    edit("os/ubuntu24.04.yml", own_parameter)
    ssm.put_parameter(Name=PARAMETER, Value="ami-0aaaaaaaaaaaaaaaa", Type="String")
    config = tmp_path / "pipeline.yml"
    config.write_text(
        f"region: {REGION}\nsubnet_id: {subnet}\nsecurity_group_ids: [{group['GroupId']}]\n"
        "poll_interval_s: 0\nready_timeout_s: 60\nterminate_timeout_s: 60\n",
        encoding="utf-8",
    )
    return Account(endpoint, unimplemented, ec2, ssm, config, catalog_dir, tmp_path / "work")


@pytest.fixture(scope="module")
def unbooted(local_image: str) -> Iterator[str]:
    """A container of the local image that never booted: the image as Packer leaves it."""
    name = f"nodeforge-ami-e2e-{os.getpid()}"
    podman(["run", "-d", "--name", name, "--network", "host", local_image, "sleep", "infinity"])
    try:
        yield name
    finally:
        podman(["rm", "-f", "-t", "0", name], check=False)


@pytest.fixture(scope="module")
def booted(local_image: str) -> Iterator[str]:
    """A booted container of the local image: a GPU-less instance of it."""
    with SystemdContainer(local_image) as container:
        yield container.name


def _stand_in(container: str, stage: str, builder: str | None = None) -> dict[str, str]:
    """Validation on `container` in place of the instances, and on `builder` (default: the
    same container) in place of Packer's builder."""
    stand_in = {"hosts": f"podman://{container}", "image": LOCAL_IMAGE, "stage": stage}
    if builder is not None:
        stand_in["builder_hosts"] = f"podman://{builder}"
    return stand_in


def _builder_report(account: Account) -> dict[str, Any]:
    path = account.work_dir / IMAGE / f"validation-builder-{REGION}" / "validation-build.json"
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def _failed_checks(report: Path) -> str:
    if not report.exists():
        return "(no validation report)"
    checks = json.loads(report.read_text())["checks"]
    return "\n".join(f"{c['id']}: {c['message'][:300]}" for c in checks if c["outcome"] == "failed")


def _promoted(account: Account, container: str) -> str:
    """Build and promote once; the published AMI."""
    done = account.build(_stand_in(container, "build"))
    report = account.work_dir / IMAGE / "promote" / PROFILE / "validation-build.json"
    assert done.returncode == 0, done.stderr[-2000:] + _failed_checks(report)
    document = json.loads(done.stdout)
    ami: str = document["build"]["amis"][REGION]
    assert document["promote"]["status"] == "published"
    assert document["promote"]["ami"] == ami
    return ami


def test_build_promote_publish_then_prune(account: Account, unbooted: str) -> None:
    first = _promoted(account, unbooted)

    assert account.image_tags(first)[tags.STATUS] == tags.VALIDATED
    assert account.published() == {PUBLISHED: first}
    assert account.live_instances() == []
    [group] = account.unimplemented.created_groups
    assert account.unimplemented.deleted_groups == [group]
    checks = json.loads(
        (account.work_dir / IMAGE / "promote" / PROFILE / "validation-build.json").read_text()
    )
    assert checks["ok"] is True
    assert {c["host"] for c in checks["checks"]} == {unbooted}
    # the builder passed validation's build stage before the AMI was registered
    builder = _builder_report(account)
    assert builder["ok"] is True
    assert {c["host"] for c in builder["checks"]} == {unbooted}

    second = _promoted(account, unbooted)
    assert account.published() == {PUBLISHED: second}
    first_image = account.image(first)
    assert first_image is not None
    first_snapshot = first_image["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]

    pruned = subprocess.run(
        account.argv(
            "prune",
            IMAGE,
            "--keep",
            "1",
            "--deprecated-for",
            "0",
            "--config",
            str(account.config),
            "--json",
        ),
        cwd=REPO,
        env=account.env({}),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )

    assert pruned.returncode == 0, pruned.stderr
    assert account.image(first) is None
    snapshots = account.ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]
    assert first_snapshot not in {s["SnapshotId"] for s in snapshots}
    assert account.image_tags(second)[tags.STATUS] == tags.VALIDATED
    assert account.published() == {PUBLISHED: second}


def test_failed_builder_check_registers_no_ami(
    account: Account, unbooted: str, booted: str
) -> None:
    # a booted builder fails the build stage's hygiene checks: Packer fails before the AMI
    done = account.build(_stand_in(unbooted, "build", builder=booted), as_json=False)

    assert done.returncode == 1, done.stderr[-3000:]
    assert "Erroneous exit code 1" in done.stderr
    assert account.amis() == []
    report = _builder_report(account)
    assert report["ok"] is False
    assert {c["host"] for c in report["checks"]} == {booted}
    assert account.published() == {}


def test_failed_validation_retires_the_ami(account: Account, unbooted: str, booted: str) -> None:
    done = account.build(_stand_in(booted, "target", builder=unbooted), as_json=False)

    assert done.returncode == 1, done.stderr[-3000:]
    [ami] = account.amis()
    assert f"us-east-1  {ami}  " in done.stdout
    assert f"failed   {ami} in us-east-1" in done.stdout
    assert f"reports  {account.work_dir / IMAGE / 'promote'}" in done.stdout
    image_tags = account.image_tags(ami)
    assert image_tags[tags.STATUS] == tags.FAILED
    assert image_tags[tags.FAILED_PROFILE] == PROFILE
    assert ami in account.unimplemented.deprecated
    assert account.published() == {}
    assert account.live_instances() == []


def test_interrupt_after_launch_leaves_nothing_running_or_published(
    account: Account, unbooted: str, booted: str
) -> None:
    process = subprocess.Popen(
        account.argv(*account.build_args()),
        cwd=REPO,
        env=account.env(_stand_in(booted, "target", builder=unbooted)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stderr is not None
    stderr = process.stderr

    def read() -> None:
        for line in stderr:
            lines.put(line)

    reader = threading.Thread(target=read)
    reader.start()
    seen: list[str] = []
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        # promote validates once every instance is running: interrupt it there
        while not any(f"{PROFILE}: validating on " in line for line in seen):
            assert process.poll() is None, "".join(seen)
            assert time.monotonic() < deadline, "".join(seen)
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        assert account.live_instances(), "".join(seen)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join()
    while not lines.empty():
        seen.append(lines.get())

    assert code == 130, "".join(seen)
    assert "nodeforge: interrupted" in seen[-1]
    assert account.live_instances() == []
    assert account.published() == {}
    [ami] = account.amis()
    assert account.image_tags(ami)[tags.STATUS] == "built"
    assert account.unimplemented.deprecated == {}


def test_promote_over_systems_manager_runs_the_suite_on_the_node(
    account: Account, booted: str, tmp_path: Path
) -> None:
    """validation_transport ssm, real but for the agent: the runner puts the bundle in S3, the
    Run Command script (run in a booted container of the local image, as the agent runs it)
    fetches it by presigned URL from the moto server, runs the suite on the node tools' Python
    against the node itself, and PUTs the reports back, which the runner reads and judges. The
    container has no GPU and is not the promoted image, so the verdict is a fail: what counts is
    that it was reached on the node."""
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    session.client("iam", endpoint_url=account.endpoint).create_instance_profile(
        InstanceProfileName="nodeforge-validation"
    )
    s3 = session.client("s3", endpoint_url=account.endpoint)
    s3.create_bucket(Bucket="nodeforge-validation")
    with account.config.open("a", encoding="utf-8") as config:
        config.write(
            "validation_transport: ssm\niam_instance_profile: nodeforge-validation\n"
            "ssm_bucket: nodeforge-validation\n"
        )
    builder = account.ec2.run_instances(
        ImageId="ami-0b0b0b0b0b0b0b0b0", InstanceType="t3.micro", MinCount=1, MaxCount=1
    )["Instances"][0]["InstanceId"]
    ami = account.ec2.create_image(
        InstanceId=builder,
        Name=f"{IMAGE}-ssm",
        TagSpecifications=[
            {
                "ResourceType": "image",
                "Tags": tags.tag_list({tags.IMAGE: IMAGE, tags.STATUS: tags.BUILT}),
            }
        ],
    )["ImageId"]
    account.ec2.terminate_instances(InstanceIds=[builder])
    account.unimplemented.node = booted
    reports = tmp_path / "reports"

    argv = account.argv("promote", IMAGE, "--ami", ami, "--profile", PROFILE, "--json")
    argv += ["--config", str(account.config), "--report-dir", str(reports)]
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=account.env(None),
        capture_output=True,
        text=True,
        timeout=2 * CLI_TIMEOUT_S,
        check=False,
    )

    assert done.returncode == 1, done.stderr[-3000:]
    document = json.loads(done.stdout)
    [run] = document["profiles"]
    assert (document["status"], run["outcome"]) == ("failed", "failed"), done.stderr[-3000:]
    [instance] = run["instances"]
    [command] = account.unimplemented.commands.values()
    assert command.done is not None
    assert command.done.returncode == 1, command.done.stderr[-3000:]
    report = json.loads((reports / PROFILE / instance / "validation-target.json").read_text())
    assert report["hosts"] == "local://"
    assert report["image"] == IMAGE
    # checks ran on the node and judged it: some passed, and the missing GPU failed others
    assert report["summary"]["passed"] > 0
    failed = "\n".join(c["message"] for c in report["checks"] if c["outcome"] == "failed")
    assert "missing capability gpu" in failed
    # the bundle's packages stay out of what the checks see on the node: the node tools'
    # environment still equals its lock
    outcomes = {c["id"].split("::")[-1]: c["outcome"] for c in report["checks"]}
    assert outcomes["test_node_tools_equal_the_lock[local]"] == "passed"
    assert (reports / PROFILE / instance / "validation-target.log").is_file()
    assert account.image_tags(ami)[tags.STATUS] == tags.FAILED
    assert s3.list_objects_v2(Bucket="nodeforge-validation").get("KeyCount") == 0
    assert account.live_instances() == []
