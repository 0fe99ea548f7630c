from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeforge.cli import main
from tests.conftest import SHIPPED, Edit


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_all_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", "--catalog", str(SHIPPED))
    assert code == 0
    assert "11 targets checked: 0 error(s)" in out


def test_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", "--catalog", str(SHIPPED), "--json", "p6-ubuntu24.04")
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True
    assert {t["profile"] for t in report["targets"]} == {"p6-b200.48xlarge", "p6-b300.48xlarge"}
    assert {r["id"] for r in report["rules"]} >= {"driver-floor", "known-bad"}


def test_check_violation_exit_1_names_rule_and_fix(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path
) -> None:
    def cu126(data: dict[str, Any]) -> None:
        data["frameworks"]["pytorch"] = {"version": "2.15.0", "variant": "cu126"}

    edit("stacks/blackwell-2026.12.yml", cu126)
    code, out, _ = _run(capsys, "check", "--catalog", str(catalog_dir), "p6-ubuntu24.04")
    assert code == 1
    assert "ERROR [torch-sm] p6-ubuntu24.04 / p6-b200.48xlarge" in out
    assert "fix: use a variant that covers it" in out


def test_check_unverified_artifact(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path
) -> None:
    def strip(data: dict[str, Any]) -> None:
        data["artifacts"]["efa_installer"].pop("gpg_fingerprint")

    edit("stacks/hopper-2026.12.yml", strip)
    code, out, _ = _run(capsys, "check", "--catalog", str(catalog_dir), "p5-ubuntu24.04")
    assert code == 1
    assert "[artifact-unverified]" in out
    code, out, _ = _run(
        capsys, "check", "--catalog", str(catalog_dir), "--allow-unverified", "p5-ubuntu24.04"
    )
    assert code == 0
    assert "WARNING [artifact-unverified]" in out


def test_bad_input_exit_2_one_paragraph(
    capsys: pytest.CaptureFixture[str], catalog_dir: Path
) -> None:
    (catalog_dir / "os" / "debian12.yml").write_text("name: debian12\nversion: [\n")
    code, out, err = _run(capsys, "check", "--catalog", str(catalog_dir))
    assert code == 2
    assert out == ""
    assert err.startswith("nodeforge: error: ")
    assert "debian12.yml:" in err
    assert err.count("\n") == 1


def test_unknown_image_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "check", "--catalog", str(SHIPPED), "p9-ubuntu")
    assert code == 2
    assert "unknown image 'p9-ubuntu'" in err and "local-debian13" in err


def test_usage_error_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["list", "everything"])
    assert info.value.code == 2


def test_render_to_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    output = tmp_path / "out" / "vars.json"
    code, out, _ = _run(
        capsys, "render", "--catalog", str(SHIPPED), "local-debian13", "-o", str(output)
    )
    assert code == 0
    assert "wrote" in out
    doc = json.loads(output.read_text())
    assert doc["nodeforge"]["image"] == "local-debian13"
    assert doc["nodeforge_manifest_path"] == "/etc/nodeforge/manifest.json"
    assert not list(output.parent.glob("*.tmp"))


def test_render_refuses_failing_target(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path, tmp_path: Path
) -> None:
    edit("stacks/blackwell-2026.12.yml", lambda d: d["driver"].update(flavour="proprietary"))
    output = tmp_path / "vars.json"
    code, _, err = _run(
        capsys,
        "render",
        "--catalog",
        str(catalog_dir),
        "p6-ubuntu24.04",
        "--profile",
        "p6-b200.48xlarge",
        "-o",
        str(output),
    )
    assert code == 1
    assert "[open-modules]" in err
    assert not output.exists()


@pytest.mark.parametrize("kind", ["images", "stacks", "profiles", "os"])
def test_list(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    code, out, _ = _run(capsys, "list", kind, "--catalog", str(SHIPPED))
    assert code == 0
    assert len(out.splitlines()) > 3
    code, out, _ = _run(capsys, "list", kind, "--catalog", str(SHIPPED), "--json")
    assert code == 0 and isinstance(json.loads(out), list)


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "show", "gb200-ubuntu24.04-arm64", "--catalog", str(SHIPPED))
    assert code == 0
    assert "blackwell-2026.12" in out and "p6e-gb200.36xlarge" in out
    # each Python environment: its own torch, its frameworks, its lock for the image's arch
    serve = next(line for line in out.splitlines() if line.startswith("env serve"))
    assert serve.split()[2:] == [
        "torch", "2.14.0", "cu130,", "vllm", "0.33.0", "locks/blackwell-2026.12/serve-arm64.txt"
    ]  # fmt: skip
    code, out, _ = _run(capsys, "show", "p5-ubuntu24.04", "--catalog", str(SHIPPED), "--json")
    assert json.loads(out)["stack"]["name"] == "hopper-2026.12"


def test_matrix_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "matrix", "--catalog", str(SHIPPED), "--json")
    assert code == 0
    rows = json.loads(out)
    assert {r["instance type"] for r in rows} == {
        p.stem for p in (SHIPPED / "profiles").glob("*.yml")
    }
    assert next(r for r in rows if r["instance type"] == "p4d.24xlarge")["check"] == "no image"


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "compat.yml").write_text("sources: [x]\ndriver_cuda: oops\n")
    result = subprocess.run(
        [sys.executable, "-m", "nodeforge.cli", "check", "--catalog", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "compat.yml" in result.stderr and "driver_cuda" in result.stderr


# ---------------------------------------------------------------- build --target aws

DOUBLE = Path(__file__).resolve().parent / "packer" / "double" / "packer"


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any AWS call would fail: nothing listens on the discard port, and there are no
    credentials; the double packer runs without its call log or faults."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "NODEFORGE_PACKER_DOUBLE_", "NODEFORGE_VALIDATION_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_SHELL_LOCAL", "skip")


def _pipeline_config(tmp_path: Path, region: str = "us-east-1", extra: str = "") -> Path:
    path = tmp_path / "pipeline.yml"
    path.write_text(
        f"region: {region}\nsubnet_id: subnet-0123456789abcdef0\n"
        f"security_group_ids: [sg-0123456789abcdef0]\n{extra}",
        encoding="utf-8",
    )
    return path


@pytest.mark.usefixtures("no_aws")
def test_build_aws_dry_run_prints_the_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _run(
        capsys,
        *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(SHIPPED)),
        *("--dry-run", "--packer", "/nowhere/packer", "--work-dir", str(tmp_path)),
        *("--region", "us-east-1", "us-west-2"),
    )
    assert code == 0, err
    lines = out.splitlines()
    var_file = tmp_path / "p5-ubuntu24.04" / "us-west-2.pkrvars.json"
    assert lines[0].startswith("/nowhere/packer init -machine-readable ")
    assert f"/nowhere/packer build -machine-readable -var-file={var_file} " in out
    assert len(lines) == 5  # init, validate x2, build x2
    assert var_file.exists()
    # no pipeline config: the builder's network is Packer's default
    assert "subnet_id" not in json.loads(var_file.read_text(encoding="utf-8"))
    assert not list(tmp_path.glob("p5-ubuntu24.04/*.log"))


@pytest.mark.usefixtures("no_aws")
def test_build_aws_with_config_places_the_builder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    builder = (
        "builder:\n  ssh_interface: private_ip\n  iam_instance_profile: nodeforge-builder\n"
        "  associate_public_ip_address: false\n"
        "  temporary_security_group_source_cidrs: [10.0.0.0/8]\n"
    )
    config = _pipeline_config(tmp_path, region="eu-west-1", extra=builder)
    code, out, err = _run(
        capsys,
        *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(SHIPPED)),
        *("--dry-run", "--packer", "/nowhere/packer", "--work-dir", str(tmp_path)),
        *("--promote", "--config", str(config)),
    )
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 4  # init, validate, build, then promote
    assert lines[-1].startswith("# then: validate the eu-west-1 AMI on p5.48xlarge, p5e.48xl")
    # the config's region, not the image's build.region, and the builder where the config says
    values = json.loads((tmp_path / "p5-ubuntu24.04" / "eu-west-1.pkrvars.json").read_text())
    assert values["region"] == "eu-west-1"
    assert values["subnet_id"] == "subnet-0123456789abcdef0"  # the pipeline's, by default
    assert values["ssh_interface"] == "private_ip"
    assert values["iam_instance_profile"] == "nodeforge-builder"
    assert values["associate_public_ip_address"] is False
    assert values["temporary_security_group_source_cidrs"] == ["10.0.0.0/8"]
    assert "security_group_ids" not in values  # Packer's temporary group
    assert not (tmp_path / "p5-ubuntu24.04" / "us-east-1.pkrvars.json").exists()


@pytest.mark.usefixtures("no_aws")
def test_build_aws_dry_run_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(
        capsys,
        *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(SHIPPED)),
        *("--profile", "p5en.48xlarge", "--dry-run", "--work-dir", str(tmp_path), "--json"),
    )
    assert code == 0
    report = json.loads(out)
    assert report["build"]["dry_run"] is True
    assert report["build"]["profile"] == "p5en.48xlarge"
    assert [c.split()[1] for c in report["build"]["commands"]] == ["init", "validate", "build"]
    assert "promote" not in report


@pytest.mark.usefixtures("no_aws")
def test_build_aws_human_output(
    capsys: pytest.CaptureFixture[str],
    edit: Edit,
    catalog_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the source AMI lookup goes to mock_aws; the double, without an endpoint, registers nothing
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    parameter = "/nodeforge/test/ubuntu/24.04/amd64/ami-id"  # moto refuses names under /aws/
    edit(
        "os/ubuntu24.04.yml",
        lambda d: d["architectures"]["x86_64"]["source_ami"].update(ssm_parameter=parameter),
    )
    with mock_aws():
        boto3.client("ssm", region_name="us-east-1").put_parameter(
            Name=parameter, Value="ami-0aaaaaaaaaaaaaaaa", Type="String"
        )
        code, out, err = _run(
            capsys,
            *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(catalog_dir)),
            *("--profile", "p5.48xlarge", "--packer", str(DOUBLE), "--work-dir", str(tmp_path)),
        )
    assert code == 0, err
    log = tmp_path / "p5-ubuntu24.04" / "packer-build-us-east-1.log"
    assert (
        out.splitlines()[0] == "built    p5-ubuntu24.04 (stack hopper-2026.12, vars of p5.48xlarge)"
    )
    assert f"us-east-1  ami-0123456789abcdef0  {log}" in out  # the double's AMI without moto
    assert "Creating AMI nodeforge-p5-ubuntu24.04-hopper-2026.12-" in err  # progress
    assert log.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--target", "local", "--region", "us-east-1", "--dry-run"],
            "--region and --dry-run only work with",
        ),
        (["--target", "local", "--promote"], "field '--promote'"),
        (["--target", "aws", "--reconverge"], "--reconverge only works with --target local"),
        (["--target", "aws", "--promote"], "--promote needs the pipeline settings"),
    ],
)
def test_build_option_that_does_not_fit_the_target_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = _run(capsys, "build", "p5-ubuntu24.04", "--catalog", str(SHIPPED), *argv)
    assert code == 2
    assert out == ""
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.usefixtures("no_aws")
def test_build_promote_checks_the_config_before_building(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = _pipeline_config(tmp_path, region="eu-west-1")
    code, _, err = _run(
        capsys,
        *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(SHIPPED)),
        *("--promote", "--config", str(config), "--work-dir", str(tmp_path)),
        *("--region", "eu-west-1", "us-east-1"),
    )
    assert code == 2
    assert "field '--region': with --config the AMI is built in the config's region" in err
    assert "asks for us-east-1 too" in err
    assert "copy_regions" in err
    assert not (tmp_path / "p5-ubuntu24.04").exists()


@pytest.mark.parametrize(
    ("endpoint", "stand_in", "message"),
    [
        (None, '{"hosts": "podman://x", "image": "local-debian13"}', "AWS_ENDPOINT_URL is unset"),
        (
            "https://ec2.us-east-1.amazonaws.com",
            '{"hosts": "podman://x", "image": "local-debian13"}',
            "not a loopback endpoint",
        ),
        ("http://127.0.0.1:9", '{"hosts": "podman://x"}', "image: Field required"),
        ("http://127.0.0.1:9", "podman://x", "not JSON"),
    ],
)
@pytest.mark.usefixtures("no_aws")
def test_validation_stand_in_only_against_a_loopback_fake(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    endpoint: str | None,
    stand_in: str,
    message: str,
) -> None:
    if endpoint is None:
        monkeypatch.delenv("AWS_ENDPOINT_URL")
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("NODEFORGE_VALIDATION_STAND_IN", stand_in)
    code, _, err = _run(
        capsys,
        *("build", "p5-ubuntu24.04", "--target", "aws", "--catalog", str(SHIPPED), "--dry-run"),
        *("--promote", "--config", str(_pipeline_config(tmp_path)), "--work-dir", str(tmp_path)),
    )
    assert code == 2
    assert "field 'NODEFORGE_VALIDATION_STAND_IN'" in err
    assert message in err
