"""cuda_toolkit layer: every toolkit of the stack at its exact version, held; /usr/local/cuda on
the stack's default, nvcc on a login shell's PATH reporting it, the default's libcudart first in
the linker's cache; cuDNN at the stack's version for the default's CUDA major; at target stage the
driver runs the default toolkit's CUDA."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodeforge.probes import held_packages, loader_paths, package_status, package_version
from nodeforge.report import not_applicable
from nodeforge.versions import Version

pytestmark = pytest.mark.layer("cuda_toolkit")
# Debian's nvidia-cuda-toolkit lays its CUDA_HOME-shaped tree out here (source: distro).
DISTRO_HOME = "/usr/lib/cuda"


def _cuda(nodeforge: dict[str, Any]) -> dict[str, Any]:
    cuda: dict[str, Any] = nodeforge["stack"]["cuda"]
    return cuda


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _home(nodeforge: dict[str, Any]) -> str:
    cuda = _cuda(nodeforge)
    if cuda["source"] == "distro":
        return DISTRO_HOME
    return f"/usr/local/cuda-{_minor(cuda['default'])}"


def _expected_packages(nodeforge: dict[str, Any]) -> dict[str, str]:
    """Package -> version pattern (fnmatch-style '*'), by NVIDIA's or Debian's names."""
    cuda = _cuda(nodeforge)
    if cuda["source"] == "distro":
        # Debian carries the release after a tilde: 12.4.131~12.4.1-2
        return {"nvidia-cuda-toolkit": f"*~{cuda['default']}-*"}
    packages = {f"cuda-toolkit-{_minor(v).replace('.', '-')}": f"{v}-1" for v in cuda["toolkits"]}
    if cuda.get("cudnn"):
        major = cuda["cudnn"].split(".")[0]
        packages[f"libcudnn{major}-cuda-{cuda['default'].split('.')[0]}"] = f"{cuda['cudnn']}-1"
    return packages


def _matches(version: str | None, pattern: str) -> bool:
    if version is None:
        return False
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, version) is not None


def test_toolkits_at_the_stack_versions(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    expected = _expected_packages(nodeforge)
    actual = {package: package_version(host, package) for package in expected}
    record_property("declared", expected)
    record_property("actual", actual)
    for package, pattern in expected.items():
        assert package_status(host, package) == "installed", package
        assert _matches(actual[package], pattern), (package, actual[package], pattern)


def test_packages_held(host: Any, nodeforge: dict[str, Any]) -> None:
    missing = set(_expected_packages(nodeforge)) - held_packages(host)
    assert not missing, f"not held: {sorted(missing)}"


def test_usr_local_cuda_is_the_default(host: Any, nodeforge: dict[str, Any]) -> None:
    link = host.file("/usr/local/cuda")
    assert link.is_symlink, "/usr/local/cuda is missing or not a link"
    assert link.linked_to == _home(nodeforge)


def test_nvcc_on_a_login_shell_path(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    default = _cuda(nodeforge)["default"]
    shown = host.run("bash -lc 'nvcc --version'")
    assert shown.rc == 0, f"nvcc is not on a login shell's PATH: {shown.stderr.strip()}"
    found = re.search(r"release (\d+\.\d+)", shown.stdout)
    record_property("declared", _minor(default))
    record_property("actual", found.group(1) if found else None)
    assert found is not None and found.group(1) == _minor(default), shown.stdout


def test_libcudart_from_the_default(host: Any, nodeforge: dict[str, Any]) -> None:
    cuda = _cuda(nodeforge)
    major, minor = cuda["default"].split(".")[:2]
    # CUDA 11's runtime soname carries ".0" (libcudart.so.11.0); from 12 on the major alone
    soname = f"libcudart.so.{major}.0" if major == "11" else f"libcudart.so.{major}"
    listed = loader_paths(host, soname)
    assert listed, f"{soname} is not in the linker cache"
    resolved = host.run("readlink -f %s", listed[0]).stdout.strip()
    if cuda["source"] == "distro":
        # Debian's one toolkit keeps its runtime in the multiarch folder, at the component's
        # own patch level (libcudart.so.11.8.89 for CUDA 11.8.0)
        pattern = rf"/usr/lib/[a-z0-9_]+-linux-gnu/libcudart\.so\.{major}\.{minor}\.\d+"
        assert re.fullmatch(pattern, resolved), f"{soname} resolves to {resolved}"
    else:
        assert resolved.startswith(f"{_home(nodeforge)}/"), f"{soname} resolves to {resolved}"


def test_cudnn_at_the_stack_version(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    cuda = _cuda(nodeforge)
    if not cuda.get("cudnn"):
        not_applicable(f"stack {nodeforge['stack']['name']} installs no cuDNN")
    declared = cuda["cudnn"]
    major = declared.split(".")[0]
    listed = loader_paths(host, f"libcudnn.so.{major}")
    assert listed, f"libcudnn.so.{major} is not in the linker cache"
    resolved = host.run("readlink -f %s", listed[0]).stdout.strip()
    record_property("declared", declared)
    record_property("actual", resolved)
    # the library file carries major.minor.patch (libcudnn.so.9.10.2); the build number is the
    # package's
    assert resolved.endswith(f"libcudnn.so.{'.'.join(declared.split('.')[:3])}"), resolved
    # with the development packages: the header itself on rpm, the alternative over the
    # multiarch cudnn_version_v<major>.h on apt
    header = "/usr/include/cudnn_version.h"
    if host.file(header).exists:
        text = host.file(header).content_string
        defines = dict(re.findall(r"#define (CUDNN_(?:MAJOR|MINOR|PATCHLEVEL)) (\d+)", text))
        found = ".".join(
            defines.get(k, "?") for k in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")
        )
        assert found == ".".join(declared.split(".")[:3]), f"{header} says {found}"


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_driver_runs_the_default(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    default = _minor(_cuda(nodeforge)["default"])
    shown = host.run("nvidia-smi")
    assert shown.rc == 0, shown.stderr
    found = re.search(r"CUDA Version:\s*(\d+\.\d+)", shown.stdout)
    assert found is not None, shown.stdout
    record_property("declared", default)
    record_property("actual", found.group(1))
    assert Version(found.group(1)) >= Version(default), (
        f"the driver runs CUDA {found.group(1)}, the default toolkit is {default}"
    )
