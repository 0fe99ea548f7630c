"""The kernel moving under the driver: Debian 13's 550.163.01 does not build for its 6.12 kernel.

The role must say so with the make.log lines that matter and leave no driver package behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.local.podman import SystemdContainer
from tests.integration.conftest import local_image_group, run_playbook

# runs_long: the whole local_image group (about 15 minutes in CI) starts with this test
pytestmark = [local_image_group, pytest.mark.runs_long(15)]
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


def test_dkms_failure_is_reported_and_rolled_back(local_image: str, tmp_path: Path) -> None:
    # the local image carries the base layer: the Debian 13 kernel and its headers, held
    with SystemdContainer(local_image) as node:
        result = run_playbook(node.name, PLAYBOOK, tmp_path)
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
