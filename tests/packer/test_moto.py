"""End to end against a fake AWS account: nodeforge resolves the base AMI from SSM, the double
registers the AMI in the same moto server, and the AMI carries the template's tags."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from nodeforge.catalog.loader import load_catalog
from nodeforge.packer.build import build_amis
from nodeforge.target import target_for
from tests.conftest import Edit
from tests.moto_server import moto_endpoint as served_moto
from tests.packer.conftest import DOUBLE, Calls

# moto refuses to store parameters under the reserved /aws/ prefix, so the test OS entry
# points at a parameter of its own.
PARAMETER = "/nodeforge/test/ubuntu/24.04/amd64/ami-id"


@pytest.fixture
def moto_endpoint(calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """After `calls` (which clears AWS_ENDPOINT_URL for the other tests)."""
    del calls
    with served_moto(monkeypatch) as endpoint:
        # the double's `#!/usr/bin/env python3` must find this venv's python (it has boto3)
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        yield endpoint


@pytest.mark.usefixtures("moto_endpoint")
def test_build_registers_a_tagged_ami(edit: Edit, catalog_dir: Path, tmp_path: Path) -> None:
    def own_parameter(doc: dict[str, dict[str, dict[str, dict[str, str]]]]) -> None:
        doc["architectures"]["x86_64"]["source_ami"]["ssm_parameter"] = PARAMETER

    edit("os/ubuntu24.04.yml", own_parameter)
    catalog = load_catalog(catalog_dir)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    base = "ami-0aaaaaaaaaaaaaaaa"
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name=PARAMETER, Value=base, Type="String"
    )

    [result] = build_amis(
        catalog,
        [target_for(catalog, "p5-ubuntu24.04", "p5.48xlarge")],
        work_dir=tmp_path / "work",
        progress=lambda _line: None,
        packer=str(DOUBLE),
    )

    ami = result.amis["us-east-1"]
    assert ami != "ami-0123456789abcdef0"  # the double's fixed id: no AMI was registered
    [image] = ec2.describe_images(ImageIds=[ami])["Images"]
    tags = {t["Key"]: t["Value"] for t in image.get("Tags", [])}
    assert tags["nodeforge:image"] == "p5-ubuntu24.04"
    assert tags["nodeforge:stack"] == "hopper-2026.12"
    assert tags["nodeforge:status"] == "built"
    assert tags["nodeforge:driver"] == "595.91.07 open"
    assert tags["nodeforge:source-ami-lookup"] == PARAMETER
    assert image["Name"] == tags["Name"]
    assert image["Name"].startswith("nodeforge-p5-ubuntu24.04-hopper-2026.12-")
    var_file = Path(result.regions["us-east-1"].var_file).read_text()
    assert f'"source_ami": "{base}"' in var_file
