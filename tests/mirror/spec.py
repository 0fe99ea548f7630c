"""What a mirror holds, and the default: NVIDIA CUDA repo stubs, EFA and GitHub tarballs.

Versions follow the reference stack hopper-2026.11 (REFERENCE_STACKS), so a stack overlay of it
covers every download.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.mirror import container_toolkit
from tests.mirror.aptrepo import RepoSpec
from tests.mirror.cuda import cuda_packages, cuda_rpms
from tests.mirror.dcgm import dcgm_packages, dcgm_rpms
from tests.mirror.debs import DebSpec
from tests.mirror.efa import efa_installer_tarball
from tests.mirror.enroot import enroot_debs, pyxis_tarball
from tests.mirror.gdrcopy import gdrcopy_tarball
from tests.mirror.gpg import STUB_UID
from tests.mirror.kmod import dkms_package, dkms_rpm
from tests.mirror.nccl import nccl_packages, nccl_tests_tarball
from tests.mirror.rpmrepo import ModuleStream, RpmRepoSpec, RpmSpec
from tests.mirror.tarballs import TarballSpec

REFERENCE_STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
"""hopper-2026.11 and blackwell-2026.11, which the versions here follow. No longer shipped (their
labelled torch variants lock only from download.pytorch.org); add_reference_stacks puts them in
a catalog copy."""


def add_reference_stacks(catalog_dir: Path) -> None:
    """Copy the reference stacks into a catalog copy's stacks/."""
    for stack in REFERENCE_STACKS.glob("*.yml"):
        shutil.copyfile(stack, catalog_dir / "stacks" / stack.name)


DRIVER = "580.95.05"
DRIVER_BRANCH = DRIVER.split(".", 1)[0]
CUDA = "12.9.1"
NCCL = "2.27.7-1"
EFA_INSTALLER = "1.51.0"
GDRCOPY = "2.5.1"
NCCL_TESTS = "2.17.6"
# The shipped images' stacks (hopper-2026.12 and what extends it) take newer source tarballs;
# the mirror serves those too, so an overlay of any shipped image finds every artifact.
GDRCOPY_SHIPPED = "2.6"
NCCL_TESTS_SHIPPED = "2.19.6"
CONTAINER_TOOLKIT = "1.18.0-1"
ENROOT = "4.2.1"
PYXIS = "0.24.0"
# DCGM 4 at the upstream version; its packages carry NVIDIA's epoch: 1:4.4.2-1. 4.4.2 keeps the
# 4.0-4.6 layout the stubs model (4.7 split the core into dcgmi, nv-hostengine and libdcgm).
DCGM = "4.4.2"
# NVLSM versions on its own calendar, not the driver's: nvlsm_2025.06.10-1_amd64.deb in
# ubuntu2404/x86_64 (a third-party install guide quotes that file name).
NVLSM = "2025.06.10-1"
CUDA_REPO_HOST = "developer.download.nvidia.com/compute/cuda/repos"
CUDA_REPO_KEY = "3bf863cc.pub"
# NVIDIA signs its rpm repositories (rhel*, amzn2023) with another key than its apt ones
# (NVIDIA/cuda-repo-management README: amzn2023 | D42D0685 | cuda-amzn2023.repo).
CUDA_RPM_REPO_KEY = "D42D0685.pub"
# An older branch on the same repository, offered only through its own stream.
OLD_DRIVER = "575.57.08"


@dataclass(frozen=True)
class MirrorSpec:
    repositories: tuple[RepoSpec, ...] = ()
    tarballs: tuple[TarballSpec, ...] = ()
    key_uid: str = STUB_UID
    key_files: tuple[str, ...] = ()
    """Mirror-root-relative places that publish the armored public key (an artifact's key_url)."""
    rpm_repositories: tuple[RpmRepoSpec, ...] = ()


def nvidia_smi(version: str = DRIVER) -> str:
    """`nvidia-smi --version` and the driver_version query answer; anything else fails as a
    GPU-less host does (exit 9), since build mode never needs a GPU."""
    cuda = "13.0" if _branch(version) >= 580 else "12.x"
    return f"""#!/bin/sh
# nodeforge test stub of nvidia-smi {version}: touches no GPU.
case "$*" in
  *--version*)
    echo "NVIDIA-SMI version  : {version}"
    echo "DRIVER version      : {version}"
    echo "CUDA Version        : {cuda}"
    exit 0 ;;
  *--query-gpu=driver_version*)
    echo "{version}"
    exit 0 ;;
esac
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
"""


def _nvml_files(version: str) -> tuple[dict[str, str | bytes], dict[str, str]]:
    lib = "/usr/lib/x86_64-linux-gnu"
    files: dict[str, str | bytes] = {
        f"{lib}/libnvidia-ml.so.{version}": b"nodeforge test stub: not an ELF library\n"
    }
    return files, {f"{lib}/libnvidia-ml.so.1": f"libnvidia-ml.so.{version}"}


def _cuda_common(deb_suffix: str) -> tuple[DebSpec, ...]:
    short = ".".join(CUDA.split(".")[:2])
    return (
        *cuda_packages(),
        *nccl_packages(NCCL, short),
        DebSpec(
            name="nvidia-fabricmanager",
            version=f"{DRIVER}-1{deb_suffix}",
            summary="Fabric Manager for NVSwitch based systems",
            files=_fabric_manager_files(DRIVER),
        ),
        *_fabric_extras(deb_suffix),
        *dcgm_packages(DCGM),
    )


_UNITS = "/usr/lib/systemd/system"


def _daemon(name: str) -> str:
    """A stand-in daemon that runs until stopped and touches no hardware."""
    return (
        f"#!/bin/sh\n# nodeforge test stub of {name}: no hardware, waits to be stopped\n"
        "exec sleep infinity\n"
    )


def _unit(description: str, exec_start: str) -> str:
    return f"""[Unit]
Description={description} (nodeforge test stub)

[Service]
Type=simple
ExecStart={exec_start}

[Install]
WantedBy=multi-user.target
"""


def _fabric_manager_files(version: str) -> dict[str, str | bytes]:
    return {
        "/usr/bin/nv-fabricmanager": f"#!/bin/sh\necho 'Fabric Manager: {version}'\n",
        "/usr/bin/nvidia-fabricmanager-start.sh": _daemon("nvidia-fabricmanager-start.sh"),
        f"{_UNITS}/nvidia-fabricmanager.service": _unit(
            "NVIDIA fabric manager service", "/usr/bin/nvidia-fabricmanager-start.sh"
        ),
    }


_IMEX_FILES: dict[str, str | bytes] = {
    "/usr/bin/nvidia-imex": _daemon("nvidia-imex"),
    f"{_UNITS}/nvidia-imex.service": _unit("NVIDIA IMEX service", "/usr/bin/nvidia-imex"),
}
_NVLSM_FILES: dict[str, str | bytes] = {"/opt/nvidia/nvlsm/sbin/nvlsm": _daemon("nvlsm")}
_PERSISTENCED_FILES: dict[str, str | bytes] = {
    "/usr/bin/nvidia-persistenced": _daemon("nvidia-persistenced"),
    f"{_UNITS}/nvidia-persistenced.service": _unit(
        "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced"
    ),
}


def _fabric_extras(deb_suffix: str) -> tuple[DebSpec, ...]:
    """IMEX and the NVLink 5 parts beside fabric manager, with their 580 names: nvidia-imex and
    libnvsdm at the driver version, nvlsm on its own version (NVIDIA/gpu-driver-container
    ubuntu24.04/install.sh installs them so for branches >= 580)."""
    lib = "/usr/lib/x86_64-linux-gnu"
    return (
        DebSpec(
            name="nvidia-imex",
            version=f"{DRIVER}-1{deb_suffix}",
            summary="NVIDIA IMEX service for multi-node NVLink",
            files=_IMEX_FILES,
        ),
        DebSpec(
            name="libnvsdm",
            version=f"{DRIVER}-1{deb_suffix}",
            summary="NVIDIA NVSwitch Device Monitoring library",
            section="libs",
            files={f"{lib}/libnvsdm.so.{DRIVER}": b"nodeforge test stub: not an ELF library\n"},
        ),
        DebSpec(
            name="nvlsm",
            version=NVLSM,
            summary="NVIDIA NVLink Subnet Manager",
            files=_NVLSM_FILES,
        ),
    )


def _persistenced(version: str) -> DebSpec:
    return DebSpec(
        name="nvidia-persistenced",
        version=version,
        summary="NVIDIA Persistence Daemon",
        files=_PERSISTENCED_FILES,
    )


def ubuntu2404_packages() -> tuple[DebSpec, ...]:
    version = f"{DRIVER}-0ubuntu1"
    files, links = _nvml_files(DRIVER)
    compute = f"libnvidia-compute-{DRIVER_BRANCH}"
    utils = f"nvidia-utils-{DRIVER_BRANCH}"
    return (
        DebSpec(
            name=compute,
            version=version,
            summary="NVIDIA libcompute package",
            section="libs",
            files=files,
            links=links,
        ),
        DebSpec(
            name=utils,
            version=version,
            summary="NVIDIA driver support binaries",
            depends=(f"{compute} (= {version})",),
            files={"/usr/bin/nvidia-smi": nvidia_smi()},
        ),
        DebSpec(
            name=f"nvidia-driver-{DRIVER_BRANCH}-open",
            version=version,
            summary="NVIDIA driver (open kernel) metapackage",
            depends=(f"{utils} (= {version})", f"{compute} (= {version})"),
        ),
        *_cuda_common(""),
    )


# kernel-open/nvidia/nv-p2p.h: the version macro gdrdrv checks; no nvidia_p2p_* function is
# declared, as the stand-in gdrdrv calls none (molecule/gdrcopy/prepare.yml writes the same).
_P2P_HEADER = {
    "nvidia/nv-p2p.h": (
        "/* nodeforge test stand-in of the NVIDIA driver's kernel-open/nvidia/nv-p2p.h */\n"
        "#ifndef _NV_P2P_H_\n"
        "#define _NV_P2P_H_\n"
        "#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002\n"
        "#endif\n"
    )
}


def debian13_packages() -> tuple[DebSpec, ...]:
    version = f"{DRIVER}-1"
    files, links = _nvml_files(DRIVER)
    return (
        DebSpec(
            name=f"nvidia-driver-pinning-{DRIVER_BRANCH}",
            version=version,
            architecture="all",
            summary=f"Pins the NVIDIA driver to branch {DRIVER_BRANCH}",
        ),
        DebSpec(
            name="libnvidia-ml1",
            version=version,
            summary="NVIDIA Management Library (NVML)",
            section="libs",
            files=files,
            links=links,
        ),
        DebSpec(
            name="nvidia-driver-cuda",
            version=version,
            summary="NVIDIA driver CUDA integration",
            depends=(f"libnvidia-ml1 (= {version})",),
            files={"/usr/bin/nvidia-smi": nvidia_smi()},
        ),
        # The kernel modules NVIDIA's packages build through DKMS, named `nvidia` for both
        # flavours from 570.148 on, with nv-p2p.h where gdrdrv's build looks for it.
        dkms_package(
            "nvidia-kernel-open-dkms",
            "nvidia",
            DRIVER,
            version,
            licence="Dual MIT/GPL",
            summary="NVIDIA open GPU kernel modules (DKMS)",
            headers=_P2P_HEADER,
        ),
        dkms_package(
            "nvidia-kernel-dkms",
            "nvidia",
            DRIVER,
            version,
            licence="NVIDIA",
            summary="NVIDIA proprietary GPU kernel modules (DKMS)",
            headers=_P2P_HEADER,
        ),
        DebSpec(
            name="nvidia-open",
            version=version,
            summary="NVIDIA open driver metapackage",
            depends=(
                f"nvidia-driver-cuda (= {version})",
                f"nvidia-kernel-open-dkms (= {version})",
                f"nvidia-driver-pinning-{DRIVER_BRANCH} (= {version})",
            ),
        ),
        _persistenced(version),
        *_cuda_common(""),
    )


def cuda_repo(distro_arch: str, packages: tuple[DebSpec, ...]) -> RepoSpec:
    path = f"{CUDA_REPO_HOST}/{distro_arch}"
    return RepoSpec(
        path=path,
        packages=packages,
        origin="NVIDIA",
        label="NVIDIA CUDA",
        key_files=(f"{path}/{CUDA_REPO_KEY}",),
    )


def container_toolkit_repo() -> RepoSpec:
    return container_toolkit.container_toolkit_repo(CONTAINER_TOOLKIT)


def _amzn2023_driver(version: str, flavour: str) -> tuple[RpmSpec, ...]:
    """The compute-only driver set of one branch on amzn2023: NVIDIA's names, epoch 3, the
    `.amzn2023` release; the kernel module package is noarch (DKMS source). Fabric manager,
    IMEX and libnvsdm belong to the stream too (NVIDIA's `/fm` profile), release 1, under
    their names of the branch (AL2023 release notes: nvidia-imex-570-570.86.15-1,
    libnvsdm-570-570.86.15-1; gpu-driver-container rhel9: nvidia-fabric-manager before 580)."""
    release = "1.amzn2023"
    branch = _branch(version)
    kmod = "kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms"
    licence = "Dual MIT/GPL" if flavour == "open" else "NVIDIA"
    userspace = ("nvidia-driver-cuda", "nvidia-driver-cuda-libs", "nvidia-kmod-common")
    suffix = "" if branch >= 580 else f"-{branch}"
    return (
        dkms_rpm(kmod, "nvidia", version, release, epoch=3, licence=licence),
        *(RpmSpec(name, version, release, epoch=3) for name in userspace),
        RpmSpec("nvidia-persistenced", version, release, epoch=3, files=_PERSISTENCED_FILES),
        RpmSpec(_fabric_manager_rpm(version), version, files=_fabric_manager_files(version)),
        RpmSpec(f"nvidia-imex{suffix}", version, files=_IMEX_FILES),
        RpmSpec(
            f"libnvsdm{suffix}",
            version,
            files={
                f"/usr/lib64/libnvsdm.so.{version}": b"nodeforge test stub: not an ELF library\n"
            },
        ),
    )


def _branch(version: str) -> int:
    return int(version.partition(".")[0])


def _fabric_manager_rpm(version: str) -> str:
    return "nvidia-fabricmanager" if _branch(version) >= 580 else "nvidia-fabric-manager"


def amzn2023_repo(distro_arch: str = "amzn2023/x86_64") -> RpmRepoSpec:
    """NVIDIA's CUDA repository for Amazon Linux 2023: the driver only through its module
    streams (`<branch>-open`, `<branch>-dkms`), two branches of them; outside them nvlsm (it
    versions on its own), the CUDA toolkits and cuDNN, and DCGM as rpms; and the repo key."""
    path = f"{CUDA_REPO_HOST}/{distro_arch}"
    streams = [
        ModuleStream(
            "nvidia-driver",
            f"{version.split('.')[0]}-{'open' if flavour == 'open' else 'dkms'}",
            _amzn2023_driver(version, flavour),
            profiles={"default": ("nvidia-driver-cuda",), "fm": (_fabric_manager_rpm(version),)},
        )
        for version in (DRIVER, OLD_DRIVER)
        for flavour in ("open", "proprietary")
    ]
    # NVIDIA's repository carries dkms itself (AL2023 has no EPEL); the stand-in's is Debian's,
    # so the stub rpm only answers the kmod packages' dependency.
    dkms = RpmSpec("dkms", "3.2.2", "1.amzn2023", arch="noarch")
    nvlsm_version, nvlsm_release = NVLSM.split("-")
    nvlsm = RpmSpec("nvlsm", nvlsm_version, nvlsm_release, files=_NVLSM_FILES)
    return RpmRepoSpec(
        path=path,
        packages=(dkms, nvlsm, *cuda_rpms(), *dcgm_rpms(DCGM)),
        modules=tuple(streams),
        key_files=(f"{path}/{CUDA_RPM_REPO_KEY}",),
    )


# Amazon Linux 2023's own repository (the stand-in's `amazonlinux` .repo points here): what the
# roles take from the distribution rather than from NVIDIA.
AL2023_CORE_REPO = "cdn.amazonlinux.com/al2023/core/x86_64"
AL2023_KEY = "RPM-GPG-KEY-amazon-linux-2023"


# The kernel line images/os/al2023.yml names, at a release of its form.
AL2023_KERNEL = "6.12.40-63.114.amzn2023.x86_64"
# What the base layer installs on AL2023 that the kernel packages do not: empty stand-ins, the
# tools themselves are the stand-in's own (Debian's).
AL2023_BASE = (
    "ca-certificates",
    "chrony",
    "jq",
    "kmod",
    "pciutils",
    "procps-ng",
    "rsync",
    "dracut",
    "python3-dnf-plugin-versionlock",
    # gdrcopy's build toolchain, Fedora's names (the stand-in compiles with Debian's)
    "gcc",
    "gcc-c++",
    "make",
    "pkgconf-pkg-config",
    "check-devel",
)


def _al2023_kernel() -> tuple[RpmSpec, ...]:
    """kernel6.12 and its -devel and -headers in AL2023's layout: the modules tree (depmod run
    at install, as the real %posttrans does), the build tree under /usr/src/kernels with the
    `build` link into it, the userspace headers."""
    version, _, rest = AL2023_KERNEL.partition("-")
    release = rest.removesuffix(".x86_64")
    modules = f"/lib/modules/{AL2023_KERNEL}"
    build = f"/usr/src/kernels/{AL2023_KERNEL}"
    return (
        RpmSpec(
            "kernel6.12",
            version,
            release,
            files={
                f"/boot/vmlinuz-{AL2023_KERNEL}": b"nodeforge test stub: no kernel\n",
                f"{modules}/modules.order": "",
                f"{modules}/modules.builtin": "",
            },
            scripts={"post": f"depmod -a {AL2023_KERNEL} || true"},
        ),
        RpmSpec(
            "kernel6.12-devel",
            version,
            release,
            files={f"{build}/Makefile": "# nodeforge test stub of the kernel build tree\n"},
            links={f"{modules}/build": build},
        ),
        RpmSpec(
            "kernel6.12-headers",
            version,
            release,
            files={"/usr/include/linux/nodeforge-stub.h": "/* nodeforge test stub */\n"},
        ),
    )


def al2023_core_repo() -> RpmRepoSpec:
    rdma = "1.amzn2023.0.1"
    return RpmRepoSpec(
        path=AL2023_CORE_REPO,
        packages=(
            *_al2023_kernel(),
            *(RpmSpec(name, "2023", "1.amzn2023") for name in AL2023_BASE),
            RpmSpec("libibumad", "48.0", rdma, files={"/usr/lib64/libibumad.so.3": b"stub\n"}),
            RpmSpec(
                "infiniband-diags",
                "48.0",
                rdma,
                requires=("libibumad",),
                files={"/usr/sbin/ibstat": "#!/bin/sh\necho 'nodeforge test stub of ibstat'\n"},
            ),
        ),
        key_files=(f"{AL2023_CORE_REPO}/{AL2023_KEY}",),
    )


EFA_KEY = "efa-installer.amazonaws.com/aws-efa-installer.key"


def default_spec() -> MirrorSpec:
    return MirrorSpec(
        repositories=(
            # NVIDIA's debian12 and debian13 repositories name the 580 packages alike
            cuda_repo("debian12/x86_64", debian13_packages()),
            cuda_repo("debian13/x86_64", debian13_packages()),
            cuda_repo("ubuntu2404/x86_64", ubuntu2404_packages()),
            container_toolkit_repo(),
        ),
        tarballs=(
            efa_installer_tarball(EFA_INSTALLER),
            gdrcopy_tarball(GDRCOPY),
            nccl_tests_tarball(NCCL_TESTS),
            gdrcopy_tarball(GDRCOPY_SHIPPED),
            nccl_tests_tarball(NCCL_TESTS_SHIPPED),
            *enroot_debs(ENROOT),
            pyxis_tarball(PYXIS),
        ),
        key_files=(EFA_KEY,),
        rpm_repositories=(amzn2023_repo(), al2023_core_repo()),
    )
