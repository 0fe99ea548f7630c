"""Validation over Systems Manager Run Command (validation_transport: ssm), against moto with a
scripted node (tests/aws/fake_run_command.py): the bundle, the command, the waits, the reports
read back, and which endings are the image's fault and which are infrastructure."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nodeforge import remote_suite
from nodeforge.aws import tags
from nodeforge.aws.config import PipelineConfig
from nodeforge.aws.errors import InstanceUnreachableError
from nodeforge.aws.pipeline import Node, promote
from nodeforge.aws.ssm_validation import (
    EXIT_NO_BUNDLE,
    EXIT_NO_PYTHON,
    bundle,
    node_vars,
    ssm_validator,
)
from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from tests.aws.conftest import IMAGE, REGION, FakeClock, World
from tests.aws.fake_run_command import Ended, FakeRunCommand, report

BUCKET = "nodeforge-validation-reports"
PROFILE = "p5.48xlarge"
SSM = {
    "validation_transport": "ssm",
    "iam_instance_profile": "nodeforge-validation",
    "ssm_bucket": BUCKET,
}


@pytest.fixture
def run_command(world: World) -> FakeRunCommand:
    world.session.client("s3").create_bucket(Bucket=BUCKET)
    return FakeRunCommand(world.session).install()


def _validator(world: World, shipped: Catalog, tmp_path: Path, **config: Any) -> Any:
    return ssm_validator(
        world.clients(**SSM, **config),
        shipped,
        IMAGE,
        report_root=tmp_path,
        clock=FakeClock().clock(),
    )


@pytest.fixture
def validator(world: World, shipped: Catalog, tmp_path: Path) -> Any:
    return lambda **config: _validator(world, shipped, tmp_path, **config)


def _keys(world: World) -> list[str]:
    listed = world.session.client("s3").list_objects_v2(Bucket=BUCKET)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_each_node_runs_the_bundle_and_its_reports_come_back(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    validate = _validator(world, shipped, tmp_path, ssm_command_timeout_s=5400)
    nodes = [Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5"), Node("i-0aaaaaaaaaaaaaaa2", "10.0.0.6")]
    assert validate(nodes, PROFILE)
    sent = world.fake.operations("SendCommand")
    assert [s["InstanceIds"] for s in sent] == [[n.instance_id] for n in nodes]
    assert {s["DocumentName"] for s in sent} == {"AWS-RunShellScript"}
    [invocation, _] = run_command.invocations
    assert invocation.execution_timeout == "5400"
    script = "\n".join(invocation.commands)
    # the node tools' Python runs the suite; the bundle comes by presigned URL, no AWS CLI
    assert 'cd "$dir" && /opt/nodeforge/tools/bin/python -I -c ' in script
    assert "from nodeforge.remote_suite import main" in script
    assert "X-Amz-Signature=" in script and "aws s3" not in script
    assert invocation.run["stage"] == "target"
    assert sorted(invocation.run["reports"]) == sorted(remote_suite.report_names("target"))
    assert all("X-Amz-Signature=" in url for url in invocation.run["reports"].values())
    # the reports the node uploaded are the runner's now, per instance; S3 keeps nothing
    for node in nodes:
        report_file = tmp_path / PROFILE / node.instance_id / "validation-target.json"
        assert json.loads(report_file.read_text())["ok"] is True
    assert (tmp_path / PROFILE / "vars.json").is_file()
    assert _keys(world) == []


def test_the_bundle_holds_the_suite_its_imports_and_the_vars(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    validate = _validator(world, shipped, tmp_path)
    validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)
    [invocation] = run_command.invocations
    names = set(invocation.files)
    assert {"src/nodeforge/remote_suite.py", "src/nodeforge/report.py"} <= names
    assert {"validation/conftest.py", "validation/scripts/gpu_bench.py"} <= names
    for module in ("pytest/__init__.py", "_pytest/main.py", "testinfra/plugin.py", "pluggy/"):
        assert any(n.startswith(f"site/{module}") for n in names), module
    # testinfra's pytest plugin is found through its entry point: the metadata travels too
    assert any(
        n.startswith("site/pytest_testinfra-") and n.endswith("entry_points.txt") for n in names
    )
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert invocation.vars["nodeforge"]["image"] == IMAGE
    # each framework lock travels with the bundle, named relative to it
    environments = invocation.vars["python_ml_environments"]
    assert environments
    for environment in environments:
        assert environment["lock"] == f"locks/{environment['name']}.txt"
        assert invocation.files[environment["lock"]].startswith(b"#")


def test_node_vars_leave_the_render_unchanged() -> None:
    document = {"python_ml_environments": [{"name": "train", "lock": "/catalog/locks/t.txt"}]}
    on_node, carried = node_vars(document)
    assert on_node["python_ml_environments"] == [{"name": "train", "lock": "locks/train.txt"}]
    assert carried == {"locks/train.txt": Path("/catalog/locks/t.txt")}
    assert document["python_ml_environments"][0]["lock"] == "/catalog/locks/t.txt"


def test_the_bundle_is_the_same_for_the_same_inputs() -> None:
    run = {"stage": "target", "reports": {}}
    first, second = bundle({"a": 1}, run), bundle({"a": 1}, run)
    assert first == second
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert json.loads(archive.read("run.json")) == run


def test_a_failed_check_fails_the_node(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    run_command.node = lambda _i: Ended("Failed", remote_suite.EXIT_FAILED, reports=report(False))
    validate = _validator(world, shipped, tmp_path)
    assert not validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)
    assert _keys(world) == []


def test_a_node_without_the_tools_environment_fails_as_the_image(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    missing = "nodeforge: /opt/nodeforge/tools/bin/python is missing"
    run_command.node = lambda _i: Ended("Failed", EXIT_NO_PYTHON, output=missing)
    validate = _validator(world, shipped, tmp_path)
    assert not validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)


@pytest.mark.parametrize(
    ("ended", "said"),
    [
        (Ended("TimedOut", -1, "DeliveryTimedOut"), "ended TimedOut (DeliveryTimedOut)"),
        (Ended("Failed", -1, "Undeliverable"), "ended Failed (Undeliverable)"),
        (Ended("Cancelled", -1, "Terminated"), "ended Cancelled (Terminated)"),
        (Ended("TimedOut", -1, "ExecutionTimedOut"), "ExecutionTimedOut"),
        (Ended("Failed", EXIT_NO_BUNDLE, output="urlopen error timed out"), "fetch the suite"),
        (Ended("Failed", remote_suite.EXIT_NOT_UPLOADED), "upload its reports"),
        (Ended("Success", 0), "no readable report reached S3"),
        (Ended(reports={"validation-target.json": '{"ok": tr'}), "no readable report reached S3"),
    ],
)
def test_what_judged_nothing_is_infrastructure(
    world: World, run_command: FakeRunCommand, validator: Any, ended: Ended, said: str
) -> None:
    run_command.node = lambda _i: ended
    validate = validator()
    with pytest.raises(InstanceUnreachableError, match=re.escape(said)):
        validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)
    assert _keys(world) == []


def test_a_suite_that_did_not_run_is_an_error_not_a_verdict(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    log = {"validation-target.log": "ERROR: usage: pytest [options]"}
    run_command.node = lambda _i: Ended(
        "Failed", remote_suite.EXIT_NOT_RUN, output="the validation suite did not run", reports=log
    )
    validate = _validator(world, shipped, tmp_path)
    with pytest.raises(InputError, match="did not run on i-0aaaaaaaaaaaaaaa1") as error:
        validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)
    assert error.value.file == tmp_path / PROFILE / "i-0aaaaaaaaaaaaaaa1" / "validation-target.log"


def test_an_instance_that_never_comes_online_is_infrastructure(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    run_command.online = set()
    validate = _validator(world, shipped, tmp_path, ssm_online_timeout_s=30)
    with pytest.raises(InstanceUnreachableError, match="not Online in Systems Manager after 30 s"):
        validate([Node("i-0aaaaaaaaaaaaaaa1", "10.0.0.5")], PROFILE)
    assert world.fake.operations("SendCommand") == []


def test_promote_over_ssm_publishes_and_keeps_infrastructure_apart(
    world: World, shipped: Catalog, run_command: FakeRunCommand, tmp_path: Path
) -> None:
    iam = world.session.client("iam")
    iam.create_instance_profile(InstanceProfileName=SSM["iam_instance_profile"])
    clients = world.clients(**SSM)
    profiles = [shipped.profiles[PROFILE]]
    clock = FakeClock().clock()
    validate = ssm_validator(clients, shipped, IMAGE, report_root=tmp_path, clock=clock)
    result = promote(
        clients, image=IMAGE, ami_id=world.ami_id, profiles=profiles, validate=validate, clock=clock
    )
    assert result.status == "published"
    [launch] = world.fake.operations("RunInstances")
    assert launch["IamInstanceProfile"] == {"Name": "nodeforge-validation"}
    [invocation] = run_command.invocations
    assert invocation.instance_id == result.runs[0].instances[0]

    other, _ = world.make_ami("p5-ubuntu24.04-unreachable")
    run_command.online = set()
    result = promote(
        clients, image=IMAGE, ami_id=other, profiles=profiles, validate=validate, clock=clock
    )
    assert result.status == "infrastructure-failed"
    assert world.image_tags(other)[tags.STATUS] == "built"
    assert world.live_instances() == []


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"ssm_bucket": BUCKET}, "needs iam_instance_profile"),
        ({"iam_instance_profile": "v"}, "needs ssm_bucket"),
        ({**SSM, "multinode": True}, "multinode validation runs over ssh only"),
    ],
)
def test_ssm_settings_are_refused_incomplete(settings: dict[str, Any], said: str) -> None:
    base = {
        "region": REGION,
        "subnet_id": "subnet-0123456789abcdef0",
        "security_group_ids": ["sg-0123456789abcdef0"],
        "validation_transport": "ssm",
    }
    with pytest.raises(ValueError, match=said):
        PipelineConfig.model_validate(base | settings)


def test_the_node_runner_uploads_what_the_suite_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nodeforge.remote_suite itself: the reports of a run PUT to their URLs, exit 1 on a fail."""
    uploaded: dict[str, bytes] = {}

    def run_validation(*, report_dir: Path, stage: str, **_: Any) -> Any:
        for name, text in report(False, stage).items():
            report_dir.mkdir(parents=True, exist_ok=True)
            (report_dir / name).write_text(text)

        class Run:
            ok = False

            def summary(self) -> str:
                return "1 failed"

        return Run()

    monkeypatch.setattr("nodeforge.remote_suite.run_validation", run_validation)
    monkeypatch.setattr(
        "nodeforge.remote_suite.upload", lambda path, url: uploaded.update({url: path.read_bytes()})
    )
    names = remote_suite.report_names("target")
    (tmp_path / "run.json").write_text(
        json.dumps({"stage": "target", "reports": {n: f"https://put/{n}" for n in names}})
    )
    assert remote_suite.main([str(tmp_path / "run.json")]) == remote_suite.EXIT_FAILED
    assert sorted(uploaded) == sorted(f"https://put/{n}" for n in names)
