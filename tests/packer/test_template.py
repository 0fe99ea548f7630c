from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodeforge.errors import InputError
from nodeforge.packer.runner import MIN_VERSION
from nodeforge.packer.template import TEMPLATE_DIR, expression, load_template
from nodeforge.packer.varfile import PackerVars
from tests.conftest import REPO


def test_shipped_templates_parse() -> None:
    template = load_template()
    assert template.directory == TEMPLATE_DIR
    assert {f.path.name for f in template.files} == {
        "build.pkr.hcl",
        "plugins.pkr.hcl",
        "sources.pkr.hcl",
        "variables.pkr.hcl",
    }
    region = template.variables["region"]
    assert (region.type, region.has_default, region.file.name) == (
        "string",
        False,
        "variables.pkr.hcl",
    )
    assert region.line == 5
    assert template.variables["tags"].type == "map(string)"
    assert template.variables["tags"].default == {}
    assert template.variables["kms_key_id"].has_default
    assert template.variables["kms_key_id"].default is None
    assert {p.name: (p.source, p.version) for p in template.plugins} == {
        "amazon": ("github.com/hashicorp/amazon", "= 1.8.2"),
        "ansible": ("github.com/hashicorp/ansible", "= 1.1.6"),
    }
    [source] = template.sources
    assert (source.type, source.name, source.ref) == (
        "amazon-ebs",
        "node",
        "source.amazon-ebs.node",
    )
    assert source.body["metadata_options"][0]["http_tokens"] == "required"
    # the temporary key is not left in the AMI; long snapshot waits do not time out
    assert source.body["ssh_clear_authorized_keys"] is True
    assert (
        source.body["aws_polling"][0]["delay_seconds"]
        * source.body["aws_polling"][0]["max_attempts"]
        >= 2 * 3600
    )
    assert expression(source.body["source_ami"]) == "var.source_ami"
    assert template.only_names() == ["nodeforge.amazon-ebs.node"]


def test_every_builder_setting_of_the_var_file_reaches_the_source() -> None:
    """The pipeline config's builder section and the image's gp3 settings travel through
    variables of the same name; a variable declared but never used would be silently ignored."""
    [source] = load_template().sources
    for name in (
        "subnet_id",
        "security_group_ids",
        "temporary_security_group_source_cidrs",
        "ssh_interface",
        "associate_public_ip_address",
        "iam_instance_profile",
    ):
        assert expression(source.body[name]) == f"var.{name}"
    [root] = source.body["launch_block_device_mappings"]
    assert expression(root["iops"]) == "var.volume_iops"
    assert expression(root["throughput"]) == "var.volume_throughput_mibps"
    assert set(PackerVars.model_fields) == set(load_template().variables)


def test_shipped_build_runs_kernel_phase_then_all_layers_then_checks() -> None:
    template = load_template()
    [build] = template.builds
    kinds = [(s.kind, s.type) for s in build.provisioners + build.post_processors]
    # the reboot between the passes is the play's own (playbooks/image.yml), which waits for SSH
    assert kinds == [
        ("provisioner", "ansible"),
        ("provisioner", "ansible"),
        ("provisioner", "shell-local"),
        ("post-processor", "manifest"),
    ]
    first, second, check, manifest = build.provisioners + build.post_processors
    # validation's build stage on the builder, with the connection Packer itself uses
    assert check.body["inline"] == ["${var.builder_check_command}"]
    assert check.body["environment_vars"] == [
        "NODEFORGE_BUILDER_HOST=${build.Host}",
        "NODEFORGE_BUILDER_PORT=${build.Port}",
        "NODEFORGE_BUILDER_USER=${build.User}",
        "NODEFORGE_BUILDER_SSH_KEY=${build.SSHPrivateKey}",
    ]
    assert first.body["extra_arguments"] == [
        "--extra-vars",
        "@${var.vars_file}",
        "--extra-vars",
        "nodeforge_build_phase=kernel",
    ]
    assert second.body["extra_arguments"] == ["--extra-vars", "@${var.vars_file}"]
    # one build's facts never reach another: Packer names every builder `default`
    env = "${local.ansible_env_vars}"
    assert first.body["ansible_env_vars"] == second.body["ansible_env_vars"] == env
    [locals_] = [block for f in template.files for block in f.body.get("locals", [])]
    assert "ANSIBLE_CACHE_PLUGIN=memory" in locals_["ansible_env_vars"]
    assert first.body["use_proxy"] is False and second.body["use_proxy"] is False
    assert first.body["playbook_file"].endswith("/playbooks/image.yml")
    assert set(manifest.body["custom_data"]) == {"image", "stack"}


def test_required_version_is_the_runner_s_floor() -> None:
    plugins = (TEMPLATE_DIR / "plugins.pkr.hcl").read_text(encoding="utf-8")
    assert f'required_version = ">= {MIN_VERSION}"' in plugins


def test_the_kernel_phase_reboots_inside_the_play() -> None:
    play = yaml.safe_load((REPO / "playbooks" / "image.yml").read_text(encoding="utf-8"))[0]
    [reboot] = [t for t in play["post_tasks"] if "ansible.builtin.reboot" in t]
    assert "not _image_all_layers" in reboot["when"]


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.pkr.hcl").write_text('variable "x" {\n  type = \n}\n')
    with pytest.raises(InputError) as caught:
        load_template(tmp_path)
    assert caught.value.file == tmp_path / "bad.pkr.hcl"
    assert caught.value.line == 2
    assert "not valid HCL2" in str(caught.value)


def test_duplicate_variable(tmp_path: Path) -> None:
    (tmp_path / "a.pkr.hcl").write_text('variable "x" {\n  type = string\n}\n')
    (tmp_path / "b.pkr.hcl").write_text('\nvariable "x" {\n  type = string\n}\n')
    with pytest.raises(InputError, match="declared twice") as caught:
        load_template(tmp_path)
    assert (caught.value.file, caught.value.line) == (tmp_path / "b.pkr.hcl", 2)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no Packer templates"):
        load_template(tmp_path)
