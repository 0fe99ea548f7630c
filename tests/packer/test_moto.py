"""End to end against a fake AWS account: nodeforge resolves the base AMI from SSM, the double
registers the AMI in the same moto server, and the AMI carries the template's tags."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from nodeforge.catalog.loader import load_catalog
from nodeforge.packer.build import build_amis
from nodeforge.target import target_for
from tests.conftest import Edit
from tests.packer.conftest import DOUBLE, Calls

# moto refuses to store parameters under the reserved /aws/ prefix, so the test OS entry
# points at a parameter of its own.
PARAMETER = "/nodeforge/test/ubuntu/24.04/amd64/ami-id"


@pytest.fixture
def moto_endpoint(calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """After `calls` (which clears AWS_ENDPOINT_URL for the other tests)."""
    del calls
    # moto's catalogue of public AMIs takes seconds to load and nothing here needs it
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto's backends live in this process: a test that ran before in the same worker (pytest
    # -n) may have left the parameter or AMIs behind
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # the double's `#!/usr/bin/env python3` must find this venv's python (it has boto3)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield endpoint
    server.stop()


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
