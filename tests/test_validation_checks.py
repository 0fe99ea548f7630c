"""Validation checks fed a broken node through canned command output, each beside its pass
case: the torch NCCL check (validation/test_layer_python_ml.py), the container_runtime Molecule
verifier (molecule/container_runtime/tests/), `dcgmi diag` (validation/test_gpu.py) and the
gpu_health layer's checks (validation/test_layer_gpu_health.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nodeforge.lock import Lock, Locked, LockHeader
from nodeforge.probes import UNIT_TEXT
from tests.canned import CannedHost, CannedResult
from tests.conftest import REPO

OUTPUTS = REPO / "tests" / "fixtures" / "outputs"


def _load(relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


verifier = _load(
    "molecule/container_runtime/tests/test_role_container_runtime.py", "molecule_container_runtime"
)


# --- validation/test_layer_python_ml.py: torch's NCCL against the lock -----------------------


def _lock(variant: str, *pins: tuple[str, str]) -> Lock:
    header = LockHeader(
        stack="hopper-2026.11",
        environment="train",
        python="3.12",
        platform="manylinux_2_34_x86_64",
        torch_variant=variant,
        index_urls=["https://pypi.org/simple"],
        locked="2026-12-03T10:00:00Z",
    )
    torch = f"2.13.0+{variant}"
    return Lock(
        header,
        tuple(Locked(name=n, version=v, hashes=["0" * 64]) for n, v in [("torch", torch), *pins]),
    )


@pytest.fixture(scope="module")
def python_ml(pytestconfig: pytest.Config) -> ModuleType:
    # its marks (layer, stage, gpu) are the suite's, registered by the suite's conftest
    _load("validation/conftest.py", "validation_conftest").pytest_configure(pytestconfig)
    return _load("validation/test_layer_python_ml.py", "validation_python_ml")


def _torch_nccl(module: ModuleType, found: str | None, lock: Lock) -> dict[str, Any]:
    recorded: dict[str, Any] = {}

    def record(name: str, value: Any) -> None:
        recorded[name] = value

    reports = {"train": ({"torch": "2.13.0", "torch.cuda.nccl": found}, lock)}
    module.test_torch_carries_the_locked_nccl(reports, record)
    return recorded


CUDA_LOCK = _lock("cu126", ("nvidia-nccl-cu12", "2.27.3"))


def test_torch_nccl_at_the_locked_version_passes(python_ml: ModuleType) -> None:
    assert _torch_nccl(python_ml, "2.27.3", CUDA_LOCK) == {
        "declared": {"train": "2.27.3"},
        "actual": {"train": "2.27.3"},
    }


@pytest.mark.parametrize(
    ("found", "lock"),
    [
        # torch loads another NCCL than its locked wheel (a stray LD_LIBRARY_PATH, a system one)
        ("2.21.5", CUDA_LOCK),
        # a CPU torch where the lock says CUDA
        (None, CUDA_LOCK),
        # a CUDA torch where the lock says CPU
        ("2.27.3", _lock("cpu")),
    ],
)
def test_torch_nccl_off_the_lock_fails(
    python_ml: ModuleType, found: str | None, lock: Lock
) -> None:
    with pytest.raises(AssertionError):
        _torch_nccl(python_ml, found, lock)


def test_cpu_torch_without_nccl_passes(python_ml: ModuleType) -> None:
    assert _torch_nccl(python_ml, None, _lock("cpu"))["declared"] == {"train": None}


def test_a_cuda_lock_without_the_nccl_wheel_fails_by_name(python_ml: ModuleType) -> None:
    with pytest.raises(AssertionError, match="the lock has no nvidia-nccl-cu12 for torch cu126"):
        _torch_nccl(python_ml, "2.27.3", _lock("cu126"))


# --- molecule/container_runtime: containerd as the role leaves it -------------------------------

DEBIAN_SOURCE = "http://deb.debian.org/debian trixie/main amd64 Packages"
DOCKER_SOURCE = "https://download.docker.com/linux/debian trixie/stable amd64 Packages"
MIRROR_SOURCE = (
    "http://127.0.0.1:39129/nvidia.github.io/libnvidia-container/stable/deb/amd64  Packages"
)
SOURCES = f"""Package files:
 100 /var/lib/dpkg/status
     release a=now
 500 {MIRROR_SOURCE}
     release o=https://nvidia.github.io/libnvidia-container/stable,l=libnvidia-container,c=
     origin 127.0.0.1
 500 {DOCKER_SOURCE}
     release o=Docker,a=trixie,n=trixie,l=Docker CE,c=stable,b=amd64
     origin download.docker.com
 500 {DEBIAN_SOURCE}
     release v=13.8,o=Debian,a=stable,n=trixie,l=Debian,c=main,b=amd64
     origin deb.debian.org
"""
VERSION = "1.7.24~ds1-6+deb13u1"


def _policy(installed_from: str) -> str:
    """containerd's policy: Debian's build and a third-party one, `installed_from` installed."""
    debian, docker = ("***", "   ") if installed_from == "debian" else ("   ", "***")
    return f"""containerd:
  Installed: {VERSION if installed_from == "debian" else "1.7.28-1~debian.13~trixie"}
  Candidate: 1.7.28-1~debian.13~trixie
  Version table:
 {docker} 1.7.28-1~debian.13~trixie 500
        500 {DOCKER_SOURCE}
        100 /var/lib/dpkg/status
 {debian} {VERSION} 500
        500 {DEBIAN_SOURCE}
"""


def _engine_host(installed_from: str) -> CannedHost:
    return CannedHost(
        {
            "dpkg-query --show --showformat='${db:Status-Status}' containerd": "installed",
            "systemctl is-enabled containerd.service": "enabled\n",
            "apt-cache policy containerd": _policy(installed_from),
            "apt-cache policy": SOURCES,
        }
    )


def test_containerd_from_debian_passes() -> None:
    verifier.test_containerd_from_debian_enabled(_engine_host("debian"))


def test_containerd_from_a_third_party_repository_fails() -> None:
    # the old check passed this: the policy mentions "debian" all over
    with pytest.raises(AssertionError, match=r"containerd comes from \{'Docker'\}"):
        verifier.test_containerd_from_debian_enabled(_engine_host("docker"))


def _running_host(state: str, revision: str = VERSION) -> CannedHost:
    return CannedHost(
        {
            "systemctl is-active containerd.service": f"{state}\n",
            "journalctl -u containerd.service -n 5 --no-pager": "containerd: exit status 1",
            "ctr version": f"Client:\n  Version:  1.7.24~ds1\n  Revision: {revision}\n\n"
            f"Server:\n  Version:  1.7.24~ds1\n  Revision: {revision}\n  UUID: x\n",
            "dpkg-query --show --showformat='${Version}' containerd": VERSION,
        }
    )


def test_containerd_running_the_installed_build_passes() -> None:
    verifier.test_containerd_runs_the_installed_build(_running_host("active"))


def test_containerd_not_running_fails_rather_than_skips() -> None:
    with pytest.raises(AssertionError, match="containerd is failed: containerd: exit status 1"):
        verifier.test_containerd_runs_the_installed_build(_running_host("failed"))


def test_containerd_running_another_build_fails() -> None:
    with pytest.raises(AssertionError):
        verifier.test_containerd_runs_the_installed_build(_running_host("active", "1.6.20~ds1-1"))


PLUGINS = """TYPE                                   ID                       PLATFORMS      STATUS
io.containerd.internal.v1              opt                      -              ok
io.containerd.grpc.v1                  cri                      linux/amd64    {status}
"""


def _plugins_host(status: str) -> CannedHost:
    return CannedHost(
        {
            "ctr plugins ls": PLUGINS.format(status=status),
            "journalctl -u containerd.service --no-pager -g 'failed to load plugin'": (
                'msg="failed to load plugin io.containerd.grpc.v1.cri" error="invalid plugin '
                "config: no corresponding runtime configured in `containerd.runtimes` for "
                '`containerd` `default_runtime_name = \\"runc\\""'
            ),
        }
    )


def test_cri_plugin_loaded_passes() -> None:
    verifier.test_cri_plugin_loads(_plugins_host("ok"))


def test_cri_plugin_in_error_fails_with_containerd_s_reason() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"the CRI plugin is error: .*runc"):
        verifier.test_cri_plugin_loads(_plugins_host("error"))


def _dump(runtimes: str) -> CannedHost:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    runc = f"""
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""
    nvidia = f"""
[{cri}.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [{cri}.containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""
    dump = f"""version = 2
[{cri}]
  enable_cdi = true
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
  [{cri}.containerd]
    default_runtime_name = "runc"
{runc if "runc" in runtimes else ""}{nvidia if "nvidia" in runtimes else ""}"""
    return CannedHost({"containerd config dump": dump})


def test_effective_configuration_with_both_runtimes_passes() -> None:
    verifier.test_nvidia_runtime_in_the_effective_configuration(_dump("runc nvidia"))


def test_effective_configuration_that_lost_the_default_runtime_fails() -> None:
    # what the old check passed: the nvidia runtime is there, the CRI plugin cannot load
    with pytest.raises(AssertionError, match=r"default runtime runc is not among \['nvidia'\]"):
        verifier.test_nvidia_runtime_in_the_effective_configuration(_dump("nvidia"))


def test_effective_configuration_without_the_nvidia_runtime_fails() -> None:
    with pytest.raises(AssertionError):
        verifier.test_nvidia_runtime_in_the_effective_configuration(_dump("runc"))


def _ctk(version: str) -> CannedHost:
    answers: dict[str, str | CannedResult] = {
        "nvidia-ctk --version": f"NVIDIA Container Toolkit CLI version {version}\ncommit: x\n"
    }
    for package in verifier.PACKAGES:
        answers[f"dpkg-query --show --showformat='${{Version}}' {package}"] = verifier.TOOLKIT
        answers[f"dpkg-query --show --showformat='${{db:Status-Status}}' {package}"] = "installed"
    return CannedHost(answers)


def test_toolkit_version_comes_from_the_scenario() -> None:
    converge = (REPO / "molecule/container_runtime/converge.yml").read_text(encoding="utf-8")
    assert f'container_runtime_toolkit_version: "{verifier.TOOLKIT}"' in converge
    verifier.test_toolkit_at_the_stack_version(_ctk(verifier.TOOLKIT.rsplit("-", 1)[0]))


def test_toolkit_cli_of_another_release_fails() -> None:
    # the old check passed "version 1.18.0" inside "version 1.18.0-rc.2"
    with pytest.raises(AssertionError):
        verifier.test_toolkit_at_the_stack_version(_ctk(f"{verifier.TOOLKIT.split('-')[0]}-rc.2"))


# --- validation/test_layer_cuda_toolkit.py: the default's libcudart first in the loader -------


@pytest.fixture(scope="module")
def cuda_checks(pytestconfig: pytest.Config) -> ModuleType:
    _load("validation/conftest.py", "validation_conftest").pytest_configure(pytestconfig)
    return _load("validation/test_layer_cuda_toolkit.py", "validation_cuda_toolkit")


def _cudart_host(soname: str, target: str) -> CannedHost:
    link = f"/usr/lib/x86_64-linux-gnu/{soname}"
    return CannedHost(
        {
            "ldconfig -p": f"\t{soname} (libc6,x86-64) => {link}\n",
            f"readlink -f {link}": f"{target}\n",
        }
    )


def _cuda_manifest(source: str, default: str) -> dict[str, Any]:
    return {"stack": {"name": "s", "cuda": {"source": source, "default": default}}}


def test_debian_cudart_in_the_multiarch_folder_passes(cuda_checks: ModuleType) -> None:
    host = _cudart_host("libcudart.so.11.0", "/usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89")
    cuda_checks.test_libcudart_from_the_default(host, _cuda_manifest("distro", "11.8.0"))


@pytest.mark.parametrize(
    ("soname", "target"),
    [
        # another toolkit's runtime first in the cache
        ("libcudart.so.11.0", "/usr/local/cuda-11.7/lib64/libcudart.so.11.7.99"),
        ("libcudart.so.11.0", "/usr/lib/x86_64-linux-gnu/libcudart.so.11.7.60"),
        # no CUDA 11 runtime in the cache at all
        ("libcudart.so.12", "/usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127"),
    ],
)
def test_debian_cudart_of_another_toolkit_fails(
    cuda_checks: ModuleType, soname: str, target: str
) -> None:
    with pytest.raises(AssertionError):
        cuda_checks.test_libcudart_from_the_default(
            _cudart_host(soname, target), _cuda_manifest("distro", "11.8.0")
        )


def test_nvidia_cudart_must_come_from_the_default_home(cuda_checks: ModuleType) -> None:
    manifest = _cuda_manifest("nvidia-repo", "13.2.2")
    good = _cudart_host("libcudart.so.13", "/usr/local/cuda-13.2/targets/x86_64-linux/lib/x.so")
    cuda_checks.test_libcudart_from_the_default(good, manifest)
    bad = _cudart_host("libcudart.so.13", "/usr/local/cuda-13.0/targets/x86_64-linux/lib/x.so")
    with pytest.raises(AssertionError, match=r"resolves to /usr/local/cuda-13\.0/"):
        cuda_checks.test_libcudart_from_the_default(bad, manifest)


# --- validation/test_gpu.py: dcgmi diag, which must run and pass ---------------------------------

# constructed in the schema of tests/fixtures/outputs/dcgmi/json_r2_pass_t4.json
ALL_SKIPPED = """{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
 {"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "Skip"}]},
 {"name": "Diagnostic", "results": [{"gpu_ids": "0", "status": "Skip"}]}]}],
 "version": "3.3.3"}}"""


class _DcgmHost(CannedHost):
    def exists(self, command: str) -> bool:
        return command == "dcgmi"


class _Level:
    def getoption(self, name: str) -> str:
        assert name == "--dcgm-level"
        return "2"


@pytest.fixture(scope="module")
def gpu_checks(pytestconfig: pytest.Config) -> ModuleType:
    _load("validation/conftest.py", "validation_conftest").pytest_configure(pytestconfig)
    return _load("validation/test_gpu.py", "validation_gpu")


def _dcgm(output: str) -> _DcgmHost:
    return _DcgmHost({"dcgmi diag -r 2 --json": output})


def test_dcgm_diag_that_passes(gpu_checks: ModuleType) -> None:
    passed = (OUTPUTS / "dcgmi" / "json_r2_pass_t4.json").read_text(encoding="utf-8")
    gpu_checks.test_dcgm_diagnostics(_dcgm(passed), _Level())


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (ALL_SKIPPED, "ran no test"),
        ((OUTPUTS / "dcgmi" / "json_4_2_3_software_fail_constructed.json"), "software: "),
        ((OUTPUTS / "dcgmi" / "json_4_4_1_runtime_error_constructed.json"), "did not complete"),
    ],
    ids=["all-skipped", "a-failed-test", "runtime-error"],
)
def test_dcgm_diag_that_did_not_pass_fails(
    gpu_checks: ModuleType, output: str | Path, says: str
) -> None:
    text = output.read_text(encoding="utf-8") if isinstance(output, Path) else output
    with pytest.raises((AssertionError, pytest.fail.Exception), match=says):
        gpu_checks.test_dcgm_diagnostics(_dcgm(text), _Level())


# --- validation/test_layer_gpu_health.py: DCGM, the node tools, the gate's files --------------

DCGM_CORE, DCGM_CUDA = "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"
P5_EXPECTED = {
    "gpu_count": 8,
    "gpu_model": "H100",
    "efa_interfaces": 32,
    "fabric_manager": True,
    "imex": False,
}
HEALTH_NODEFORGE: dict[str, Any] = {
    "stack": {
        "name": "hopper-2026.12",
        "dcgm": {"version": "4.6.0"},
        "cuda": {"default": "13.2.2"},
        "driver": {"version": "595.91.07"},
    },
    "health_expectations": {"p5.48xlarge": P5_EXPECTED},
}
TOOLS_PINS = {"pydantic": "2.14.4", "pyyaml": "6.0.4"}
TOOLS_LIST = "/opt/nodeforge/tools/bin/python -m pip list --format=json --disable-pip-version-check"
TOOLS_HELP = "/opt/nodeforge/tools/bin/python /opt/nodeforge/tools/nodeforge.pyz health-gate --help"
EXPECT_FILE = "cat /etc/nodeforge/health-expect.json"


@pytest.fixture(scope="module")
def health_checks(pytestconfig: pytest.Config) -> ModuleType:
    _load("validation/conftest.py", "validation_conftest").pytest_configure(pytestconfig)
    return _load("validation/test_layer_gpu_health.py", "validation_gpu_health")


def _dcgm_node(
    version: str = "1:4.6.0-1", held: tuple[str, ...] = (DCGM_CORE, DCGM_CUDA)
) -> CannedHost:
    answers: dict[str, str | CannedResult] = {
        "dpkg --get-selections": "".join(
            f"{p}\t\t\t{'hold' if p in held else 'install'}\n" for p in (DCGM_CORE, DCGM_CUDA)
        )
    }
    for package in (DCGM_CORE, DCGM_CUDA):
        answers[f"dpkg-query --show --showformat='${{Version}}' {package}"] = version
        answers[f"dpkg-query --show --showformat='${{db:Status-Status}}' {package}"] = "installed"
    return CannedHost(answers)


def test_dcgm_at_the_stack_version_with_nvidia_s_epoch_passes(health_checks: ModuleType) -> None:
    health_checks.test_dcgm_at_the_stack_version_and_held(
        _dcgm_node(), HEALTH_NODEFORGE, lambda *_: None
    )


@pytest.mark.parametrize(
    ("node", "says"),
    [
        (_dcgm_node(version="1:4.4.2-1"), "4.4.2"),
        (_dcgm_node(version="1:4.6.0.1-1"), "4.6.0.1"),
        (_dcgm_node(held=(DCGM_CORE,)), f"not held: ['{DCGM_CUDA}']"),
    ],
    ids=["another-version", "a-longer-version", "not-held"],
)
def test_dcgm_off_the_stack_fails(health_checks: ModuleType, node: CannedHost, says: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(says)):
        health_checks.test_dcgm_at_the_stack_version_and_held(
            node, HEALTH_NODEFORGE, lambda *_: None
        )


def _tools_node(installed: dict[str, str]) -> CannedHost:
    listed = json.dumps([{"name": name, "version": v} for name, v in installed.items()])
    return CannedHost({TOOLS_LIST: listed, TOOLS_HELP: "usage: nodeforge health-gate --expect"})


def test_node_tools_equal_to_the_lock_pass(health_checks: ModuleType) -> None:
    node = _tools_node({"pip": "25.3", "pydantic": "2.14.4", "PyYAML": "6.0.4"})
    health_checks.test_node_tools_equal_the_lock(
        node, {"gpu_health_tools_lock": {"requirements": TOOLS_PINS}}, lambda *_: None
    )


@pytest.mark.parametrize(
    ("installed", "says"),
    [
        ({"pydantic": "2.13.0", "PyYAML": "6.0.4"}, "2.13.0"),
        ({"pydantic": "2.14.4", "PyYAML": "6.0.4", "requests": "2.33.0"}, "['requests']"),
        ({"pydantic": "2.14.4"}, "pyyaml"),
    ],
    ids=["another-version", "an-extra-package", "a-missing-package"],
)
def test_node_tools_off_the_lock_fail(
    health_checks: ModuleType, installed: dict[str, str], says: str
) -> None:
    with pytest.raises(AssertionError, match=re.escape(says)):
        health_checks.test_node_tools_equal_the_lock(
            _tools_node(installed),
            {"gpu_health_tools_lock": {"requirements": TOOLS_PINS}},
            lambda *_: None,
        )


def _expected(**changes: Any) -> str:
    entry = {**P5_EXPECTED, "driver_version": "595.91.07"}
    return json.dumps({"p5.48xlarge": {**entry, **changes}})


def test_gate_expect_file_of_the_catalog_passes(health_checks: ModuleType) -> None:
    node = CannedHost({EXPECT_FILE: _expected()})
    health_checks.test_gate_expects_what_the_catalog_says(node, HEALTH_NODEFORGE)


@pytest.mark.parametrize(
    "text",
    [
        _expected(driver_version="580.95.05"),
        _expected(gpu_count=4),
        CannedResult(1, "", "No such file"),
    ],
    ids=["another-driver", "another-count", "missing"],
)
def test_gate_expect_file_off_the_catalog_fails(
    health_checks: ModuleType, text: str | CannedResult
) -> None:
    with pytest.raises(AssertionError):
        health_checks.test_gate_expects_what_the_catalog_says(
            CannedHost({EXPECT_FILE: text}), HEALTH_NODEFORGE
        )


def _units_node(dropin: str | CannedResult) -> CannedHost:
    gate = "/usr/local/libexec/nodeforge/hardware-gate"
    answers: dict[str, str | CannedResult] = {
        "cat /etc/systemd/system/slurmd.service.d/nodeforge-health-gate.conf": dropin
    }
    for unit in ("nodeforge-xid-watch.service", "nodeforge-health-gate.service"):
        answers[f"systemctl is-enabled {unit}"] = "enabled"
        answers[UNIT_TEXT % (unit, unit, unit)] = f"[Service]\nExecCondition={gate} gpu\n"
    return CannedHost(answers)


GATE_DROPIN = (
    "[Unit]\nRequires=nodeforge-health-gate.service\nAfter=nodeforge-health-gate.service\n"
)


def test_gated_unit_that_requires_the_gate_passes(health_checks: ModuleType) -> None:
    health_checks.test_watcher_and_gate_enabled_before_the_gated_units(
        _units_node(GATE_DROPIN), {"gpu_health_gated_units": ["slurmd.service"]}
    )


@pytest.mark.parametrize(
    ("dropin", "says"),
    [
        (CannedResult(1, "", "No such file or directory"), "slurmd.service does not require"),
        ("[Unit]\nAfter=nodeforge-health-gate.service\n", "After="),
    ],
    ids=["no-drop-in", "ordered-but-not-required"],
)
def test_gated_unit_that_does_not_require_the_gate_fails(
    health_checks: ModuleType, dropin: str | CannedResult, says: str
) -> None:
    with pytest.raises(AssertionError, match=re.escape(says)):
        health_checks.test_watcher_and_gate_enabled_before_the_gated_units(
            _units_node(dropin), {"gpu_health_gated_units": ["slurmd.service"]}
        )
