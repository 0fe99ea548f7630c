"""NCCL at the stack's build, held, loaded at that version; nccl-tests built against it, the
installer's Open MPI and the toolkit, for the compute capabilities asked for."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from nodeforge.probes import file_text

BUILD = "2.27.7-1+cuda12.9"
LIB = "/usr/lib/x86_64-linux-gnu"
PREFIX = "/opt/nccl-tests"
# the collectives the validation suite and users run; the release builds ten *_perf in all
PERF = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]


@pytest.mark.parametrize("package", ["libnccl2", "libnccl-dev"])
def test_package_at_the_stack_build_and_held(host: Any, package: str) -> None:
    assert host.package(package).version == BUILD
    assert package in host.run("apt-mark showhold").stdout.split()


def test_pin_names_the_exact_build(host: Any) -> None:
    text = file_text(host, "/etc/apt/preferences.d/nodeforge-10-nccl") or ""
    assert f"Pin: version {BUILD}" in text.splitlines()


def test_loaded_library_answers_the_version(host: Any) -> None:
    probe = host.run(
        "python3 -c 'import ctypes; v = ctypes.c_int(); "
        'ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print(v.value)\''
    )
    assert probe.stdout.strip() == "22707", probe.stderr


@pytest.mark.parametrize("name", PERF)
def test_perf_binary_is_installed(host: Any, name: str) -> None:
    binary = host.file(f"{PREFIX}/bin/{name}_perf")
    assert binary.is_file and binary.mode == 0o755


def test_only_the_builds_binaries_are_installed(host: Any) -> None:
    assert len(host.file(f"{PREFIX}/bin").listdir()) == 10


def test_nccl_tests_link_the_packaged_nccl_and_the_installers_mpi(host: Any) -> None:
    linked = host.run(f"LD_LIBRARY_PATH=/opt/amazon/openmpi/lib ldd {PREFIX}/bin/all_reduce_perf")
    # merged /usr: the loader may name /lib for /usr/lib
    packaged = r"libnccl\.so\.2 => (/usr)?/lib/x86_64-linux-gnu/libnccl\.so\.2 "
    assert re.search(packaged, linked.stdout), linked.stdout
    assert "libmpi.so.40 => /opt/amazon/openmpi/lib/libmpi.so.40" in linked.stdout
    assert "not found" not in linked.stdout
    owner = host.run(f"dpkg-query --search $(readlink -f {LIB}/libnccl.so.2)")
    assert owner.stdout.startswith("libnccl2:"), owner.stdout


def test_binaries_target_each_compute_capability(host: Any) -> None:
    found = host.run(f"grep -a -o 'nvcc_gencode=[ -~]*' {PREFIX}/bin/all_reduce_perf").stdout
    assert found.strip() == (
        "nvcc_gencode=-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100"
    )


def test_run_loads_that_nccl(host: Any) -> None:
    run = host.run(f"LD_LIBRARY_PATH=/opt/amazon/openmpi/lib {PREFIX}/bin/all_reduce_perf")
    # no GPU here: the stand-in stops as the real one does, after NCCL loaded
    assert "NCCL version code 22707" in run.stdout
    assert run.rc != 0


def test_record_names_what_the_build_used(host: Any) -> None:
    record = json.loads(file_text(host, f"{PREFIX}/nodeforge-build.json") or "{}")
    assert record["nccl"] == BUILD
    assert record["version"] == "2.17.6"
    assert record["mpi_home"] == "/opt/amazon/openmpi"
    assert record["cuda_home"] == "/usr/local/cuda-12.9"


def test_no_build_directory_left(host: Any) -> None:
    assert not host.file("/var/tmp/nodeforge-nccl-tests").exists


def test_plugin_and_nccl_resolve_side_by_side(host: Any) -> None:
    cache = host.run("ldconfig -p").stdout
    # merged /usr: the cache names /lib for /usr/lib
    assert re.search(r"libnccl\.so\.2 \(libc6,x86-64\) => (/usr)?/lib/x86_64-linux-gnu/", cache)
    plugin = "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    assert f"libnccl-net-ofi.so (libc6,x86-64) => {plugin}" in cache
