"""The kernel moving under the driver: Debian 13's 550.163.01 does not build for its 6.12 kernel.

The role must say so with the make.log lines that matter and leave no driver package behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nodeforge.local.podman import SystemdContainer, image_exists
from tests.conftest import REPO
from tests.integration.conftest import require_podman

IMAGE_REF = "localhost/nodeforge/local-debian13:local-debian13"
PLAYBOOK = """
- name: A driver that does not build for the image kernel
  hosts: all
  roles:
    - role: nvidia_driver
      vars:
        nvidia_driver_source: distro
        nvidia_driver_branch: 550
        nvidia_driver_version: "550.163.01"
        nvidia_driver_flavour: open
"""


def test_dkms_failure_is_reported_and_rolled_back(tmp_path: Path) -> None:
    require_podman()
    if not image_exists(IMAGE_REF):
        # the local build carries the base layer: the Debian 13 kernel and its headers, held
        subprocess.run(
            [sys.executable, "-m", "nodeforge.cli", "build", "local-debian13", "--target", "local"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    playbook = tmp_path / "driver.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    with SystemdContainer(IMAGE_REF) as node:
        inventory = tmp_path / "inventory.yml"
        host = {
            "ansible_connection": "containers.podman.podman",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        inventory.write_text(json.dumps({"all": {"hosts": {node.name: host}}}), encoding="utf-8")
        venv_bin = Path(sys.executable).parent
        result = subprocess.run(
            [str(venv_bin / "ansible-playbook"), "-i", str(inventory), str(playbook)],
            cwd=REPO,
            env={
                **os.environ,
                "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
            },
            capture_output=True,
            text=True,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "did not build through DKMS for kernel 6.12" in output
        assert "pci_resize_resource" in output
        assert "the driver packages were removed again" in output
        left = node.exec(
            [
                "dpkg-query",
                "--show",
                "--showformat=${Package} ${db:Status-Status}\\n",
                "nvidia-open-kernel-dkms",
                "nvidia-smi",
                "libcuda1",
            ],
            check=False,
        )
        assert " installed" not in left.stdout
        assert " half-configured" not in left.stdout and " unpacked" not in left.stdout
