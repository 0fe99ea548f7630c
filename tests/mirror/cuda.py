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

Both formats come from one description of each package: the debs of NVIDIA's debian13 and
ubuntu2404 repositories, and the rpms of its amzn2023 one, with the same names, versions and
toolkit layout, and the maintainer scripts in each format's terms (postinst/prerm, %post/%preun).
cuDNN is where each format's packages put it: the multiarch folders with the version header
behind an alternative (deb), /usr/lib64 and /usr/include (rpm, the header under its own name).

Versions follow the hopper-2026.11 stack (CUDA 12.9.1, cuDNN 9.10.2.21); 13.0.2 is the
blackwell-2026.11 toolkit, here as the second toolkit beside the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tests.mirror.debs import DebSpec
from tests.mirror.elf import shared_library
from tests.mirror.rpmrepo import RpmSpec

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
# NVIDIA's revision (deb) and release (rpm) of every package here: cuda-toolkit-12-9 12.9.1-1.
REVISION = "1"


@dataclass(frozen=True)
class _Stub:
    """One of NVIDIA's packages, in what its deb and its rpm share. `depends` entries are a
    name, or a name, a relation and a version ("cuda-nvcc-12-9 >= 12.9.86"). `install` runs
    once the files are in place (postinst configure, %post); `remove` before they go on
    removal, never on an upgrade (prerm remove, %preun with no instance left)."""

    name: str
    version: str
    summary: str
    depends: tuple[str, ...] = ()
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    install: str = ""
    remove: str = ""
    noarch: bool = False
    section: str = "misc"
    """Debian's section; rpms have none."""


def _deb(stub: _Stub) -> DebSpec:
    scripts = {}
    if stub.install:
        scripts["postinst"] = (
            f'#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n{stub.install}\nfi\n'
        )
    if stub.remove:
        scripts["prerm"] = f'#!/bin/sh\nset -e\nif [ "$1" = remove ]; then\n{stub.remove}\nfi\n'
    return DebSpec(
        name=stub.name,
        version=f"{stub.version}-{REVISION}",
        architecture="all" if stub.noarch else "amd64",
        summary=stub.summary,
        depends=tuple(
            f"{name} ({relation})" if relation else name
            for name, _, relation in (d.partition(" ") for d in stub.depends)
        ),
        section=stub.section,
        files=stub.files,
        links=stub.links,
        scripts=scripts,
    )


def _rpm(stub: _Stub) -> RpmSpec:
    scripts = {}
    if stub.install:
        scripts["post"] = stub.install
    if stub.remove:
        # $1: the instances left after the transaction, 0 on an erase
        scripts["preun"] = f'if [ "$1" -eq 0 ]; then\n{stub.remove}\nfi'
    return RpmSpec(
        name=stub.name,
        version=stub.version,
        release=REVISION,
        arch="noarch" if stub.noarch else "x86_64",
        summary=stub.summary,
        requires=stub.depends,
        files=stub.files,
        links=stub.links,
        scripts=scripts,
    )


@dataclass(frozen=True)
class _CudnnLayout:
    """Where a format's cuDNN packages put the library and its headers."""

    lib: str
    include: str
    dev: str
    """The development package's infix: libcudnn9-dev-cuda-12, libcudnn9-devel-cuda-12."""
    header_alternative: bool
    """Whether cudnn_version.h is an alternative over a per-major header (deb), or the header
    itself (rpm)."""


_DEB_CUDNN = _CudnnLayout(
    lib=f"/usr/lib/{MULTIARCH}",
    include=f"/usr/include/{MULTIARCH}",
    dev="dev",
    header_alternative=True,
)
_RPM_CUDNN = _CudnnLayout(
    lib="/usr/lib64", include="/usr/include", dev="devel", header_alternative=False
)


def _nvcc(toolkit: Toolkit) -> str:
    return f"""#!/bin/sh
# nodeforge test stub of nvcc {toolkit.nvcc} (CUDA {toolkit.version})
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Copyright (c) 2005-2025 NVIDIA Corporation"
echo "Cuda compilation tools, release {toolkit.minor}, V{toolkit.nvcc}"
echo "Build cuda_{toolkit.minor}.r{toolkit.minor}/compiler.nodeforge_stub_0"
"""


def _alternatives(toolkit: Toolkit) -> tuple[str, str]:
    """cuda-cudart's scripts: register /usr/local/cuda and /usr/local/cuda-X, and unregister
    them."""
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
    return install, remove


def _toolkit(toolkit: Toolkit) -> tuple[_Stub, ...]:
    major, dashed, home = toolkit.major, toolkit.dashed, toolkit.home
    code = int(major) * 1000 + int(toolkit.minor.split(".")[1]) * 10
    cudart = shared_library(
        f"libcudart.so.{major}",
        f"CUDA runtime {toolkit.cudart}",
        source=f"int cudaRuntimeGetVersion(int *version) {{ *version = {code}; return 0; }}\n",
    )
    install, remove = _alternatives(toolkit)
    return (
        _Stub(
            name=f"cuda-toolkit-{dashed}",
            version=toolkit.version,
            summary=f"CUDA Toolkit {toolkit.minor} meta-package",
            depends=(
                f"cuda-nvcc-{dashed} >= {toolkit.nvcc}",
                f"cuda-cudart-{dashed} >= {toolkit.cudart}",
                f"cuda-toolkit-{dashed}-config-common >= {toolkit.cudart}",
                f"cuda-toolkit-{major}-config-common >= {toolkit.cudart}",
                f"cuda-toolkit-config-common >= {toolkit.cudart}",
            ),
        ),
        _Stub(
            name=f"cuda-nvcc-{dashed}",
            version=toolkit.nvcc,
            summary="CUDA nvcc",
            depends=(f"cuda-cudart-{dashed}",),
            files={f"{home}/bin/nvcc": _nvcc(toolkit)},
        ),
        _Stub(
            name=f"cuda-cudart-{dashed}",
            version=toolkit.cudart,
            summary="CUDA Runtime native Libraries",
            section="libs",
            depends=(f"cuda-toolkit-{dashed}-config-common",),
            files={f"{home}/{TARGET_LIB}/libcudart.so.{toolkit.cudart}": cudart},
            links={
                f"{home}/{TARGET_LIB}/libcudart.so.{major}": f"libcudart.so.{toolkit.cudart}",
                f"{home}/lib64": TARGET_LIB,
            },
            install=install,
            remove=remove,
        ),
        _Stub(
            name=f"cuda-toolkit-{dashed}-config-common",
            version=toolkit.cudart,
            noarch=True,
            summary=f"Common config package for CUDA Toolkit {toolkit.minor}.",
        ),
        _Stub(
            name=f"cuda-toolkit-{major}-config-common",
            version=toolkit.cudart,
            noarch=True,
            summary=f"Common config package for CUDA Toolkit {major}.",
            files={
                f"/etc/ld.so.conf.d/988_cuda-{major}.conf": (
                    f"/usr/local/cuda-{major}/{TARGET_LIB}\n"
                )
            },
        ),
        _Stub(
            name="cuda-toolkit-config-common",
            version=toolkit.cudart,
            noarch=True,
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


def _cudnn(version: str, cuda_major: str, layout: _CudnnLayout) -> tuple[_Stub, ...]:
    """cuDNN 9's split as NVIDIA's CUDA repository carries it: the runtime, the development
    files and the headers, each `-cuda-<major>` at `<version>-1`, and the `cudnn9-cuda-<major>`
    metapackage over them."""
    major, minor, patch = version.split(".")[:3]
    exact = f"= {version}-{REVISION}"
    suffix = f"cuda-{cuda_major}"
    lib = layout.lib
    real = f"libcudnn.so.{major}.{minor}.{patch}"
    library = shared_library(f"libcudnn.so.{major}", f"cuDNN {version} for CUDA {cuda_major}")
    header = (
        f"{layout.include}/cudnn_version_v{major}.h"
        if layout.header_alternative
        else f"{layout.include}/cudnn_version.h"
    )
    dev = f"libcudnn{major}-{layout.dev}-{suffix}"
    return (
        _Stub(
            name=f"libcudnn{major}-{suffix}",
            version=version,
            summary=f"cuDNN runtime libraries for CUDA {cuda_major}",
            section="libs",
            files={f"{lib}/{real}": library},
            links={f"{lib}/libcudnn.so.{major}": real},
        ),
        _Stub(
            name=f"libcudnn{major}-headers-{suffix}",
            version=version,
            summary=f"cuDNN header files for CUDA {cuda_major}",
            section="libdevel",
            files={header: _cudnn_header(version)},
        ),
        _Stub(
            name=dev,
            version=version,
            summary=f"cuDNN development libraries for CUDA {cuda_major}",
            section="libdevel",
            depends=(
                f"libcudnn{major}-{suffix} {exact}",
                f"libcudnn{major}-headers-{suffix} {exact}",
            ),
            links={f"{lib}/libcudnn.so": f"libcudnn.so.{major}"},
            install=(
                f"  update-alternatives --install /usr/include/cudnn_version.h"
                f" libcudnn_version_h {header} {major}0"
                if layout.header_alternative
                else ""
            ),
            remove=(
                f"  update-alternatives --remove libcudnn_version_h {header} || true"
                if layout.header_alternative
                else ""
            ),
        ),
        _Stub(
            name=f"cudnn{major}-{suffix}",
            version=version,
            summary=f"NVIDIA cuDNN for CUDA {cuda_major}",
            depends=(f"libcudnn{major}-{suffix} {exact}", f"{dev} {exact}"),
        ),
    )


def _stubs(cudnn: _CudnnLayout) -> tuple[_Stub, ...]:
    """Every toolkit, with cuda-toolkit-config-common at each toolkit's version (apt and dnf
    take the newest, as upstream), and cuDNN for the stack's CUDA major."""
    return (
        *(stub for toolkit in TOOLKITS for stub in _toolkit(toolkit)),
        *_cudnn(CUDNN, CUDNN_CUDA_MAJOR, cudnn),
    )


def cuda_packages() -> tuple[DebSpec, ...]:
    """The debs of NVIDIA's apt repositories."""
    return tuple(map(_deb, _stubs(_DEB_CUDNN)))


def cuda_rpms() -> tuple[RpmSpec, ...]:
    """The rpms of NVIDIA's amzn2023 repository: plain packages, in no module stream."""
    return tuple(map(_rpm, _stubs(_RPM_CUDNN)))
