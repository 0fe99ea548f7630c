"""NCCL as NVIDIA's CUDA repository packages it, and a stand-in nccl-tests release.

libnccl2 carries a real ELF library whose ncclGetVersion answers the stub's version code, so a
probe that loads it (ctypes) and a program linked against it behave as with the real one.
The nccl-tests tarball keeps the real build interface (make MPI=1 MPI_HOME= CUDA_HOME=
NCCL_HOME= NVCC_GENCODE=, binaries in build/) and needs nvcc under CUDA_HOME, but compiles C
with the host compiler: no CUDA code runs here.
"""

from __future__ import annotations

from tests.mirror.debs import DebSpec
from tests.mirror.elf import shared_library
from tests.mirror.tarballs import TarballSpec

LIB = "/usr/lib/x86_64-linux-gnu"
# What nccl-tests 2.17 builds (src/Makefile BIN_FILES_LIST), as <name>_perf.
PERF_TESTS = (
    "all_reduce",
    "all_gather",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "alltoall",
    "scatter",
    "gather",
    "sendrecv",
    "hypercube",
)


def version_code(version: str) -> int:
    """NCCL_VERSION_CODE from 2.9 on: major * 10000 + minor * 100 + patch (nccl.h)."""
    major, minor, patch = (int(part) for part in version.partition("-")[0].split("."))
    return major * 10000 + minor * 100 + patch


def nccl_packages(version: str, cuda: str) -> tuple[DebSpec, ...]:
    """libnccl2 and libnccl-dev at `<version>+cuda<X.Y>`, NVIDIA's version scheme."""
    upstream = version.partition("-")[0]
    code = version_code(version)
    deb_version = f"{version}+cuda{cuda}"
    header = f"""/* nodeforge test stub of nccl.h {upstream} */
#ifndef NCCL_H_
#define NCCL_H_
#define NCCL_MAJOR {upstream.split(".")[0]}
#define NCCL_MINOR {upstream.split(".")[1]}
#define NCCL_PATCH {upstream.split(".")[2]}
#define NCCL_VERSION_CODE {code}
typedef enum {{ ncclSuccess = 0 }} ncclResult_t;
ncclResult_t ncclGetVersion(int *version);
#endif
"""
    library = shared_library(
        "libnccl.so.2",
        f"NCCL version {upstream}+cuda{cuda}",
        source=f"int ncclGetVersion(int *version) {{ *version = {code}; return 0; }}\n",
    )
    return (
        DebSpec(
            name="libnccl2",
            version=deb_version,
            summary="NVIDIA Collective Communication Library (NCCL) Runtime",
            section="libs",
            files={f"{LIB}/libnccl.so.{upstream}": library},
            links={f"{LIB}/libnccl.so.2": f"libnccl.so.{upstream}"},
        ),
        DebSpec(
            name="libnccl-dev",
            version=deb_version,
            summary="NVIDIA Collective Communication Library (NCCL) Development Files",
            section="libdevel",
            depends=(f"libnccl2 (= {deb_version})",),
            files={"/usr/include/nccl.h": header},
            links={f"{LIB}/libnccl.so": "libnccl.so.2"},
        ),
    )


def mpi_files(version: str, prefix: str) -> tuple[dict[str, str | bytes], dict[str, str]]:
    """What nccl-tests' MPI=1 build needs of an Open MPI prefix: mpi.h and libmpi.so."""
    library = shared_library(
        "libmpi.so.40",
        f"Open MPI {version}",
        source="int MPI_Init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }\n",
    )
    files: dict[str, str | bytes] = {
        f"{prefix}/include/mpi.h": "/* nodeforge test stub of mpi.h */\n"
        "int MPI_Init(int *argc, char ***argv);\n",
        f"{prefix}/lib/libmpi.so.40.0.0": library,
    }
    links = {
        f"{prefix}/lib/libmpi.so.40": "libmpi.so.40.0.0",
        f"{prefix}/lib/libmpi.so": "libmpi.so.40",
    }
    return files, links


_TOP_MAKEFILE = """\
# nodeforge stand-in of NVIDIA/nccl-tests {version}: the real make interface, gcc for nvcc.
BUILDDIR ?= build
override BUILDDIR := $(abspath $(BUILDDIR))

.PHONY: all src.build clean
all: src.build
src.build:
\t$(MAKE) -C src build BUILDDIR=$(BUILDDIR)
clean:
\trm -rf $(BUILDDIR)
"""

_SRC_MAKEFILE = """\
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
NVCC_GENCODE ?= -gencode=arch=compute_90,code=sm_90
MPI ?= 0
MPI_HOME ?= /usr/lib/x86_64-linux-gnu/openmpi
NCCL_HOME ?=
CFLAGS := -O2
LIBS := -lnccl
ifneq ($(NCCL_HOME),)
CFLAGS += -I$(NCCL_HOME)/include
LIBS := -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 $(LIBS)
endif
ifeq ($(MPI), 1)
CFLAGS += -DMPI_SUPPORT -I$(MPI_HOME)/include
LIBS += -L$(MPI_HOME)/lib -L$(MPI_HOME)/lib64 -lmpi
endif
BINS := {bins}

.PHONY: build
build: $(addprefix $(BUILDDIR)/,$(BINS))

# The real build compiles every test with nvcc: without a CUDA toolkit there is no build.
$(BUILDDIR)/%_perf: perf.c
\t@$(NVCC) --version > /dev/null
\t@mkdir -p $(BUILDDIR)
\t$(CC) $(CFLAGS) -DTEST_NAME='"$*"' -DGENCODE='"$(NVCC_GENCODE)"' -o $@ perf.c $(LIBS)
"""

_PERF_C = """\
/* nodeforge stand-in of an nccl-tests binary: links NCCL (and MPI) as the real one does. */
#include <stdio.h>
#include <nccl.h>
#ifdef MPI_SUPPORT
#include <mpi.h>
#endif

const char nodeforge_gencode[] = "nvcc_gencode=" GENCODE;

int main(int argc, char **argv) {
#ifdef MPI_SUPPORT
  MPI_Init(&argc, &argv);
#endif
  int version = 0;
  ncclGetVersion(&version);
  printf("# nccl-tests stand-in %s_perf, NCCL version code %d\\n", TEST_NAME, version);
  fprintf(stderr, "Cuda failure 'no CUDA-capable device is detected'\\n");
  return 1;
}
"""


def nccl_tests_tarball(version: str) -> TarballSpec:
    """GitHub's `archive/v<ver>.tar.gz` of NVIDIA/nccl-tests: one top folder."""
    top = f"nccl-tests-{version}"
    bins = " ".join(f"{name}_perf" for name in PERF_TESTS)
    return TarballSpec(
        path=f"github.com/NVIDIA/nccl-tests/archive/v{version}.tar.gz",
        files={
            f"{top}/Makefile": _TOP_MAKEFILE.format(version=version),
            f"{top}/src/Makefile": _SRC_MAKEFILE.format(bins=bins),
            f"{top}/src/perf.c": _PERF_C,
            f"{top}/README.stub": f"nodeforge test stand-in of NVIDIA/nccl-tests {version}\n",
        },
    )
