"""CUDA toolkits and cuDNN as NVIDIA's CUDA repository packages them, side by side.

Each toolkit is NVIDIA's metapackage `cuda-toolkit-X-Y` at the release version (12.9.1-1) over
components at their own versions (cuda-nvcc-12-9 12.9.86-1, cuda-cudart-12-9 12.9.79-1: CUDA
12.9 Update 1 and 13.0 Update 2, as third-party pins of those packages quote them), plus the
config-common packages that write NVIDIA's ld.so.conf.d entries (000_cuda.conf for
/usr/local/cuda, 988_cuda-X.conf for /usr/local/cuda-X). cuda-cudart registers the `cuda` and
`cuda-X` alternatives (/usr/local/cuda, /usr/local/cuda-X) at priority XY, as the real packages
do, so the newest toolkit wins in auto mode: a role that wants another default must select it.

libcudart is a real ELF library whose cudaRuntimeGetVersion answers CUDART_VERSION (12090 for
12.9), so the dynamic loader and a ctypes probe behave as with the real one; nvcc prints what
the real `nvcc --version` prints. cuDNN 9 comes as NVIDIA names it per CUDA major
(libcudnn9-cuda-12, -dev-, -headers-) at `<version>-1`.

Versions follow the hopper-2026.11 stack (CUDA 12.9.1, cuDNN 9.10.2.21); 13.0.2 is the
blackwell-2026.11 toolkit, here as the second toolkit beside the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.mirror.debs import DebSpec
from tests.mirror.elf import shared_library

TARGET_LIB = "targets/x86_64-linux/lib"
MULTIARCH = "x86_64-linux-gnu"


@dataclass(frozen=True)
class Toolkit:
    version: str
    """The release: cuda-toolkit-X-Y's upstream version (12.9.1)."""
    cudart: str
    nvcc: str

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    @property
    def dashed(self) -> str:
        return self.minor.replace(".", "-")

    @property
    def home(self) -> str:
        return f"/usr/local/cuda-{self.minor}"

    @property
    def priority(self) -> str:
        """The alternatives priority NVIDIA's packages give a toolkit: 129 for 12.9."""
        return self.minor.replace(".", "")


TOOLKITS = (
    Toolkit("12.9.1", cudart="12.9.79", nvcc="12.9.86"),
    Toolkit("13.0.2", cudart="13.0.96", nvcc="13.0.88"),
)
CUDNN = "9.10.2.21"
CUDNN_CUDA_MAJOR = "12"


def _nvcc(toolkit: Toolkit) -> str:
    return f"""#!/bin/sh
# nodeforge test stub of nvcc {toolkit.nvcc} (CUDA {toolkit.version})
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Copyright (c) 2005-2025 NVIDIA Corporation"
echo "Cuda compilation tools, release {toolkit.minor}, V{toolkit.nvcc}"
echo "Build cuda_{toolkit.minor}.r{toolkit.minor}/compiler.nodeforge_stub_0"
"""


def _alternatives(toolkit: Toolkit) -> dict[str, str]:
    """cuda-cudart's maintainer scripts: register /usr/local/cuda and /usr/local/cuda-X."""
    groups = (
        ("/usr/local/cuda", "cuda"),
        (f"/usr/local/cuda-{toolkit.major}", f"cuda-{toolkit.major}"),
    )
    install = "\n".join(
        f"  update-alternatives --install {link} {name} {toolkit.home} {toolkit.priority}"
        for link, name in groups
    )
    remove = "\n".join(
        f"  update-alternatives --remove {name} {toolkit.home} || true" for _, name in groups
    )
    return {
        "postinst": f'#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n{install}\nfi\n',
        "prerm": f'#!/bin/sh\nset -e\nif [ "$1" = remove ]; then\n{remove}\nfi\n',
    }


def toolkit_packages(toolkit: Toolkit) -> tuple[DebSpec, ...]:
    major, dashed, home = toolkit.major, toolkit.dashed, toolkit.home
    code = int(major) * 1000 + int(toolkit.minor.split(".")[1]) * 10
    cudart = shared_library(
        f"libcudart.so.{major}",
        f"CUDA runtime {toolkit.cudart}",
        source=f"int cudaRuntimeGetVersion(int *version) {{ *version = {code}; return 0; }}\n",
    )
    config = f"{toolkit.cudart}-1"
    return (
        DebSpec(
            name=f"cuda-toolkit-{dashed}",
            version=f"{toolkit.version}-1",
            summary=f"CUDA Toolkit {toolkit.minor} meta-package",
            depends=(
                f"cuda-nvcc-{dashed} (>= {toolkit.nvcc})",
                f"cuda-cudart-{dashed} (>= {toolkit.cudart})",
                f"cuda-toolkit-{dashed}-config-common (>= {toolkit.cudart})",
                f"cuda-toolkit-{major}-config-common (>= {toolkit.cudart})",
                f"cuda-toolkit-config-common (>= {toolkit.cudart})",
            ),
        ),
        DebSpec(
            name=f"cuda-nvcc-{dashed}",
            version=f"{toolkit.nvcc}-1",
            summary="CUDA nvcc",
            depends=(f"cuda-cudart-{dashed}",),
            files={f"{home}/bin/nvcc": _nvcc(toolkit)},
        ),
        DebSpec(
            name=f"cuda-cudart-{dashed}",
            version=f"{toolkit.cudart}-1",
            summary="CUDA Runtime native Libraries",
            section="libs",
            depends=(f"cuda-toolkit-{dashed}-config-common",),
            files={f"{home}/{TARGET_LIB}/libcudart.so.{toolkit.cudart}": cudart},
            links={
                f"{home}/{TARGET_LIB}/libcudart.so.{major}": f"libcudart.so.{toolkit.cudart}",
                f"{home}/lib64": TARGET_LIB,
            },
            scripts=_alternatives(toolkit),
        ),
        DebSpec(
            name=f"cuda-toolkit-{dashed}-config-common",
            version=config,
            architecture="all",
            summary=f"Common config package for CUDA Toolkit {toolkit.minor}.",
        ),
        DebSpec(
            name=f"cuda-toolkit-{major}-config-common",
            version=config,
            architecture="all",
            summary=f"Common config package for CUDA Toolkit {major}.",
            files={
                f"/etc/ld.so.conf.d/988_cuda-{major}.conf": (
                    f"/usr/local/cuda-{major}/{TARGET_LIB}\n"
                )
            },
        ),
        DebSpec(
            name="cuda-toolkit-config-common",
            version=config,
            architecture="all",
            summary="Common config package for CUDA Toolkit.",
            files={"/etc/ld.so.conf.d/000_cuda.conf": f"/usr/local/cuda/{TARGET_LIB}\n"},
        ),
    )


def _cudnn_header(version: str) -> str:
    major, minor, patch = version.split(".")[:3]
    return f"""/* nodeforge test stub of cudnn_version.h {version} */
#ifndef CUDNN_VERSION_H_
#define CUDNN_VERSION_H_
#define CUDNN_MAJOR {major}
#define CUDNN_MINOR {minor}
#define CUDNN_PATCHLEVEL {patch}
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)
#endif
"""


def cudnn_packages(version: str, cuda_major: str) -> tuple[DebSpec, ...]:
    """cuDNN 9's split as NVIDIA's CUDA repository carries it: the runtime, the development
    files and the headers, each `-cuda-<major>` at `<version>-1`, and the `cudnn9-cuda-<major>`
    metapackage over them."""
    major, minor, patch = version.split(".")[:3]
    deb_version = f"{version}-1"
    suffix = f"cuda-{cuda_major}"
    lib = f"/usr/lib/{MULTIARCH}"
    include = f"/usr/include/{MULTIARCH}"
    real = f"libcudnn.so.{major}.{minor}.{patch}"
    library = shared_library(f"libcudnn.so.{major}", f"cuDNN {version} for CUDA {cuda_major}")
    return (
        DebSpec(
            name=f"libcudnn{major}-{suffix}",
            version=deb_version,
            summary=f"cuDNN runtime libraries for CUDA {cuda_major}",
            section="libs",
            files={f"{lib}/{real}": library},
            links={f"{lib}/libcudnn.so.{major}": real},
        ),
        DebSpec(
            name=f"libcudnn{major}-headers-{suffix}",
            version=deb_version,
            summary=f"cuDNN header files for CUDA {cuda_major}",
            section="libdevel",
            files={f"{include}/cudnn_version_v{major}.h": _cudnn_header(version)},
        ),
        DebSpec(
            name=f"libcudnn{major}-dev-{suffix}",
            version=deb_version,
            summary=f"cuDNN development libraries for CUDA {cuda_major}",
            section="libdevel",
            depends=(
                f"libcudnn{major}-{suffix} (= {deb_version})",
                f"libcudnn{major}-headers-{suffix} (= {deb_version})",
            ),
            links={f"{lib}/libcudnn.so": f"libcudnn.so.{major}"},
            scripts={
                "postinst": (
                    '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
                    f"  update-alternatives --install /usr/include/cudnn_version.h"
                    f" libcudnn_version_h {include}/cudnn_version_v{major}.h {major}0\nfi\n"
                ),
                "prerm": (
                    '#!/bin/sh\nset -e\nif [ "$1" = remove ]; then\n'
                    f"  update-alternatives --remove libcudnn_version_h"
                    f" {include}/cudnn_version_v{major}.h || true\nfi\n"
                ),
            },
        ),
        DebSpec(
            name=f"cudnn{major}-{suffix}",
            version=deb_version,
            summary=f"NVIDIA cuDNN for CUDA {cuda_major}",
            depends=(
                f"libcudnn{major}-{suffix} (= {deb_version})",
                f"libcudnn{major}-dev-{suffix} (= {deb_version})",
            ),
        ),
    )


def cuda_packages() -> tuple[DebSpec, ...]:
    """Every toolkit, with cuda-toolkit-config-common at each toolkit's version (apt takes the
    newest, as upstream), and cuDNN for the stack's CUDA major."""
    return (
        *(spec for toolkit in TOOLKITS for spec in toolkit_packages(toolkit)),
        *cudnn_packages(CUDNN, CUDNN_CUDA_MAJOR),
    )
