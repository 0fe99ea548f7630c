"""What the cuda_toolkit role leaves in a container: CUDA 12.9.1 (the default) and 13.0.2 side by
side from the stub NVIDIA repository at their exact versions, held with their components;
/usr/local/cuda on 12.9 through update-alternatives in manual mode although 13.0 has the higher
priority; nvcc on a login shell's PATH; libcudart from the default first in the linker's cache;
cuDNN 9.10.2.21 for CUDA 12 where each format puts it. Debian 13 through apt, the AL2023
stand-in through dnf."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodeforge.probes import (
    file_text,
    held_packages,
    loader_paths,
    package_status,
    package_version,
    uses_rpm,
)

DEFAULT = "/usr/local/cuda-12.9"
OTHER = "/usr/local/cuda-13.0"
CUDNN = "9.10.2.21-1"
# what the metapackages pulled in, at the stub's component versions (CUDA 12.9 U1, 13.0 U2)
COMPONENTS = {
    "cuda-nvcc-12-9": "12.9.86-1",
    "cuda-cudart-12-9": "12.9.79-1",
    "cuda-toolkit-12-9-config-common": "12.9.79-1",
    "cuda-nvcc-13-0": "13.0.88-1",
    "cuda-cudart-13-0": "13.0.96-1",
    "cuda-toolkit-13-0-config-common": "13.0.96-1",
}


def _packages(host: Any) -> dict[str, str]:
    """The packages the role installs by name: cuDNN's development package is -devel- in
    NVIDIA's rpm repositories, -dev- in its apt ones."""
    dev = "devel" if uses_rpm(host) else "dev"
    return {
        "cuda-toolkit-12-9": "12.9.1-1",
        "cuda-toolkit-13-0": "13.0.2-1",
        "libcudnn9-cuda-12": CUDNN,
        f"libcudnn9-{dev}-cuda-12": CUDNN,
        "libcudnn9-headers-cuda-12": CUDNN,
    }


def _cudnn_lib(host: Any) -> str:
    return "/usr/lib64" if uses_rpm(host) else "/usr/lib/x86_64-linux-gnu"


def _query(host: Any, name: str) -> dict[str, str]:
    """update-alternatives --query's header fields (Status, Value, ...): Debian's tool, which
    the AL2023 stand-in uses as well."""
    result = host.run("update-alternatives --query %s", name)
    assert result.rc == 0, result.stderr
    header = result.stdout.split("\n\n", 1)[0]
    return dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)


def test_packages_at_the_stack_versions(host: Any) -> None:
    for package, version in {**_packages(host), **COMPONENTS}.items():
        assert package_status(host, package) == "installed", package
        assert package_version(host, package) == version, package


def test_held_with_their_components(host: Any) -> None:
    missing = {*_packages(host), *COMPONENTS} - held_packages(host)
    assert not missing, f"not held: {sorted(missing)}"


def test_locked_at_the_installed_versions(host: Any) -> None:
    if not uses_rpm(host):
        pytest.skip("apt-mark hold keeps whatever is installed, it names no version")
    locks = set(host.run("dnf --quiet versionlock list").stdout.split())
    for package, version in {**_packages(host), **COMPONENTS}.items():
        assert f"{package}-0:{version}.*" in locks, (package, sorted(locks))


def test_toolkits_side_by_side(host: Any) -> None:
    for home in (DEFAULT, OTHER):
        assert host.file(f"{home}/bin/nvcc").is_file, home
        assert host.file(f"{home}/lib64").is_symlink, home


def test_usr_local_cuda_is_the_default(host: Any) -> None:
    assert host.file("/usr/local/cuda").linked_to == DEFAULT
    # selected in manual mode: 13.0 registered the higher priority, and a later package
    # script cannot move the link back to it
    cuda = _query(host, "cuda")
    assert cuda["Status"] == "manual", cuda
    assert cuda["Value"] == DEFAULT, cuda
    assert cuda["Best"] == OTHER, cuda
    # the per-major links NVIDIA's packages make: the default's major on the default
    assert _query(host, "cuda-12")["Value"] == DEFAULT
    assert _query(host, "cuda-13")["Value"] == OTHER


def test_nvcc_on_a_login_shell_path(host: Any) -> None:
    profile = file_text(host, "/etc/profile.d/nodeforge-cuda.sh")
    assert profile is not None and "/usr/local/cuda/bin" in profile
    shown = host.run("bash -lc 'command -v nvcc && nvcc --version && echo CUDA_HOME=$CUDA_HOME'")
    assert shown.rc == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "/usr/local/cuda/bin/nvcc", lines
    assert "Cuda compilation tools, release 12.9, V12.9.86" in lines, lines
    assert "CUDA_HOME=/usr/local/cuda" in lines, lines
    # sourced again (a nested login shell), the script does not add the folder twice
    twice = host.run("bash -lc '. /etc/profile.d/nodeforge-cuda.sh; echo $PATH'").stdout
    assert twice.split(":").count("/usr/local/cuda/bin") == 1, twice


def test_libcudart_from_the_default_first(host: Any) -> None:
    conf = file_text(host, "/etc/ld.so.conf.d/000-nodeforge-cuda.conf")
    assert conf is not None and conf.splitlines()[-1] == "/usr/local/cuda/lib64"
    # read before NVIDIA's own entries (000_cuda.conf, 988_cuda-12.conf)
    listed = host.run("ls /etc/ld.so.conf.d").stdout.split()
    assert listed.index("000-nodeforge-cuda.conf") < listed.index("000_cuda.conf"), listed
    cudart12 = loader_paths(host, "libcudart.so.12")
    assert cudart12, "libcudart.so.12 is not in the linker cache"
    resolved = host.run("readlink -f %s", cudart12[0]).stdout.strip()
    assert resolved == f"{DEFAULT}/targets/x86_64-linux/lib/libcudart.so.12.9.79", cudart12
    # the other toolkit's runtime (another soname) is there as well
    cudart13 = loader_paths(host, "libcudart.so.13")
    assert cudart13, "libcudart.so.13 is not in the linker cache"
    assert host.run("readlink -f %s", cudart13[0]).stdout.strip().startswith(f"{OTHER}/")


def test_the_loader_gives_the_default_runtime(host: Any) -> None:
    # cudaRuntimeGetVersion of the library the dynamic loader picks by soname alone
    script = (
        "import ctypes; lib = ctypes.CDLL('libcudart.so.12'); v = ctypes.c_int(); "
        "lib.cudaRuntimeGetVersion(ctypes.byref(v)); print(v.value)"
    )
    result = host.run("python3 -c %s", script)
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == "12090"


def test_cudnn_version_header(host: Any) -> None:
    # /usr/include/cudnn_version.h on both: the header itself (rpm), or the alternative over
    # the multiarch folder's per-major header (deb)
    header = "/usr/include/cudnn_version.h"
    if uses_rpm(host):
        owner = host.run("rpm --query --file %s", header)
        assert owner.stdout.strip() == f"libcudnn9-headers-cuda-12-{CUDNN}.x86_64", owner.stdout
    else:
        assert host.file(header).linked_to == "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"
    text = file_text(host, header)
    assert text is not None, "cuDNN's version header is missing"
    defines = dict(re.findall(r"#define (CUDNN_\w+) (\d+)", text))
    assert (defines["CUDNN_MAJOR"], defines["CUDNN_MINOR"], defines["CUDNN_PATCHLEVEL"]) == (
        "9",
        "10",
        "2",
    )


def test_cudnn_library(host: Any) -> None:
    soname = f"{_cudnn_lib(host)}/libcudnn.so.9"
    assert host.run("readlink -f %s", soname).stdout.strip() == f"{soname}.10.2"
    loaded = host.run("python3 -c %s", f"import ctypes; ctypes.CDLL({soname!r})")
    assert loaded.rc == 0, loaded.stderr


def test_cudnn_in_the_linker_cache(host: Any) -> None:
    cudnn = loader_paths(host, "libcudnn.so.9")
    assert cudnn, "libcudnn.so.9 is not in the linker cache"
    assert host.run("readlink -f %s", cudnn[0]).stdout.strip().endswith("libcudnn.so.9.10.2")
