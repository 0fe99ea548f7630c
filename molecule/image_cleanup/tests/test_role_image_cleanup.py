"""Nothing of the builder's identity or history survives into the image."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import file_text, uses_rpm


def test_prepare_really_dirtied_the_image(host: Any) -> None:
    # the marker stays, so this proves prepare ran and the absences below are the role's doing
    assert host.file("/var/tmp/.nodeforge-prepared").exists


@pytest.mark.parametrize(
    "path",
    [
        "/var/lib/cloud/instances",
        "/var/lib/cloud/instance",
        "/var/lib/cloud/data",
        "/etc/ssh/ssh_host_rsa_key",
        "/etc/ssh/ssh_host_ed25519_key.pub",
        "/var/lib/dbus/machine-id",
        "/root/.bash_history",
        "/root/.python_history",
        "/home/admin/.bash_history",
        "/var/log/syslog.2.gz",
        "/var/log/dpkg.log.1",
        "/opt/nodeforge-build",
    ],
)
def test_removed(host: Any, path: str) -> None:
    assert not host.file(path).exists


def test_machine_id_empty(host: Any) -> None:
    assert file_text(host, "/etc/machine-id") == ""


def test_logs_truncated(host: Any) -> None:
    assert host.file("/var/log/nodeforge-build.log").size == 0
    assert host.run("find /var/log -type f -size +0 -not -path '/var/log/journal/*'").stdout == ""


def test_package_lists_removed(host: Any) -> None:
    if uses_rpm(host):
        assert host.run("find /var/cache/dnf -mindepth 1").stdout == ""
        return
    lists = host.run("find /var/lib/apt/lists -maxdepth 1 -type f -not -name lock").stdout
    assert lists == ""
