"""aws-ofi-nccl layer: the plugin version the stack resolves to, found by the dynamic loader
next to its libfabric, and an NCCL environment without the variables the plugin outgrew."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.probes import file_text

pytestmark = pytest.mark.layer("aws_ofi_nccl")
ENTRY = "/etc/ld.so.conf.d/100_ofinccl.conf"
ENV_FILE = "/etc/nodeforge/nccl.env"
LEGACY = ("FI_PROVIDER=", "NCCL_PROTO=", "FI_EFA_USE_DEVICE_RDMA=", "FI_EFA_FORK_SAFE=", "RDMAV_")


def _plugin(host: Any) -> str:
    entry = file_text(host, ENTRY)
    assert entry, f"{ENTRY} is missing: the EFA installer did not publish the plugin"
    directory = next(line for line in entry.splitlines() if line and not line.startswith("#"))
    return f"{directory.strip()}/libnccl-net-ofi.so"


def test_plugin_version_is_the_stacks(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    banner = host.run(r"grep -a -o -m 1 -E 'aws-ofi-nccl [0-9]+\.[0-9]+\.[0-9]+' %s", _plugin(host))
    record_property("declared", nodeforge["aws_ofi_nccl_version"])
    record_property("actual", banner.stdout.strip())
    assert banner.stdout.strip() == f"aws-ofi-nccl {nodeforge['aws_ofi_nccl_version']}"


def test_loader_resolves_plugin_and_libfabric(host: Any) -> None:
    plugin = _plugin(host)
    assert f"=> {plugin}" in host.run("ldconfig -p").stdout
    linked = host.run("ldd %s", plugin)
    assert linked.rc == 0 and "not found" not in linked.stdout, linked.stdout


def test_nccl_environment(host: Any, nodeforge: dict[str, Any]) -> None:
    text = file_text(host, ENV_FILE) or ""
    settings = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert 'NCCL_NET_PLUGIN="ofi"' in settings
    if nodeforge["profile"]["network"]["efa_interfaces"] > 0:
        # no silent fallback to TCP sockets on a profile that has EFA
        assert 'NCCL_NET="AWS Libfabric"' in settings
    assert [line for line in settings if line.startswith(LEGACY)] == []
