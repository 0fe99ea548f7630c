"""The plugin the loader finds next to a real libfabric, and the NCCL environment without the
variables the current plugin no longer needs."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import file_text

PLUGIN = "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
LEGACY = ["FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "RDMAV_"]


def test_loader_resolves_the_plugin_and_its_libfabric(host: Any) -> None:
    assert f"libnccl-net-ofi.so (libc6,x86-64) => {PLUGIN}" in host.run("ldconfig -p").stdout
    linked = host.run("ldd %s", PLUGIN)
    assert linked.rc == 0, linked.stderr
    # Debian's real libfabric behind the installer's prefix, not a missing library
    assert "libfabric.so.1 => /opt/amazon/efa/lib/libfabric.so.1" in linked.stdout
    assert "not found" not in linked.stdout


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("/etc/nodeforge/nccl.env", 'NCCL_NET_PLUGIN="ofi"'),
        ("/etc/nodeforge/nccl.env", 'NCCL_NET="AWS Libfabric"'),
        ("/etc/profile.d/nodeforge-nccl.sh", "export NCCL_NET_PLUGIN=ofi"),
        ("/etc/profile.d/nodeforge-nccl.sh", "export NCCL_NET='AWS Libfabric'"),
    ],
)
def test_environment(host: Any, path: str, line: str) -> None:
    text = file_text(host, path)
    assert text is not None, path
    assert line in text.splitlines()
    settings = [entry for entry in text.splitlines() if entry and not entry.startswith("#")]
    assert not [entry for entry in settings for legacy in LEGACY if legacy in entry]


def test_login_shell_sees_the_environment(host: Any) -> None:
    shown = host.run("bash -lc 'echo $NCCL_NET_PLUGIN/$NCCL_SOCKET_IFNAME'")
    assert shown.stdout.strip() == "ofi/^docker,lo,veth"
