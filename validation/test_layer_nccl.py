"""nccl layer: the stack's NCCL build installed and held, the version programs load equal to it,
the aws-ofi-nccl plugin resolvable beside it, and nccl-tests linked against that NCCL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeforge.probes import file_text, held_packages, package_version
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("nccl")
PACKAGES = ("libnccl2", "libnccl-dev")
NCCL_SONAME = "libnccl.so.2"
LOADED_VERSION = (
    "import ctypes; v = ctypes.c_int(); "
    "ctypes.CDLL('libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(v.value)"
)


def _expected_package_version(nodeforge: dict[str, Any]) -> str:
    """NVIDIA builds each release per CUDA minor: 2.27.7-1+cuda12.9."""
    cuda_minor = ".".join(nodeforge["stack"]["cuda"]["default"].split(".")[:2])
    return f"{nodeforge['stack']['nccl']['version']}+cuda{cuda_minor}"


def _version_code(version: str) -> int:
    major, minor, patch = (int(part) for part in version.partition("-")[0].split("."))
    return major * 10000 + minor * 100 + patch


def _prefix(resolved: dict[str, Any]) -> str:
    return str(resolved.get("nccl_tests_prefix", "/opt/nccl-tests"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_the_stacks_build_and_held(
    host: Any, nodeforge: dict[str, Any], package: str, record_property: Any
) -> None:
    expected = _expected_package_version(nodeforge)
    actual = package_version(host, package)
    record_property("declared", expected)
    record_property("actual", actual)
    assert actual == expected
    assert package in held_packages(host)


def test_programs_load_the_stacks_nccl(host: Any, nodeforge: dict[str, Any]) -> None:
    probe = host.run("python3 -c %s", LOADED_VERSION)
    assert probe.rc == 0, probe.stderr
    assert int(probe.stdout.strip()) == _version_code(nodeforge["stack"]["nccl"]["version"])


def test_plugin_resolves_beside_nccl(host: Any, nodeforge: dict[str, Any]) -> None:
    if not nodeforge["layers"]["aws_ofi_nccl"]:
        not_applicable(f"layer aws_ofi_nccl is not enabled in image {nodeforge['image']}")
    cache = host.run("ldconfig -p").stdout
    assert f"{NCCL_SONAME} (" in cache
    assert "libnccl-net-ofi.so (" in cache


class TestNcclTests:
    @pytest.fixture(autouse=True)
    def _tests_enabled(self, nodeforge: dict[str, Any]) -> None:
        if nodeforge["stack"]["nccl"].get("tests_artifact") is None:
            not_applicable(f"stack {nodeforge['stack']['name']} builds no nccl-tests")

    def test_built_from_the_stacks_release(
        self, host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any]
    ) -> None:
        text = file_text(host, f"{_prefix(resolved)}/nodeforge-build.json")
        assert text is not None, "nccl-tests were not built by the nccl layer"
        record = json.loads(text)
        assert record["version"] == nodeforge["stack"]["nccl"]["tests_version"]
        assert record["nccl"] == _expected_package_version(nodeforge)

    def test_all_reduce_perf_links_the_packaged_nccl(
        self, host: Any, resolved: dict[str, Any]
    ) -> None:
        linked = host.run("ldd %s", f"{_prefix(resolved)}/bin/all_reduce_perf")
        assert linked.rc == 0, linked.stderr
        line = next((entry for entry in linked.stdout.splitlines() if NCCL_SONAME in entry), None)
        assert line is not None, f"all_reduce_perf does not link NCCL: {linked.stdout}"
        path = line.split("=>", 1)[1].split("(", 1)[0].strip()
        # the real file: dpkg knows /usr/lib paths, the loader may print /lib on merged /usr
        owner = host.run("dpkg-query --search %s", host.file(path).linked_to)
        assert owner.stdout.startswith("libnccl2:"), f"{path} is not libnccl2's: {owner.stdout}"
