"""Every role input a target derives from the catalog, computed once, here.

`nodeforge render` writes these at the top level of the resolved vars, so the playbooks, Packer
and Molecule hand the roles exactly what `nodeforge check` judged; nothing downstream (Jinja in
group_vars, a role's vars/) computes them again. Each input names the catalog field that owns
it: a layered `vars:` entry that sets one is refused with that name (render.py), since it would
reach the node without passing the rules.

Inputs are emitted for the layers the image enables. The manifest role takes the document's own
`nodeforge_manifest` (its default), which is written once. A layer whose stack section is
missing gets none: rule `layer-section` refuses that target before any render.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeforge.catalog.models import AptRepository, Artifact
from nodeforge.lock import PYPI, index_urls_for, read_lock
from nodeforge.mirror import resolve_url
from nodeforge.node_tools import image_tools_lock
from nodeforge.target import Target

# The EFA installer's Open MPI (efa_mpi defaults to openmpi4, installed under this prefix).
EFA_MPI_HOME = "/opt/amazon/openmpi"
MODE = "nodeforge render --mode"

DEBIAN_ARCHIVE = "http://deb.debian.org/debian"

Inputs = dict[str, tuple[Any, str]]
"""Role variable -> (value, the catalog field that owns it)."""


@dataclass(frozen=True)
class Context:
    """What a role input is derived from. The inputs' names and owners depend on the target
    alone (rule `derived-vars` reads them with the defaults); their values on all of it."""

    target: Target
    mode: str = "image"
    catalog_root: Path = Path()
    mirror: str | None = None
    manifest: Mapping[str, Any] = field(default_factory=dict)
    refusals: Mapping[str, list[str]] = field(default_factory=dict)
    """Per layer, the errors of the compatibility rules that belong to it (render fills it)."""

    def refused(self, layer: str) -> Inputs:
        """`<layer>_refusals`: the rules' own text, which the role's preflight asserts empty,
        so a role run with hand-made vars refuses what `nodeforge check` refuses, in its words."""
        return {f"{layer}_refusals": (list(self.refusals.get(layer, [])), "nodeforge check")}

    def url(self, url: str) -> str | None:
        return resolve_url(url, self.target, self.mirror)

    def artifact(self, name: str) -> Artifact:
        return self.target.stack.artifacts[name]  # the stack model checks every reference

    def repository(self, name: str) -> dict[str, str | None]:
        """A repository's URL and key, the rpm key on a dnf OS; URLs through the mirror."""
        repository: AptRepository = self.target.stack.repositories[name]
        key = repository.rpm_key if self.target.os.package_family == "dnf" else None
        return {
            "url": self.url(repository.url),
            "key_url": self.url(key.key_url if key else repository.key_url),
            "gpg_fingerprint": key.gpg_fingerprint if key else repository.gpg_fingerprint,
        }


def _base(c: Context) -> Inputs:
    # None where the OS lacks the image's architecture: rule `arch` refuses that target, so
    # render never emits it, but check and show still ask every input's owner
    os_arch = c.target.os_arch
    kernel = "the OS entry's architectures.<arch>.kernel"
    return {
        "base_mode": (c.mode, MODE),
        "base_kernel_image_packages": (
            [os_arch.kernel.image_package] if os_arch else None,
            kernel,
        ),
        "base_kernel_headers_packages": (
            list(os_arch.kernel.headers_packages) if os_arch else None,
            kernel,
        ),
    }


def _nvidia_repo(c: Context) -> Inputs:
    """NVIDIA's CUDA repository, a dependency of the NVIDIA layers (no layer of its own)."""
    repo = c.repository("cuda")
    owner = "the stack's repositories.cuda"
    driver = c.target.stack.driver
    return {
        "nvidia_repo_url": (repo["url"], owner),
        "nvidia_repo_key_url": (repo["key_url"], owner),
        "nvidia_repo_gpg_fingerprint": (repo["gpg_fingerprint"], owner),
        "nvidia_repo_driver_branch": (driver.branch, "the stack's driver.branch"),
        "nvidia_repo_driver_flavour": (c.target.driver_flavour(), "the stack's driver.flavour"),
    }


def _nvidia_driver(c: Context) -> Inputs:
    driver = c.target.stack.driver
    return {
        "nvidia_driver_mode": (c.mode, MODE),
        # distro: Debian's own archive (its non-free component), through the mirror too
        "nvidia_driver_distro_archive_url": (c.url(DEBIAN_ARCHIVE), "the mirror (user's vars)"),
        "nvidia_driver_source": (driver.source, "the stack's driver.source"),
        "nvidia_driver_branch": (driver.branch, "the stack's driver.branch"),
        "nvidia_driver_version": (driver.version, "the stack's driver.version"),
        "nvidia_driver_flavour": (c.target.driver_flavour(), "the stack's driver.flavour"),
    }


def _nvidia_fabric(c: Context) -> Inputs:
    driver, interconnect = c.target.stack.driver, c.target.profile.interconnect
    # {} where compat.yml names no packages for the branch: rule `fabric-naming` refuses that
    # target, so render never emits it, but check and show still ask every input's owner
    packages = c.target.fabric_packages() or {}
    owner = "the profile's interconnect"
    return {
        "nvidia_fabric_mode": (c.mode, MODE),
        "nvidia_fabric_driver_branch": (driver.branch, "the stack's driver.branch"),
        "nvidia_fabric_driver_version": (driver.version, "the stack's driver.version"),
        "nvidia_fabric_fabric_manager": (interconnect.fabric_manager, owner),
        "nvidia_fabric_nvlsm": (interconnect.nvlsm, owner),
        "nvidia_fabric_imex": (interconnect.imex, owner),
        "nvidia_fabric_fabric_manager_package": (
            packages.get("fabric_manager"),
            "compat.yml fabric_naming",
        ),
        "nvidia_fabric_imex_package": (packages.get("imex"), "compat.yml fabric_naming"),
    }


def _cuda_toolkit(c: Context) -> Inputs:
    cuda = c.target.stack.cuda
    return {
        "cuda_toolkit_source": (cuda.source, "the stack's cuda.source"),
        "cuda_toolkit_toolkits": (list(cuda.toolkits), "the stack's cuda.toolkits"),
        "cuda_toolkit_default": (cuda.default, "the stack's cuda.default"),
        "cuda_toolkit_cudnn": (cuda.cudnn or "", "the stack's cuda.cudnn"),
    }


def _gdrcopy(c: Context) -> Inputs:
    gdrcopy = c.target.stack.gdrcopy
    if gdrcopy is None:
        return {}
    artifact = c.artifact(gdrcopy.artifact)
    owner = "the stack's gdrcopy artifact"
    return {
        "gdrcopy_mode": (c.mode, MODE),
        "gdrcopy_version": (gdrcopy.version, "the stack's gdrcopy.version"),
        "gdrcopy_url": (c.url(artifact.url), owner),
        "gdrcopy_sha256": (artifact.sha256, owner),
        # the tools need nvcc and libcuda: built where the image has a CUDA toolkit
        "gdrcopy_tools": (c.target.layer("cuda_toolkit"), "the image's layers"),
    }


def _efa(c: Context) -> Inputs:
    efa = c.target.stack.efa
    if efa is None:
        return {}
    artifact = c.artifact(efa.artifact)
    owner = "the stack's efa artifact"
    return {
        "efa_mode": (c.mode, MODE),
        "efa_installer_version": (efa.installer_version, "the stack's efa.installer_version"),
        "efa_installer_url": (c.url(artifact.url), owner),
        "efa_installer_sha256": (artifact.sha256, owner),
        "efa_installer_signature_url": (
            c.url(artifact.signature_url) if artifact.signature_url else None,
            owner,
        ),
        "efa_installer_key_url": (c.url(artifact.key_url) if artifact.key_url else None, owner),
        "efa_installer_gpg_fingerprint": (artifact.gpg_fingerprint, owner),
    }


def _aws_ofi_nccl(c: Context) -> Inputs:
    plugin = c.target.stack.aws_ofi_nccl
    if plugin is None:
        return {}
    version = c.target.ofi_nccl_version()
    return {
        "aws_ofi_nccl_mode": (c.mode, MODE),
        "aws_ofi_nccl_source": (plugin.source, "the stack's aws_ofi_nccl.source"),
        "aws_ofi_nccl_version": (
            str(version) if version else None,
            "the stack's aws_ofi_nccl.version (or the EFA installer's bundle, compat.yml)",
        ),
        "aws_ofi_nccl_require_efa": (
            c.target.profile.network.efa_interfaces > 0,
            "the profile's network.efa_interfaces",
        ),
    }


def _nccl(c: Context) -> Inputs:
    nccl, cuda = c.target.stack.nccl, c.target.stack.cuda
    if nccl is None:
        return {}
    tests = c.artifact(nccl.tests_artifact) if nccl.tests_artifact else None
    owner = "the stack's nccl.tests_artifact"
    return {
        "nccl_mode": (c.mode, MODE),
        "nccl_source": (nccl.source, "the stack's nccl.source"),
        "nccl_version": (nccl.version, "the stack's nccl.version"),
        # NVIDIA builds NCCL per CUDA minor: the stack's default toolkit picks the build.
        "nccl_cuda_version": (".".join(cuda.default.split(".")[:2]), "the stack's cuda.default"),
        "nccl_tests": (tests is not None, owner),
        "nccl_tests_version": (nccl.tests_version, "the stack's nccl.tests_version"),
        "nccl_tests_url": (c.url(tests.url) if tests else None, owner),
        "nccl_tests_sha256": (tests.sha256 if tests else None, owner),
        "nccl_tests_compute_capabilities": (
            list(c.manifest.get("compute_capabilities", [])),
            "the image's profiles (gpu.compute_capability)",
        ),
        "nccl_tests_mpi_home": (
            EFA_MPI_HOME if c.target.layer("efa") else "",
            "the image's layers (efa)",
        ),
    }


def _python_ml(c: Context) -> Inputs:
    frameworks = c.target.stack.frameworks
    if frameworks is None:
        return {}
    arch = c.target.image.arch
    catalog = Path(os.path.abspath(c.catalog_root))
    environments = []
    for name, environment in frameworks.environments.items():
        if arch not in environment.locks:
            continue  # the locks rule refuses the image
        torch = frameworks.torch_of(name)
        locked = c.target.compat.locked_torch(torch.version, torch.variant)
        environments.append(
            {
                "name": name,
                # the lock from the catalog in use, not the shipped one
                "lock": str(catalog / environment.locks[arch]),
                # through the mirror when one is set, like every other download
                "index_urls": [c.url(url) for url in index_urls_for(locked)],
            }
        )
    return {
        "python_ml_python": (frameworks.python, "the stack's frameworks.python"),
        "python_ml_environments": (
            environments,
            "the stack's frameworks.environments, compat.yml torch_pypi and the --vars file's "
            "mirror",
        ),
    }


def _container_runtime(c: Context) -> Inputs:
    runtime = c.target.stack.container_runtime
    if runtime is None:
        return {}
    repo = c.repository("nvidia_container_toolkit")
    owner = "the stack's repositories.nvidia_container_toolkit"
    return {
        "container_runtime_mode": (c.mode, MODE),
        "container_runtime_engine": (runtime.engine, "the stack's container_runtime.engine"),
        "container_runtime_toolkit_version": (
            runtime.toolkit_version,
            "the stack's container_runtime.toolkit_version",
        ),
        "container_runtime_toolkit_repo_url": (repo["url"], owner),
        "container_runtime_toolkit_key_url": (repo["key_url"], owner),
        "container_runtime_toolkit_gpg_fingerprint": (repo["gpg_fingerprint"], owner),
    }


def _enroot(c: Context) -> Inputs:
    enroot = c.target.stack.enroot
    if enroot is None:
        return {}
    packages = [c.artifact(name) for name in enroot.packages.get(c.target.image.arch, [])]
    pyxis = enroot.pyxis
    pyxis_artifact = c.artifact(pyxis.artifact) if pyxis else None
    owner = "the stack's enroot.pyxis"
    return {
        "enroot_mode": (c.mode, MODE),
        "enroot_version": (enroot.version, "the stack's enroot.version"),
        # the release's .debs for this architecture, in the stack's order
        "enroot_packages": (
            [{"url": c.url(p.url), "sha256": p.sha256} for p in packages],
            "the stack's enroot.packages",
        ),
        "enroot_pyxis": (pyxis is not None, owner),
        "enroot_pyxis_version": (pyxis.version if pyxis else "", owner),
        "enroot_pyxis_url": (c.url(pyxis_artifact.url) if pyxis_artifact else "", owner),
        "enroot_pyxis_sha256": (pyxis_artifact.sha256 if pyxis_artifact else "", owner),
    }


def _gpu_health(c: Context) -> Inputs:
    stack, arch = c.target.stack, c.target.image.arch
    dcgm = stack.dcgm
    python, relative = image_tools_lock(c.target.os.python, arch)
    catalog = Path(os.path.abspath(c.catalog_root))
    lock = catalog / relative
    # the lock's pins, read here once; a missing or broken lock: rule `node-tools-lock`
    pins = read_lock(lock).versions() if lock.is_file() else {}
    return {
        "gpu_health_mode": (c.mode, MODE),
        "gpu_health_dcgm": (dcgm is not None, "the stack's dcgm"),
        "gpu_health_dcgm_version": (dcgm.version if dcgm else "", "the stack's dcgm.version"),
        # NVIDIA ships DCGM's diagnostics per CUDA major: the one the stack's toolkit has
        "gpu_health_dcgm_cuda_major": (
            int(stack.cuda.default.split(".")[0]),
            "the stack's cuda.default",
        ),
        "gpu_health_expectations": (
            {
                instance_type: {**expected, "driver_version": stack.driver.version}
                for instance_type, expected in c.manifest.get("health_expectations", {}).items()
            },
            "the image's profiles (gpu, network.efa_interfaces, interconnect) and the stack's "
            "driver.version",
        ),
        "gpu_health_tools_python": (python, "the OS entry's python (3.11 at least)"),
        "gpu_health_tools_lock": (
            {"path": str(lock), "requirements": pins},
            f"the catalog's {relative}",
        ),
        "gpu_health_tools_index_url": (c.url(PYPI), "the --vars file's mirror"),
    }


def _image_cleanup(c: Context) -> Inputs:
    return {"image_cleanup_mode": (c.mode, MODE)}


# The NVIDIA repository's inputs come with the first layer that installs from it.
_NVIDIA_REPO_LAYERS = ("nvidia_driver", "nvidia_fabric", "cuda_toolkit", "nccl", "gpu_health")

LAYER_INPUTS: Mapping[str, Callable[[Context], Inputs]] = {
    "base": _base,
    "nvidia_driver": _nvidia_driver,
    "nvidia_fabric": _nvidia_fabric,
    "cuda_toolkit": _cuda_toolkit,
    "gdrcopy": _gdrcopy,
    "efa": _efa,
    "aws_ofi_nccl": _aws_ofi_nccl,
    "nccl": _nccl,
    "python_ml": _python_ml,
    "container_runtime": _container_runtime,
    "enroot": _enroot,
    "gpu_health": _gpu_health,
    "image_cleanup": _image_cleanup,
}


def role_inputs(c: Context) -> Inputs:
    """Every role input of the target's enabled layers, with its owner."""
    inputs: Inputs = {}
    layers = c.target.image.layers
    for layer in layers:
        inputs |= LAYER_INPUTS[layer](c) | c.refused(layer)
    needs_repo = any(layer in layers for layer in _NVIDIA_REPO_LAYERS)
    if needs_repo and "cuda" in c.target.stack.repositories:
        inputs |= _nvidia_repo(c)
    return inputs


def derived_var_problem(name: str, owner: str) -> tuple[str, str]:
    """Message and fix for a layered `vars:` entry that sets a derived role input."""
    return (
        f"'{name}' is a role input that nodeforge derives from {owner}: set here, it would "
        "reach the node without passing the compatibility rules",
        f"remove vars.{name} and change {owner} instead",
    )
