"""playbooks/group_vars/all.yml maps the resolved vars onto the roles' variables: templated by
Ansible itself (localhost, no connection to any node) for a rendered target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodeforge.catalog.loader import Catalog
from nodeforge.local.playbook import ansible_playbook
from nodeforge.render import render, to_json
from nodeforge.target import Target, target_for
from tests.conftest import with_enroot

REPO = Path(__file__).resolve().parents[1]
# Run beside a link to playbooks/group_vars, so that all.yml is read as the playbooks read it.
PROBE = """\
- name: Print role variables
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The variables as the roles see them
      ansible.builtin.copy:
        content: "{{ names | map('extract', vars) | list | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def _role_vars(tmp_path: Path, target: Target, catalog: Catalog, names: list[str]) -> list[Any]:
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(to_json(render(catalog, target)), encoding="utf-8")
    (tmp_path / "group_vars").symlink_to(REPO / "playbooks" / "group_vars")
    probe = tmp_path / "probe.yml"
    out = tmp_path / "values.json"
    probe.write_text(PROBE, encoding="utf-8")
    argv = [ansible_playbook(), "-i", "localhost,", "-c", "local", str(probe)]
    argv += [
        "-e",
        f"@{vars_file}",
        "-e",
        json.dumps({"names": names, "out": str(out), "ansible_python_interpreter": sys.executable}),
    ]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    values: list[Any] = json.loads(out.read_text(encoding="utf-8"))
    return values


def test_enroot_variables_come_from_the_stacks_artifacts(shipped: Catalog, tmp_path: Path) -> None:
    target = with_enroot(target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge"))
    packages, pyxis, version, url, sha256 = _role_vars(
        tmp_path,
        target,
        shipped,
        [
            "enroot_packages",
            "enroot_pyxis",
            "enroot_pyxis_version",
            "enroot_pyxis_url",
            "enroot_pyxis_sha256",
        ],
    )
    release = "https://github.com/NVIDIA/enroot/releases/download/v4.2.1"
    assert packages == [
        {"url": f"{release}/enroot_4.2.1-1_amd64.deb", "sha256": "a" * 64},
        {"url": f"{release}/enroot+caps_4.2.1-1_amd64.deb", "sha256": "b" * 64},
    ]
    assert (pyxis, version, sha256) == (True, "0.24.0", "c" * 64)
    assert url == "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"


def test_enroot_without_pyxis(shipped: Catalog, tmp_path: Path) -> None:
    target = with_enroot(target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge"))
    assert target.stack.enroot is not None
    section = target.stack.enroot.model_copy(update={"pyxis": None})
    stack = target.stack.model_copy(update={"enroot": section})
    pyxis, version, url = _role_vars(
        tmp_path,
        replace(target, stack=stack),
        shipped,
        ["enroot_pyxis", "enroot_pyxis_version", "enroot_pyxis_url"],
    )
    assert (pyxis, version, url) == (False, "", "")
