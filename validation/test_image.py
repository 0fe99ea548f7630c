"""The image as a whole: its manifest (BOM) and its hygiene."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeforge.probes import file_text, uses_rpm


def test_manifest_equals_the_resolved_vars(host: Any, resolved: dict[str, Any]) -> None:
    path = resolved.get("nodeforge_manifest_path", "/etc/nodeforge/manifest.json")
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    # The image-level part: the AMI is validated on each of its profiles with that profile's
    # vars, and every one of them must find the manifest it was built with.
    assert json.loads(text) == resolved["nodeforge_manifest"]


# The image before its first boot: a booted instance has a machine id, host keys and
# cloud-init state of its own, as it should.
@pytest.mark.layer("image_cleanup")
@pytest.mark.stage("build")
class TestHygiene:
    def test_no_ssh_host_keys(self, host: Any) -> None:
        assert host.run("find /etc/ssh -maxdepth 1 -name 'ssh_host_*'").stdout == ""

    def test_machine_id_empty(self, host: Any) -> None:
        assert file_text(host, "/etc/machine-id") == ""

    def test_no_cloud_init_instance_state(self, host: Any) -> None:
        for path in ("/var/lib/cloud/instance", "/var/lib/cloud/instances", "/var/lib/cloud/data"):
            assert not host.file(path).exists, path

    def test_no_shell_history(self, host: Any) -> None:
        found = host.run(
            "find /root /home -maxdepth 2 -name '.*_history' 2>/dev/null; true"
        ).stdout.strip()
        assert found == ""

    def test_no_credentials(self, host: Any) -> None:
        found = host.run(
            "find /root /home -maxdepth 3 \\( -path '*/.aws/credentials' -o -name '.netrc' "
            "-o -name 'id_rsa' -o -name 'id_ed25519' \\) 2>/dev/null; true"
        ).stdout.strip()
        assert found == ""

    def test_no_package_lists(self, host: Any) -> None:
        if uses_rpm(host):
            assert host.run("find /var/cache/dnf -mindepth 1 2>/dev/null; true").stdout == ""
            return
        lists = host.run("find /var/lib/apt/lists -maxdepth 1 -type f -not -name lock").stdout
        assert lists == ""

    def test_no_installer_leftovers(self, host: Any) -> None:
        found = host.run("find /tmp /var/tmp -maxdepth 1 -name 'nodeforge-*'").stdout.strip()
        assert found == ""
