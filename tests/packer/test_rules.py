from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.errors import InputError
from nodeforge.packer.rules import RULES, VarFile, check_template, require_clean
from nodeforge.packer.template import load_template

GOOD_SOURCE = """
source "amazon-ebs" "node" {
  source_ami   = var.source_ami
  imds_support = "v2.0"
  metadata_options {
    http_tokens = "required"
  }
  launch_block_device_mappings {
    device_name = "/dev/sda1"
    encrypted   = true
  }
}
"""
PLUGINS = """
packer {
  required_plugins {
    amazon = {
      version = "%s"
      source  = "github.com/hashicorp/amazon"
    }
  }
}
"""
VARIABLES = """
variable "region" {
  type = string
}

variable "size" {
  type    = number
  default = 100
}
"""


def _findings(
    tmp_path: Path, rule: str, var_values: dict[str, object] | None = None, **files: str
) -> list[str]:
    for name, text in files.items():
        (tmp_path / f"{name}.pkr.hcl").write_text(text)
    var_file = VarFile(tmp_path / "x.pkrvars.json", var_values) if var_values is not None else None
    found = check_template(load_template(tmp_path), var_file)
    return [f"{f.block}: {f.message}" for f in found if f.rule == rule]


def test_rule_ids_are_unique() -> None:
    assert len({r.id for r in RULES}) == len(RULES)


def test_shipped_templates_are_clean() -> None:
    assert check_template(load_template()) == []


def test_var_declared(tmp_path: Path) -> None:
    assert _findings(tmp_path, "var-declared", {"region": "us-east-1"}, v=VARIABLES) == []
    found = _findings(tmp_path, "var-declared", {"region": "x", "regoin": "y"}, v=VARIABLES)
    assert found == [
        "variable 'regoin': the var file sets a variable no template declares (Packer stops on it)"
    ]


def test_var_passed(tmp_path: Path) -> None:
    assert _findings(tmp_path, "var-passed", {"region": "us-east-1"}, v=VARIABLES) == []
    [found] = _findings(tmp_path, "var-passed", {"size": 5}, v=VARIABLES)
    assert found.startswith('variable "region": has no default')


def test_var_rules_need_a_var_file(tmp_path: Path) -> None:
    assert _findings(tmp_path, "var-passed", None, v=VARIABLES) == []


@pytest.mark.parametrize("version", ["= 1.8.2", "1.8.2", "=1.8.2"])
def test_plugin_pinned_passes(tmp_path: Path, version: str) -> None:
    assert _findings(tmp_path, "plugin-pinned", plugins=PLUGINS % version) == []


@pytest.mark.parametrize("version", [">= 1.8.0", "~> 1.8", "1.8", ">= 1.2.3, != 1.3.10"])
def test_plugin_pinned_fails(tmp_path: Path, version: str) -> None:
    [found] = _findings(tmp_path, "plugin-pinned", plugins=PLUGINS % version)
    assert found.startswith("required_plugins.amazon: version")


def test_no_ami_id(tmp_path: Path) -> None:
    assert _findings(tmp_path, "no-ami-id", s=GOOD_SOURCE) == []
    pinned = GOOD_SOURCE.replace("var.source_ami", '"ami-0123456789abcdef0"')
    assert _findings(tmp_path, "no-ami-id", s=pinned) == [
        "line 3: hard-coded AMI id ami-0123456789abcdef0: it exists in one region and goes stale"
    ]


def test_imdsv2(tmp_path: Path) -> None:
    assert _findings(tmp_path, "imdsv2", s=GOOD_SOURCE) == []
    optional = GOOD_SOURCE.replace('"required"', '"optional"').replace('"v2.0"', '"v1.0"')
    found = _findings(tmp_path, "imdsv2", s=optional)
    assert [f.split(": ", 1)[1] for f in found] == [
        "the builder instance does not require IMDSv2 session tokens",
        "instances launched from the AMI may fall back to IMDSv1",
    ]


def test_root_encrypted(tmp_path: Path) -> None:
    assert _findings(tmp_path, "root-encrypted", s=GOOD_SOURCE) == []
    plain = GOOD_SOURCE.replace("encrypted   = true", "encrypted   = false")
    assert _findings(tmp_path, "root-encrypted", s=plain) == [
        "source.amazon-ebs.node: the root volume (and so the AMI's snapshot) is not encrypted"
    ]
    boot = plain.replace('imds_support = "v2.0"', 'imds_support = "v2.0"\n  encrypt_boot = true')
    assert _findings(tmp_path, "root-encrypted", s=boot) == []


def test_require_clean_names_file_line_and_fix(tmp_path: Path) -> None:
    (tmp_path / "p.pkr.hcl").write_text(PLUGINS % ">= 1.0.0")
    findings = check_template(load_template(tmp_path))
    with pytest.raises(InputError) as caught:
        require_clean(findings)
    error = caught.value
    assert (error.file, error.line) == (tmp_path / "p.pkr.hcl", 4)
    assert error.fix is not None and "= X.Y.Z" in error.fix
    assert "plugin-pinned" in str(error)
