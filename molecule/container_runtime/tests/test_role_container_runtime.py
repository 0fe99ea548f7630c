"""What the container_runtime role leaves in a container (image mode, containerd): Debian's
containerd enabled; the stub toolkit at the stack's exact version, pinned and held, from a
source whose key passed the fingerprint check; the nvidia runtime in containerd's configuration
(NVIDIA's 1.18 drop-in, imported from config.toml, merged by the real containerd); NVIDIA's
nvidia-cdi-refresh unit enabled, gated on GPU presence, not run in the container."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodeforge.probes import file_text, held_packages, package_status, package_version

TOOLKIT = "1.18.0-1"
PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
GATE = "/usr/local/libexec/nodeforge/gpu-gate"
UNIT = "nvidia-cdi-refresh.service"
CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
SPEC = "/var/run/cdi/nvidia.yaml"
FAKE = "/tmp/nodeforge-fake-sysfs-cdi"
# PCI functions as sysfs shows them: (address, vendor, class).
TREES: dict[str, list[tuple[str, str, str]]] = {
    "empty": [],
    # a CPU instance: an ENA NIC and an NVMe controller, no NVIDIA device
    "no-gpu": [("0000:00:05.0", "0x1d0f", "0x020000"), ("0000:00:04.0", "0x1d0f", "0x010802")],
    # an NVIDIA device that is no GPU (an NVSwitch, class 0680)
    "nvswitch-only": [("0000:05:00.0", "0x10de", "0x068000")],
    # p5: H100 (3D controller, 0302)
    "h100": [("0000:53:00.0", "0x10de", "0x030200"), ("0000:64:00.0", "0x10de", "0x030200")],
    # g6e: L40S (VGA, 0300)
    "l40s": [("0000:9e:00.0", "0x10de", "0x030000")],
}
GPUS = {"empty": 0, "no-gpu": 0, "nvswitch-only": 0, "h100": 2, "l40s": 1}


def _text(host: Any, path: str) -> str:
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    return text


def test_containerd_from_debian_enabled(host: Any) -> None:
    assert package_status(host, "containerd") == "installed"
    assert host.run("systemctl is-enabled containerd.service").stdout.strip() == "enabled"
    # Debian's containerd, not a third-party build: the security updates come with the OS
    policy = host.run("apt-cache policy containerd").stdout
    assert "deb.debian.org" in policy or "debian" in policy, policy


def test_containerd_active_if_it_can_run_here(host: Any) -> None:
    state = host.run("systemctl is-active containerd.service").stdout.strip()
    if state != "active":
        journal = host.run("journalctl -u containerd.service -n 5 --no-pager").stdout
        pytest.skip(f"containerd does not run in this podman container ({state}): {journal}")
    assert host.run("ctr version").rc == 0


def test_toolkit_at_the_stack_version(host: Any) -> None:
    for package in PACKAGES:
        assert package_version(host, package) == TOOLKIT, package
        assert package_status(host, package) == "installed", package
    assert "version 1.18.0" in host.run("nvidia-ctk --version").stdout


def test_toolkit_pinned_and_held(host: Any) -> None:
    assert set(PACKAGES) <= held_packages(host)
    prefs = _text(host, "/etc/apt/preferences.d/nodeforge-10-nvidia-container-toolkit")
    assert f"Pin: version {TOOLKIT}\n" in prefs and "Pin-Priority: 1001" in prefs
    policy = host.run("apt-cache policy nvidia-container-toolkit").stdout
    assert f"*** {TOOLKIT} 1001" in policy, policy
    # the engine comes from the distribution and takes its updates
    assert "containerd" not in held_packages(host)


def test_repository_signed_by_the_checked_key(host: Any) -> None:
    source = _text(host, "/etc/apt/sources.list.d/nodeforge-nvidia-container-toolkit.sources")
    assert "Signed-By: /etc/apt/keyrings/nodeforge-nvidia-container-toolkit.asc" in source
    assert "/nvidia.github.io/libnvidia-container/stable/deb/amd64/" in source
    assert "Suites: /" in source


def test_nvidia_runtime_in_the_containerd_configuration(host: Any) -> None:
    # toolkit 1.18 writes a drop-in and makes the top-level config import its folder
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in _text(host, CONFIG)
    drop_in = _text(host, DROP_IN)
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in drop_in
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in drop_in
    assert "enable_cdi = true" in drop_in
    assert "default_runtime_name" not in drop_in  # runc stays the default
    # the real containerd merges the two: its effective configuration names the runtime
    dump = host.run("containerd config dump")
    assert dump.rc == 0, dump.stderr
    assert ".containerd.runtimes.nvidia.options]" in dump.stdout
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump.stdout
    assert "enable_cdi = true" in dump.stdout
    # Debian's own settings survive
    assert 'bin_dir = "/usr/lib/cni"' in dump.stdout


def test_cdi_unit_enabled_behind_the_gate(host: Any) -> None:
    assert host.run("systemctl is-enabled %s", UNIT).stdout.strip() == "enabled"
    gate = host.file(GATE)
    assert gate.is_file and gate.mode == 0o755 and gate.user == "root"
    shown = host.run("systemctl show -p ExecCondition %s", UNIT).stdout
    # NVIDIA's own condition (a driver in modules.dep) and the role's gate, both
    assert "argv[]=/usr/bin/grep" in shown, shown
    assert f"path={GATE} ; argv[]={GATE} ;" in shown, shown
    env = host.run("systemctl show -p Environment %s", UNIT).stdout
    assert f"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH={SPEC}" in env


def test_cdi_unit_never_ran_here(host: Any) -> None:
    # the package's postinst starts it; without GPU and driver it is skipped, never failed
    assert host.run("systemctl is-active %s", UNIT).stdout.strip() == "inactive"
    assert host.run("systemctl is-failed %s", UNIT).stdout.strip() != "failed"
    assert not host.file(SPEC).exists


@pytest.fixture(scope="module")
def fake_sysfs(host: Any) -> Iterator[str]:
    script = [f"rm -rf {FAKE}"]
    for tree, devices in TREES.items():
        script.append(f"mkdir -p {FAKE}/{tree}/bus/pci/devices")
        for address, vendor, pci_class in devices:
            folder = f"{FAKE}/{tree}/bus/pci/devices/{address}"
            script += [
                f"mkdir -p {folder}",
                f"echo {vendor} > {folder}/vendor",
                f"echo {pci_class} > {folder}/class",
            ]
    made = host.run(" && ".join(script))
    assert made.rc == 0, made.stderr
    yield FAKE
    host.run(f"rm -rf {FAKE}")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_gate_decides_from_the_pci_ids(host: Any, fake_sysfs: str, tree: str) -> None:
    result = host.run("NODEFORGE_SYSFS_ROOT=%s %s", f"{fake_sysfs}/{tree}", GATE)
    if GPUS[tree]:
        assert result.rc == 0, (tree, result.stdout, result.stderr)
        assert f"{GPUS[tree]} NVIDIA GPU(s)" in result.stdout
    else:
        assert result.rc == 1, (tree, result.stdout, result.stderr)
        assert "no NVIDIA GPU" in result.stdout and "skipping" in result.stdout


def test_gate_reads_a_root_argument(host: Any, fake_sysfs: str) -> None:
    assert host.run("%s --sysfs-root %s", GATE, f"{fake_sysfs}/h100").rc == 0
    assert host.run("%s --sysfs-root %s", GATE, f"{fake_sysfs}/empty").rc == 1


def test_gate_goes_on_when_sysfs_cannot_be_read(host: Any) -> None:
    result = host.run("NODEFORGE_SYSFS_ROOT=/nonexistent %s", GATE)
    assert result.rc == 0 and "cannot read" in result.stdout


def test_unit_skipped_cleanly_without_gpus(host: Any, fake_sysfs: str) -> None:
    # started by hand with no GPU: a condition declines it, nothing fails, no spec appears
    host.run("systemctl set-environment NODEFORGE_SYSFS_ROOT=%s", f"{fake_sysfs}/no-gpu")
    try:
        assert host.run("systemctl start %s", UNIT).rc == 0
        shown = host.run("systemctl show -p ActiveState,Result %s", UNIT).stdout
        assert "ActiveState=inactive" in shown, shown
        assert not host.file(SPEC).exists
    finally:
        host.run("systemctl unset-environment NODEFORGE_SYSFS_ROOT")
        host.run("systemctl stop %s", UNIT)
