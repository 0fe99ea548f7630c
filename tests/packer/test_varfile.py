from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.errors import InputError
from nodeforge.packer.rules import VarFile, check_template
from nodeforge.packer.template import load_template
from nodeforge.packer.varfile import packer_vars, write_var_file
from nodeforge.target import target_for
from tests.conftest import Edit

NOW = datetime(2026, 12, 2, 10, 30, 5, tzinfo=UTC)


def _vars(catalog: Catalog, image: str, tmp_path: Path, **kw: str) -> dict[str, object]:
    target = target_for(catalog, image, None if image.startswith("gb200") else "p5.48xlarge")
    values = packer_vars(
        target,
        catalog_file=catalog.file_of("os", target.os.name),
        region=kw.get("region", target.image.build.region),
        vars_path=tmp_path / "vars.json",
        manifest_path=tmp_path / "manifest.json",
        builder_check=["python3", "-m", "nodeforge.packer.builder_check"],
        now=NOW,
        source_ami=kw.get("source_ami"),
    )
    path = write_var_file(tmp_path / "x.pkrvars.json", values)
    written: dict[str, object] = json.loads(path.read_text())
    assert check_template(load_template(), VarFile(path, written)) == []
    return written


def test_p5(shipped: Catalog, tmp_path: Path) -> None:
    values = _vars(shipped, "p5-ubuntu24.04", tmp_path, source_ami="ami-0aaaaaaaaaaaaaaaa")
    assert values["region"] == "us-east-1"
    assert values["instance_type"] == "c6i.4xlarge"
    assert values["source_ami"] == "ami-0aaaaaaaaaaaaaaaa"
    assert values["source_ami_architecture"] == "x86_64"
    assert "source_ami_name_filter" not in values and "kms_key_id" not in values
    assert values["volume_size_gib"] == 150
    assert (values["root_device"], values["ssh_username"]) == ("/dev/sda1", "ubuntu")
    assert values["vars_file"] == str((tmp_path / "vars.json").resolve())
    assert values["ami_name"] == "nodeforge-p5-ubuntu24.04-hopper-2026.12-20261202T103005Z"
    tags = values["tags"]
    assert isinstance(tags, dict)
    assert tags["nodeforge:driver"] == "595.91.07 open"
    assert tags["nodeforge:cuda"] == "13.2.2"
    assert tags["nodeforge:nccl"] == "2.30.7-1"
    assert tags["nodeforge:efa-installer"] == "1.51.0"
    assert tags["nodeforge:pytorch"] == "2.15.0+cu132"
    assert tags["nodeforge:source-ami-lookup"].endswith("/amd64/hvm/ebs-gp3/ami-id")
    assert tags["nodeforge:layers"].split()[0] == "base"
    assert all(len(k) <= 128 and len(v) <= 256 for k, v in tags.items())


def test_gb200_arm64(shipped: Catalog, tmp_path: Path) -> None:
    values = _vars(shipped, "gb200-ubuntu24.04-arm64", tmp_path, source_ami="ami-0bbbbbbbbbbbbbbbb")
    assert values["instance_type"] == "c7g.4xlarge"
    assert values["source_ami_architecture"] == "arm64"
    tags = values["tags"]
    assert isinstance(tags, dict)
    assert tags["nodeforge:arch"] == "arm64"
    assert "/arm64/hvm/" in tags["nodeforge:source-ami-lookup"]
    assert tags["nodeforge:profiles"] == "p6e-gb200.36xlarge"


def test_name_filter_os(edit: Edit, catalog_dir: Path, tmp_path: Path) -> None:
    def by_filter(doc: dict[str, object]) -> None:
        arches = doc["architectures"]
        assert isinstance(arches, dict)
        arches["x86_64"]["source_ami"] = {
            "owners": ["099720109477"],
            "name_filter": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
            "source": "test",
        }

    edit("os/ubuntu24.04.yml", by_filter)
    values = _vars(load_catalog(catalog_dir), "p5-ubuntu24.04", tmp_path, source_ami="ami-0c")
    assert "source_ami" not in values
    assert values["source_ami_owners"] == ["099720109477"]
    assert (
        values["source_ami_name_filter"]
        == "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
    )


def test_os_without_the_arch(edit: Edit, catalog_dir: Path, tmp_path: Path) -> None:
    edit("os/ubuntu24.04.yml", lambda d: d["architectures"].pop("arm64"))
    with pytest.raises(InputError) as caught:
        _vars(load_catalog(catalog_dir), "gb200-ubuntu24.04-arm64", tmp_path)
    assert caught.value.field == "architectures.arm64"
    assert caught.value.file == catalog_dir / "os" / "ubuntu24.04.yml"


def test_gp3_settings_of_the_image_reach_the_builder_volume(
    edit: Edit, catalog_dir: Path, tmp_path: Path
) -> None:
    def fast(doc: dict[str, dict[str, object]]) -> None:
        doc["build"].update(volume_iops=8000, volume_throughput_mibps=1000)

    edit("p5-ubuntu24.04.yml", fast)
    values = _vars(load_catalog(catalog_dir), "p5-ubuntu24.04", tmp_path, source_ami="ami-0c")
    assert (values["volume_iops"], values["volume_throughput_mibps"]) == (8000, 1000)


def test_without_gp3_settings_packer_keeps_gp3_s_baseline(shipped: Catalog, tmp_path: Path) -> None:
    values = _vars(shipped, "p5-ubuntu24.04", tmp_path, source_ami="ami-0c")
    assert "volume_iops" not in values and "volume_throughput_mibps" not in values
    assert "subnet_id" not in values  # no pipeline config: Packer's default VPC
