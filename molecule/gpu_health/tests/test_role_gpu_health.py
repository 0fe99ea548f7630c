"""What the gpu_health role leaves in a container (image mode) that prepare.yml dressed as a
p5.48xlarge: DCGM 4 at the stack's version, held, its host engine enabled behind the hardware
gate; node_exporter serving the watcher's textfile; the Xid watcher classifying kernel-log lines
the test writes, exporting them and firing the hook; and the health gate keeping a stand-in
scheduler unit from starting after a reboot-class Xid, and letting it start on a clean boot or
on a host without GPUs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodeforge.probes import held_packages, package_status, package_version

DCGM = "4.4.2"
DCGM_PACKAGES = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]
TOOLS = "/opt/nodeforge/tools"
TEXTFILE = "/var/lib/prometheus/node-exporter/nodeforge-xid.prom"
STATE = "/run/nodeforge/xid-state.json"
KERNEL_LOG = "/var/log/nodeforge-test/kern.log"
HOOK_LOG = "/var/log/nodeforge-test/hook.log"
SCHEDULER = "nodeforge-test-scheduler.service"
GATE = "nodeforge-health-gate.service"
WATCHER = "nodeforge-xid-watch.service"
GPU_COUNT = "/etc/nodeforge-test-gpus"
TEST_DROPIN = f"/etc/systemd/system/{GATE}.d/nodeforge-test.conf"
# Real lines from public kernel logs (tests/fixtures/outputs/kernel_log/SOURCES.md names them):
# an application fault (13), a GPU gone from the bus (79, reboot_node), a row remap (63,
# replace_node: the policy's replace class).
XID_13 = (
    "[ 1134.558123] NVRM: Xid (PCI:0000:53:00): 13, pid=24517, name=python3, Graphics SM "
    "Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
)
XID_79 = "[ 2201.104592] NVRM: Xid (PCI:0000:64:00): 79, pid=1162, GPU has fallen off the bus."
XID_63 = (
    "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
    "reset gpu to activate."
)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    pytest.fail(f"not within {timeout_s:g} s: {what}")


def read(host: Any, path: str) -> str:
    """The file's text, or "" while it does not exist (the watcher writes it when it starts)."""
    got = host.run(f"cat -- {path}")
    return str(got.stdout) if got.rc == 0 else ""


def metrics(host: Any) -> str:
    """What node_exporter serves on its standard port, as Prometheus would scrape it."""
    got = host.run(
        "python3 -c 'import urllib.request;"
        ' print(urllib.request.urlopen("http://127.0.0.1:9100/metrics", timeout=5)'
        ".read().decode())'"
    )
    assert got.rc == 0, got.stderr
    return str(got.stdout)


def unit_state(host: Any, unit: str) -> str:
    return str(host.run(f"systemctl is-active {unit}").stdout.strip())


@pytest.fixture
def clean_boot(host: Any) -> Iterator[None]:
    """A node as after a reboot: no Xid in the log, no state, 8 GPUs, nothing started."""

    def reset() -> None:
        for unit in (SCHEDULER, WATCHER, GATE):
            host.run(f"systemctl stop {unit}")
        host.run(f"truncate -s 0 {KERNEL_LOG} && rm -f {STATE} {HOOK_LOG} {GPU_COUNT}")
        host.run(f"systemctl reset-failed {SCHEDULER} {WATCHER} {GATE}")

    reset()
    yield
    reset()


def test_dcgm_at_the_stack_version_and_held(host: Any) -> None:
    for package in DCGM_PACKAGES:
        assert package_status(host, package) == "installed", package
        version = package_version(host, package) or ""
        assert version.split(":")[-1].startswith(f"{DCGM}-"), f"{package} {version}"
    assert set(DCGM_PACKAGES) <= held_packages(host)


def test_dcgm_host_engine_enabled_and_skipped_without_a_gpu(host: Any) -> None:
    assert host.service("nvidia-dcgm.service").is_enabled
    dropin = host.file("/etc/systemd/system/nvidia-dcgm.service.d/nodeforge-hardware-gate.conf")
    assert "ExecCondition=/usr/local/libexec/nodeforge/hardware-gate gpu" in dropin.content_string
    # this container's own sysfs has no NVIDIA GPU: a skipped start, not a failed one
    host.run("systemctl start nvidia-dcgm.service")
    assert unit_state(host, "nvidia-dcgm.service") == "inactive"
    result = host.check_output("systemctl show -p Result --value nvidia-dcgm.service")
    assert result == "exec-condition"


def test_node_tools_environment_equals_the_lock(host: Any) -> None:
    lock = host.file(f"{TOOLS}/nodeforge-lock.txt").content_string
    pins = dict(line.split(" ")[0].split("==") for line in lock.splitlines() if "==" in line)
    listed = json.loads(host.check_output(f"{TOOLS}/bin/python -m pip list --format=json"))
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in listed}
    assert {name: installed.get(name) for name in pins} == pins
    got = host.run(f"{TOOLS}/bin/python {TOOLS}/nodeforge.pyz health-gate --help")
    assert got.rc == 0 and "--expect" in got.stdout, got.stderr


def test_units_enabled_and_the_gate_ordered_before_the_gated_unit(host: Any) -> None:
    for unit in (WATCHER, GATE, "prometheus-node-exporter.service"):
        assert host.service(unit).is_enabled, unit
    requires = host.check_output(f"systemctl show -p Requires -p After --value {SCHEDULER}")
    assert GATE in requires
    expect = json.loads(host.file("/etc/nodeforge/health-expect.json").content_string)
    assert expect["p5.48xlarge"]["gpu_count"] == 8


@pytest.mark.usefixtures("clean_boot")
def test_watcher_classifies_exports_and_fires_the_hook(host: Any) -> None:
    host.run(f"systemctl start {WATCHER}")
    wait_for(
        lambda: "nodeforge_node_health 1" in read(host, TEXTFILE),
        "the watcher exports a healthy node",
    )
    host.run(f"echo '{XID_13}' >> {KERNEL_LOG}")
    wait_for(
        lambda: 'xid="13",action="application"' in read(host, TEXTFILE),
        "Xid 13 counted as an application fault",
    )
    assert "nodeforge_node_health 1" in read(host, TEXTFILE)
    assert not host.file(STATE).exists, "an application Xid is no node fault"
    assert not host.file(HOOK_LOG).exists, "an application Xid fires no hook"

    host.run(f"echo '{XID_79}' >> {KERNEL_LOG}")
    wait_for(lambda: "\n" in read(host, HOOK_LOG), "the hook fired on Xid 79")
    hook = read(host, HOOK_LOG)
    assert hook.startswith("drain action=reboot_node xid=79"), hook
    assert "0000:64:00" in hook
    state = json.loads(read(host, STATE))
    assert state["action"] == "reboot_node", state
    # the textfile follows the hook; node_exporter reads it on its next scrape
    wait_for(lambda: "nodeforge_node_health 0" in metrics(host), "node_exporter serves health 0")
    served = metrics(host)
    assert 'nodeforge_node_action_required{action="reboot_node"} 1' in served
    # node_exporter serves the labels sorted by name
    assert 'nodeforge_gpu_xid_total{action="reboot_node",gpu="0000:64:00",xid="79"} 1' in served
    assert unit_state(host, WATCHER) == "active"


@pytest.mark.usefixtures("clean_boot")
@pytest.mark.parametrize(
    ("line", "xid", "action"), [(XID_79, "79", "reboot_node"), (XID_63, "63", "replace_node")]
)
def test_gate_holds_the_scheduler_after_a_reboot_or_replace_class_xid(
    host: Any, line: str, xid: str, action: str
) -> None:
    host.run(f"echo '{line}' >> {KERNEL_LOG}")
    started = host.run(f"systemctl start {SCHEDULER}")
    assert started.rc != 0, f"the scheduler started on a node with Xid {xid}"
    assert unit_state(host, SCHEDULER) != "active"
    assert unit_state(host, GATE) == "failed"
    said = host.run(f"journalctl -u {GATE} --no-pager -n 30").stdout
    assert f"xid: {action}: Xid {xid} " in said, said


@pytest.mark.usefixtures("clean_boot")
def test_gate_holds_the_scheduler_when_a_gpu_is_missing(host: Any) -> None:
    host.run(f"echo 7 > {GPU_COUNT}")
    assert host.run(f"systemctl start {SCHEDULER}").rc != 0
    assert unit_state(host, GATE) == "failed"
    said = host.run(f"journalctl -u {GATE} --no-pager -n 30").stdout
    assert "7" in said and "H100" in said, said


@pytest.mark.usefixtures("clean_boot")
def test_gate_lets_the_scheduler_start_on_a_clean_boot(host: Any) -> None:
    started = host.run(f"systemctl start {SCHEDULER}")
    assert started.rc == 0, host.run(f"journalctl -u {GATE} --no-pager -n 30").stdout
    assert unit_state(host, GATE) == "active"
    assert unit_state(host, SCHEDULER) == "active"


@pytest.mark.usefixtures("clean_boot")
def test_gate_is_skipped_and_the_scheduler_starts_without_gpus(host: Any) -> None:
    # even with a reboot-class Xid logged: a host without NVIDIA GPUs has nothing to gate
    host.run(f"echo '{XID_79}' >> {KERNEL_LOG}")
    original = host.file(TEST_DROPIN).content_string
    empty = "/srv/nodeforge-nogpu/sys"
    host.run(f"mkdir -p {empty}/bus/pci/devices")
    host.run(
        f"printf '[Service]\\nEnvironment=NODEFORGE_SYSFS_ROOT={empty}\\n' > {TEST_DROPIN}"
        " && systemctl daemon-reload"
    )
    try:
        assert host.run(f"systemctl start {SCHEDULER}").rc == 0
        assert unit_state(host, SCHEDULER) == "active"
        assert unit_state(host, GATE) == "inactive"
    finally:
        host.run(f"cat > {TEST_DROPIN} <<'EOF'\n{original}EOF\nsystemctl daemon-reload")
