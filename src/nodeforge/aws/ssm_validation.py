"""Validation over AWS Systems Manager Run Command: the suite runs on each node, no inbound SSH.

For every instance the runner writes one bundle to the config's `ssm_bucket`: the suite, the
nodeforge package, pytest and testinfra with what they require (copied from the runner's own
environment: pure Python), the resolved vars with the lock files they name, and `run.json`,
which holds a presigned PUT URL per report. One AWS-RunShellScript command fetches the bundle
through a presigned GET URL and runs `nodeforge.remote_suite` on the node tools' Python (the
gpu_health layer's environment, which already holds pydantic and PyYAML). The node needs no AWS
credentials and no S3 permission; the runner reads the reports back with its own and deletes
what it wrote.

What counts as infrastructure, as over SSH: an instance that never comes Online, a command that
is not delivered or times out, a node that cannot reach S3. Then nothing was judged and the AMI
stays `built`.
"""

from __future__ import annotations

import io
import json
import secrets
import shlex
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from packaging.requirements import Requirement

from nodeforge import remote_suite
from nodeforge.aws.errors import InstanceUnreachableError
from nodeforge.aws.launch import Clock
from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from nodeforge.node_tools import TOOLS_PREFIX, package_files, zip_entry
from nodeforge.outfile import output_folder, write_output
from nodeforge.paths import VALIDATION_SUITE
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import target_for
from nodeforge.validate import Stage

# type stubs, a dev dependency: the installed tool never imports them
if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_ssm import SSMClient

    from nodeforge.aws.clients import AwsClients
    from nodeforge.aws.pipeline import Node, Validator

DOCUMENT = "AWS-RunShellScript"
KEY_PREFIX = "nodeforge/validation"
SUITE_REQUIREMENTS = ("pytest-testinfra",)
"""What the suite imports beyond nodeforge and the node tools' environment; the bundle carries
these distributions and everything they require, as installed on the runner."""
EXIT_NO_BUNDLE = 90
EXIT_NO_PYTHON = 93
_RUN = remote_suite.boot_code(".", "from nodeforge.remote_suite import main", "main")
_RUNNING = frozenset({"Pending", "InProgress", "Delayed", "Cancelling"})
_DELIVERY_GRACE_S = 600
"""How long past its execution timeout a command may stay pending or running before the runner
stops waiting (delivery to an agent that just came Online can take a while)."""


def suite_distributions() -> list[metadata.Distribution]:
    """SUITE_REQUIREMENTS and their requirements, as installed here, by name."""
    found: dict[str, metadata.Distribution] = {}
    pending = list(SUITE_REQUIREMENTS)
    while pending:
        name = pending.pop()
        distribution = metadata.distribution(name)
        key = distribution.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = distribution
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [found[key] for key in sorted(found)]


def _distribution_files(distribution: metadata.Distribution) -> Iterator[tuple[str, Path]]:
    for file in distribution.files or []:
        parts = PurePosixPath(file.as_posix()).parts
        # scripts land outside site-packages (../../bin); byte code is the runner's Python's
        if parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc":
            continue
        yield f"site/{file.as_posix()}", Path(str(distribution.locate_file(file)))


def _suite_files() -> Iterator[tuple[str, Path]]:
    for path in sorted(VALIDATION_SUITE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield f"validation/{path.relative_to(VALIDATION_SUITE).as_posix()}", path


def node_vars(document: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Path]]:
    """The vars as the node reads them: each python_ml environment's lock (a runner path) named
    relative to the bundle, with the files to put there."""
    carried: dict[str, Path] = {}
    environments = []
    for environment in document.get("python_ml_environments", []):
        name = f"locks/{environment['name']}.txt"
        carried[name] = Path(environment["lock"])
        environments.append({**environment, "lock": name})
    vars_on_node = dict(document)
    if environments:
        vars_on_node["python_ml_environments"] = environments
    return vars_on_node, carried


def bundle(document: Mapping[str, Any], run: Mapping[str, Any]) -> bytes:
    """The zip the node fetches: src/nodeforge, validation/, site/ (pytest, testinfra and what
    they require), vars.json, the locks it names, run.json."""
    vars_on_node, carried = node_vars(document)
    files = [(f"src/{name}", path) for name, path in package_files()]
    files += list(_suite_files())
    files += [item for d in suite_distributions() for item in _distribution_files(d)]
    files += sorted(carried.items())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, path in files:
            archive.writestr(zip_entry(name), path.read_bytes())
        archive.writestr(zip_entry(remote_suite.VARS_FILE), to_json(vars_on_node))
        archive.writestr(zip_entry(remote_suite.RUN_FILE), json.dumps(dict(run), indent=2))
    return buffer.getvalue()


def node_script(bundle_url: str, python: str) -> list[str]:
    """AWS-RunShellScript's commands: fetch and unpack the bundle, run the suite on it."""
    fetch = (
        "import io, sys, urllib.request, zipfile; "
        "zipfile.ZipFile(io.BytesIO(urllib.request.urlopen(sys.argv[1], timeout=300).read()))"
        ".extractall(sys.argv[2])"
    )
    py = shlex.quote(python)
    return [
        "set -u",
        f'if [ ! -x {py} ]; then echo "nodeforge: {python} is missing: the image has no node '
        f'tools environment (gpu_health layer)" >&2; exit {EXIT_NO_PYTHON}; fi',
        f"dir=$(mktemp -d /var/tmp/nodeforge-validation.XXXXXX) || exit {EXIT_NO_BUNDLE}",
        "trap 'rm -rf \"$dir\"' EXIT",
        f'{py} -I -c {shlex.quote(fetch)} {shlex.quote(bundle_url)} "$dir" '
        f"|| exit {EXIT_NO_BUNDLE}",
        f'cd "$dir" && {py} -I -c {shlex.quote(_RUN)} run.json',
    ]


def wait_online(
    ssm: SSMClient, instance_ids: Sequence[str], *, timeout_s: float, poll_s: float, clock: Clock
) -> None:
    """Return once Systems Manager reports every instance's agent Online;
    InstanceUnreachableError when one is not within timeout_s."""
    started = clock.monotonic()
    while True:
        answer = ssm.describe_instance_information(
            Filters=[{"Key": "InstanceIds", "Values": list(instance_ids)}]
        )
        pings = {
            i["InstanceId"]: i.get("PingStatus", "") for i in answer["InstanceInformationList"]
        }
        waiting = {
            i: pings.get(i) or "not registered" for i in instance_ids if pings.get(i) != "Online"
        }
        if not waiting:
            return
        if clock.monotonic() - started > timeout_s:
            detail = ", ".join(f"{i}: {why}" for i, why in sorted(waiting.items()))
            raise InstanceUnreachableError(
                f"not Online in Systems Manager after {timeout_s:g} s ({detail}). Check that "
                "iam_instance_profile's role has AmazonSSMManagedInstanceCore, that the subnet "
                "reaches the ssm and ec2messages endpoints (VPC endpoints or a NAT), and that "
                "the AMI runs the SSM agent"
            )
        clock.sleep(poll_s)


@dataclass(frozen=True)
class NodeRun:
    """One node's suite run: where its reports went, and what Run Command said."""

    instance_id: str
    command_id: str
    status: str
    details: str
    code: int
    output: str
    reports: dict[str, Path]

    def verdict(self) -> dict[str, Any] | None:
        path = self.reports.get("json")
        if path is None:
            return None
        try:
            report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None  # cut short on its way: as if it never came
        return report


class SsmRun:
    """One profile's validation on its instances: bundles up, commands out, reports back."""

    def __init__(
        self,
        clients: AwsClients,
        *,
        stage: Stage,
        report_dir: Path,
        clock: Clock,
    ) -> None:
        self.ssm = clients.ssm
        self.s3: S3Client = clients.s3
        self.config = clients.config
        self.bucket = str(self.config.ssm_bucket)
        self.stage = stage
        self.report_dir = report_dir
        self.clock = clock
        self.prefix = f"{KEY_PREFIX}/{clock.now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        self.keys: list[str] = []

    def _key(self, instance_id: str, name: str) -> str:
        key = f"{self.prefix}/{instance_id}/{name}"
        self.keys.append(key)
        return key

    def _presigned(self, method: str, key: str) -> str:
        expires = self.config.ssm_command_timeout_s + 2 * _DELIVERY_GRACE_S
        return self.s3.generate_presigned_url(
            method, Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=int(expires)
        )

    def send(self, instance_id: str, document: Mapping[str, Any], python: str) -> str:
        """Upload the instance's bundle and send it the command; the command id."""
        names = remote_suite.report_names(self.stage)
        reports = {
            name: self._presigned("put_object", self._key(instance_id, name)) for name in names
        }
        run = {"stage": self.stage, "reports": reports}
        key = self._key(instance_id, "suite.zip")
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=bundle(document, run))
        script = node_script(self._presigned("get_object", key), python)
        sent = self.ssm.send_command(
            InstanceIds=[instance_id],
            DocumentName=DOCUMENT,
            Comment=f"nodeforge validation, {self.stage} stage",
            Parameters={
                "commands": script,
                "executionTimeout": [str(self.config.ssm_command_timeout_s)],
            },
        )
        return sent["Command"]["CommandId"]

    def wait(self, instance_id: str, command_id: str) -> NodeRun:
        """Poll the invocation to its end, then fetch whatever reports the node uploaded."""
        started = self.clock.monotonic()
        limit = self.config.ssm_command_timeout_s + _DELIVERY_GRACE_S
        while True:
            try:
                answer = self.ssm.get_command_invocation(
                    CommandId=command_id, InstanceId=instance_id
                )
            except ClientError as exc:
                # visible a moment after SendCommand returns
                if exc.response.get("Error", {}).get("Code") != "InvocationDoesNotExist":
                    raise
                answer = None
            if answer is not None and answer["Status"] not in _RUNNING:
                break
            if self.clock.monotonic() - started > limit:
                raise InstanceUnreachableError(
                    f"the validation command {command_id} on {instance_id} has not ended after "
                    f"{limit:g} s: the agent lost it (read `aws ssm list-command-invocations "
                    f"--command-id {command_id} --details`)"
                )
            self.clock.sleep(self.config.poll_interval_s)
        folder = output_folder(self.report_dir / instance_id)
        reports: dict[str, Path] = {}
        for kind, name in zip(
            ("json", "junit", "log"), remote_suite.report_names(self.stage), strict=True
        ):
            body = self._fetched(f"{self.prefix}/{instance_id}/{name}")
            if body is not None:
                write_output(folder / name, body)
                reports[kind] = folder / name
        output = answer.get("StandardOutputContent", "") + answer.get("StandardErrorContent", "")
        return NodeRun(
            instance_id=instance_id,
            command_id=command_id,
            status=answer["Status"],
            details=answer.get("StatusDetails", ""),
            code=int(answer.get("ResponseCode", -1)),
            output=output,
            reports=reports,
        )

    def _fetched(self, key: str) -> str | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return body.decode("utf-8", errors="replace")

    def clean_up(self) -> None:
        for key in self.keys:
            self.s3.delete_object(Bucket=self.bucket, Key=key)


def judged(run: NodeRun) -> bool:
    """Whether the node passed; InstanceUnreachableError when nothing was judged, InputError when
    the suite itself did not run (as `nodeforge validate` says)."""
    tail = " ".join(run.output.strip().splitlines()[-3:])
    where = f"{run.instance_id} (command {run.command_id})"
    if run.status != "Success" and run.code not in (remote_suite.EXIT_FAILED, EXIT_NO_PYTHON):
        if run.code == remote_suite.EXIT_NOT_RUN:
            raise InputError(
                f"the validation suite did not run on {where}: {tail}",
                file=run.reports.get("log"),
            )
        if run.code in (EXIT_NO_BUNDLE, remote_suite.EXIT_NOT_UPLOADED):
            why = (
                "could not fetch the suite from S3"
                if run.code == EXIT_NO_BUNDLE
                else ("could not upload its reports to S3")
            )
            raise InstanceUnreachableError(
                f"{where} {why} ({tail}): the subnet must reach S3 (a gateway endpoint or a NAT)"
            )
        raise InstanceUnreachableError(
            f"the validation command on {where} ended {run.status}"
            f"{' (' + run.details + ')' if run.details else ''}, exit {run.code}: nothing was "
            f"judged ({tail or 'no output'})"
        )
    if run.code == EXIT_NO_PYTHON:
        return False
    report = run.verdict()
    if report is None:
        raise InstanceUnreachableError(
            f"{where} ran the suite but no readable report reached S3 ({tail or 'no output'})"
        )
    return run.code == remote_suite.EXIT_PASSED and bool(report.get("ok"))


def ssm_validator(
    clients: AwsClients,
    catalog: Catalog,
    image: str,
    *,
    report_root: Path,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
    clock: Clock | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> Validator:
    """The target stage of validation/ on each instance through Run Command, once each is
    Online in Systems Manager."""
    clock = clock or Clock()
    config = clients.config

    def validate(nodes: Sequence[Node], profile: str) -> bool:
        target = target_for(catalog, image, profile)
        document = render(catalog, target, overrides=overrides, overrides_path=overrides_path)
        report_dir = report_root / profile
        write_output(output_folder(report_dir) / "vars.json", to_json(document))
        ids = [node.instance_id for node in nodes]
        progress(f"{profile}: waiting for {', '.join(ids)} to come Online in Systems Manager")
        wait_online(
            clients.ssm,
            ids,
            timeout_s=config.ssm_online_timeout_s,
            poll_s=config.poll_interval_s,
            clock=clock,
        )
        python = f"{document.get('gpu_health_tools_prefix', TOOLS_PREFIX)}/bin/python"
        run = SsmRun(clients, stage="target", report_dir=report_dir, clock=clock)
        try:
            commands = {i: run.send(i, document, python) for i in ids}
            progress(f"{profile}: running the suite on {', '.join(ids)} through {DOCUMENT}")
            results = [run.wait(i, command) for i, command in commands.items()]
        finally:
            run.clean_up()
        verdicts = [judged(result) for result in results]
        for result, ok in zip(results, verdicts, strict=True):
            if not ok:
                log = result.reports.get("log")
                said = f"log: {log}" if log else result.output.strip()[-300:]
                progress(f"{profile}: {result.instance_id} failed validation ({said})")
        return all(verdicts)

    return validate
