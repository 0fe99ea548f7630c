"""With a real Packer (>= 1.14.1) on PATH: `packer init` and `packer validate` accept the shipped
templates with a var file nodeforge wrote. Skipped elsewhere (no modern Packer installs on the
test machines). `packer init` downloads the pinned plugins, so it needs GitHub."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from nodeforge.packer.runner import Children, Runner, check_version, init_command, validate_command
from nodeforge.packer.template import TEMPLATE_DIR
from nodeforge.packer.varfile import packer_vars, write_var_file
from nodeforge.paths import REPO_ROOT
from nodeforge.target import target_for


def _real_packer() -> str | None:
    path = shutil.which("packer")
    if path is None:
        return None
    try:
        check_version(path)
    except InputError:
        return None
    return path


PACKER = _real_packer()
pytestmark = pytest.mark.skipif(PACKER is None, reason="needs Packer >= 1.14.1 on PATH")


@pytest.mark.parametrize(
    ("image", "profile"), [("p5-ubuntu24.04", "p5.48xlarge"), ("gb200-ubuntu24.04-arm64", None)]
)
def test_packer_validates_the_shipped_templates(
    shipped: Catalog, tmp_path: Path, image: str, profile: str | None
) -> None:
    assert PACKER is not None
    target = target_for(shipped, image, profile)
    values = packer_vars(
        target,
        catalog_file=shipped.file_of("os", target.os.name),
        region="us-east-1",
        vars_path=tmp_path / "vars.json",
        manifest_path=tmp_path / "manifest.json",
        builder_check=["python3", "-m", "nodeforge.packer.builder_check"],
        now=datetime.now(UTC),
        source_ami="ami-0123456789abcdef0",
    )
    var_file = write_var_file(tmp_path / "test.pkrvars.json", values)
    runner = Runner(REPO_ROOT, lambda _line: None, Children(grace_s=10))
    runner.run(init_command(PACKER, TEMPLATE_DIR, log=tmp_path / "init.log"))
    runner.run(validate_command(PACKER, TEMPLATE_DIR, var_file, image, log=tmp_path / "v.log"))
