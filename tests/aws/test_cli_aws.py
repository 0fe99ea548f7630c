"""`nodeforge promote`, `reap` and `prune`: exit codes, output, and bad input."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from moto.ec2.models import ec2_backends

from nodeforge.aws import tags
from nodeforge.aws.pipeline import Node
from nodeforge.cli import main
from tests.aws.conftest import ACCOUNT, IMAGE, REGION, World, failure
from tests.conftest import SHIPPED


@pytest.fixture
def config_file(world: World, tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yml"
    path.write_text(
        "region: us-east-1\n"
        f"subnet_id: {world.subnet_id}\n"
        f"security_group_ids: [{world.security_group_id}]\n"
        "share_accounts: ['111122223333']\n"
        "poll_interval_s: 0\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def verdict(world: World, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the fake validator answers, and the hosts it was given."""
    state: dict[str, Any] = {"ok": True, "hosts": []}

    def validator(*_args: Any, **_kwargs: Any) -> Any:
        def validate(nodes: Sequence[Node], _profile: str) -> bool:
            state["hosts"] += [node.address for node in nodes]
            return bool(state["ok"])

        return validate

    monkeypatch.setattr("nodeforge.commands.aws.aws_session", lambda _region: world.session)
    monkeypatch.setattr("nodeforge.commands.aws.ssh_validator", validator)
    return state


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _promote(
    capsys: pytest.CaptureFixture[str], world: World, config: Path, *extra: str
) -> tuple[int, str, str]:
    return _run(
        capsys,
        "promote",
        IMAGE,
        "--catalog",
        str(SHIPPED),
        "--ami",
        world.ami_id,
        "--config",
        str(config),
        "--profile",
        "p5.48xlarge",
        *extra,
    )


def test_promote_published_exit_0_json(
    capsys: pytest.CaptureFixture[str], world: World, config_file: Path, verdict: dict[str, Any]
) -> None:
    code, out, err = _promote(capsys, world, config_file, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["status"] == "published"
    assert report["ssm_parameters"] == [f"/nodeforge/{IMAGE}/p5.48xlarge/ami-id"]
    assert report["profiles"][0]["hosts"] == verdict["hosts"]
    assert "p5.48xlarge: launching 1 instance(s)" in err
    assert "terminating i-" in err


def test_promote_failed_exit_1_human(
    capsys: pytest.CaptureFixture[str], world: World, config_file: Path, verdict: dict[str, Any]
) -> None:
    verdict["ok"] = False
    code, out, err = _promote(capsys, world, config_file)
    assert code == 1
    assert out.startswith(f"failed   {world.ami_id} ({IMAGE}) in us-east-1\n")
    assert "p5.48xlarge  1      failed" in out
    assert "ssm" not in out
    assert "deprecating" in err


def test_promote_aws_failure_exit_1_one_line(
    capsys: pytest.CaptureFixture[str], world: World, config_file: Path, verdict: dict[str, Any]
) -> None:
    world.session.events.register(
        "before-call.ec2.DescribeImages",
        lambda **_: failure("UnauthorizedOperation", "You are not authorized"),
    )
    code, out, err = _promote(capsys, world, config_file)
    assert code == 1
    assert out == ""
    assert err.startswith("nodeforge: promote failed: promoting ami-")
    assert "Grant the caller docs/iam-policy.json" in err
    assert verdict["hosts"] == []


@pytest.mark.usefixtures("verdict")
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the file"),
        ("region: [us-east-1\n", "invalid YAML"),
        ("region: us-east-1\nsecurity_group_ids: [sg-0123456789abcdef0]\n", "'subnet_id'"),
        (
            "region: us-east-1\nsubnet_id: subnet-0123456789abcdef0\n"
            "security_group_ids: [sg-0123456789abcdef0]\nshare_acounts: ['111122223333']\n",
            "field 'share_acounts': unknown key",
        ),
        (
            "region: us-east-1\nsubnet_id: subnet-0123456789abcdef0\n"
            "security_group_ids: [sg-0123456789abcdef0]\nshare_accounts: ['1234']\n",
            "pipeline.yml:4: field 'share_accounts.0'",
        ),
        ("- just\n- a list\n", "expected a mapping of pipeline settings"),
        (
            '{"region": "us-east-1", "subnet_id": "subnet-0123456789abcdef0", '
            '"security_group_ids": ["sg-0123456789abcdef0"], "copy_regions": ["us-east-1"]}',
            "copy_regions lists the home region us-east-1",
        ),
    ],
)
def test_bad_config_exit_2_names_file_and_field(
    capsys: pytest.CaptureFixture[str],
    world: World,
    tmp_path: Path,
    content: str | None,
    expected: str,
) -> None:
    path = tmp_path / "pipeline.yml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, out, err = _promote(capsys, world, path)
    assert code == 2
    assert out == ""
    assert err.startswith(f"nodeforge: error: {path}")
    assert expected in err
    assert err.count("\n") == 1
    assert world.fake.operations("RunInstances") == []


@pytest.mark.usefixtures("verdict")
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--ami", "i-123"), "field '--ami': 'i-123' is not an AMI id"),
        (("--ami", "ami-0123456789abcdef0"), "does not exist in us-east-1"),
        (("--profile", "p6-b200.48xlarge"), "is not a target of image"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str],
    world: World,
    config_file: Path,
    argv: tuple[str, ...],
    expected: str,
) -> None:
    code, _, err = _promote(capsys, world, config_file, *argv)
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1


@pytest.mark.usefixtures("verdict")
def test_prune_dry_run_then_for_real(
    capsys: pytest.CaptureFixture[str], world: World, config_file: Path
) -> None:
    old, _ = world.make_ami(f"{IMAGE}-old", status="validated")
    new, _ = world.make_ami(f"{IMAGE}-new", status="validated")
    for day, ami in enumerate((old, new), start=1):
        ec2_backends[ACCOUNT][REGION].amis[ami].creation_date = datetime(2026, 11, day)
    argv = ("prune", IMAGE, "--keep", "1", "--config", str(config_file))
    code, out, _ = _run(capsys, *argv, "--dry-run")
    assert code == 0
    assert f"{IMAGE}: would deprecate 1, kept 2" in out
    assert "status built: not judged yet" in out.replace("(untagged)", "built")
    # deprecated first (7 days by default) ...
    code, out, err = _run(capsys, *argv)
    assert code == 0
    assert f"{IMAGE}: deprecated 1, kept 2" in out
    assert f"deprecating {old}" in err
    assert old in world.fake.deprecated
    # ... due once it has been deprecated long enough; shared, it waits for a usage report ...
    code, out, err = _run(capsys, *argv, "--deprecated-for", "0", "--json")
    assert code == 0
    [asked] = [a for a in json.loads(out)["amis"] if a["ami"] == old]
    assert (asked["action"], asked["usage_report"]) == ("keep", True)
    assert f"asking EC2 which accounts use {old}" in err
    # ... and goes once the report shows no other account launches it
    [report] = world.fake.usage_reports
    assert report["ImageId"] == old
    report["State"] = "available"
    code, out, err = _run(capsys, *argv, "--deprecated-for", "0", "--json")
    assert code == 0
    deleted = [a["ami"] for a in json.loads(out)["amis"] if a["action"] == "delete"]
    assert deleted == [old]
    assert f"deregistering {old}" in err


@pytest.mark.usefixtures("verdict")
def test_prune_keep_0_exit_2(capsys: pytest.CaptureFixture[str], config_file: Path) -> None:
    code, _, err = _run(capsys, "prune", IMAGE, "--keep", "0", "--config", str(config_file))
    assert code == 2
    assert "field '--keep'" in err


@pytest.mark.usefixtures("verdict")
def test_reap_ends_an_abandoned_run(
    capsys: pytest.CaptureFixture[str], world: World, config_file: Path
) -> None:
    run_tags = {tags.RUN_ID: "run-9", tags.TTL: "2026-12-01T00:00:00Z", tags.IMAGE: IMAGE}
    instance = world.ec2.run_instances(
        ImageId=world.ami_id,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags.tag_list(run_tags)}],
    )["Instances"][0]["InstanceId"]
    argv = ("reap", IMAGE, "--config", str(config_file))
    code, out, _ = _run(capsys, *argv, "--dry-run")
    assert code == 0
    assert f"{IMAGE} in {REGION}: would end 1 of 1" in out
    assert world.live_instances() == [instance]
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0
    [found] = json.loads(out)["found"]
    assert (found["name"], found["action"]) == (instance, "terminate")
    assert f"terminating {instance}" in err
    assert world.live_instances() == []
