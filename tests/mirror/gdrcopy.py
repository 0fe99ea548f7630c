"""A stand-in of NVIDIA/gdrcopy's release tarball (GitHub's `archive/v<ver>.tar.gz`).

The layout and build interface follow upstream 2.5: a top-level Makefile with `prefix=`,
`libdir=`, `bindir=`, `includedir=`, `DESTDIR=` and `CUDA=`, and the targets `lib`, `exes`,
`driver`, `lib_install`, `exes_install`, `drv_install`; `include/gdrapi.h` whose
GDR_API_MAJOR/MINOR_VERSION name the library's version (libgdrapi.so.2.5, soname
libgdrapi.so.2); `src/` for the library; `tests/` for the tools (gdrcopy_copybw, gdrcopy_sanity,
gdrcopy_copylat, gdrcopy_apiperf, gdrcopy_pplat and upstream's short-name links); and
`src/gdrdrv/` with the kernel module's Kbuild/make Makefile, which looks for the NVIDIA driver's
`nv-p2p.h` the way upstream's does (NVIDIA_SRC_DIR, else `/usr/src/nvidia-*`).

Everything is built on the node with its compilers: libgdrapi is a real shared library whose
gdr_runtime_get_version answers the release's major.minor, and gdrdrv is a real kernel module
(module_init/exit, MODULE_VERSION major.minor, the `gdrdrv` character device) that DKMS compiles
against the kernel headers. Unlike upstream, the module includes nv-p2p.h but calls no NVIDIA
symbol (it pins no GPU memory), and the tools need nvcc only to be there (pplat), link no
libcuda and touch no GPU: they print the library's version and stop where /dev/gdrdrv is missing.
"""

from __future__ import annotations

from tests.mirror.tarballs import TarballSpec

# Upstream's executables (tests/Makefile EXES) and the short names its install links to them.
TOOLS = ("copybw", "sanity", "copylat", "apiperf", "pplat")
LINKED = ("copybw", "copylat", "apiperf", "sanity")

_TOP_MAKEFILE = """\
# nodeforge test stand-in of NVIDIA/gdrcopy @VERSION@: upstream's top-level variables and targets.
prefix      ?= /usr/local
exec_prefix ?= $(prefix)
libdir      ?= $(exec_prefix)/lib
bindir      ?= $(exec_prefix)/bin
includedir  ?= $(prefix)/include

DESTDIR := $(abspath $(DESTDIR))
DESTLIB = $(DESTDIR)$(libdir)
DESTBIN = $(DESTDIR)$(bindir)
DESTINC = $(DESTDIR)$(includedir)

CUDA ?= /usr/local/cuda

LIB_MAJOR_VER ?= $(shell awk '/\\#define GDR_API_MAJOR_VERSION/ { print $$3 }' \\
                   include/gdrapi.h | tr -d '\\n')
LIB_MINOR_VER ?= $(shell awk '/\\#define GDR_API_MINOR_VERSION/ { print $$3 }' \\
                   include/gdrapi.h | tr -d '\\n')

GDRAPI_ARCH := $(shell ./config_arch)

LIB_VER:=$(LIB_MAJOR_VER).$(LIB_MINOR_VER)
LIB_BASENAME:=libgdrapi.so
LIB_DYNAMIC=$(LIB_BASENAME).$(LIB_VER)
LIB_SONAME=$(LIB_BASENAME).$(LIB_MAJOR_VER)

all: config driver lib exes

version:
\t@ echo "$(LIB_VER)"

config:
\t@ echo "GDRAPI_ARCH=$(GDRAPI_ARCH)"

driver:
\tcd src/gdrdrv && \\
\t$(MAKE) $(MAKE_PARAMS)

lib:
\tcd src && \\
\t$(MAKE) LIB_MAJOR_VER=$(LIB_MAJOR_VER) LIB_MINOR_VER=$(LIB_MINOR_VER)

exes: lib
\tcd tests && \\
\t$(MAKE) CUDA=$(CUDA)

install: lib_install exes_install

lib_install: lib
\t@ echo "installing in $(DESTLIB) $(DESTINC)..." && \\
\tmkdir -p $(DESTLIB) && \\
\tinstall -D -v -m u=rwx,g=rx,o=rx src/$(LIB_DYNAMIC) -t $(DESTLIB) && \\
\tmkdir -p $(DESTINC) && \\
\tinstall -D -v -m u=rw,g=rw,o=r include/* -t $(DESTINC); \\
\tcd $(DESTLIB); \\
\tln -sf $(LIB_DYNAMIC) $(LIB_SONAME); \\
\tln -sf $(LIB_SONAME) $(LIB_BASENAME);

exes_install: exes
\tcd tests && $(MAKE) install DESTBIN=$(DESTBIN)

drv_install: driver
\tcd src/gdrdrv && \\
\t$(MAKE) install

clean:
\tcd tests && $(MAKE) clean
\tcd src && $(MAKE) clean
\tcd src/gdrdrv && $(MAKE) clean

.PHONY: driver clean all lib exes lib_install drv_install exes_install install
"""

_CONFIG_ARCH = """\
#!/bin/sh
# nodeforge test stand-in of gdrcopy's config_arch: the GDRAPI_ARCH of this machine.
case "$(uname -m)" in
  x86_64|i?86) echo X86 ;;
  aarch64) echo ARM64 ;;
  ppc64le) echo POWER ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
"""

_GDRAPI_H = """\
/* nodeforge test stand-in of gdrcopy's include/gdrapi.h: upstream's version macros and the
 * version and open/close entry points. */
#ifndef __GDRAPI_H__
#define __GDRAPI_H__

#include <stdint.h>
#include <stddef.h>

#define MAJOR_VERSION_SHIFT     16
#define MINOR_VERSION_MASK      (((uint32_t)1 << MAJOR_VERSION_SHIFT) - 1)

#define GDR_API_MAJOR_VERSION    @MAJOR@
#define GDR_API_MINOR_VERSION    @MINOR@
#define GDR_API_VERSION \\
    ((GDR_API_MAJOR_VERSION << MAJOR_VERSION_SHIFT) | GDR_API_MINOR_VERSION)

#ifdef __cplusplus
extern "C" {
#endif

struct gdr;
typedef struct gdr *gdr_t;

gdr_t gdr_open(void);
int gdr_close(gdr_t g);

/* Query the version of libgdrapi */
void gdr_runtime_get_version(int *major, int *minor);

/* Query the version of the gdrdrv driver */
int gdr_driver_get_version(gdr_t g, int *major, int *minor);

#ifdef __cplusplus
}
#endif

#endif /* __GDRAPI_H__ */
"""

_SRC_MAKEFILE = """\
# nodeforge test stand-in of gdrcopy's src/Makefile: libgdrapi.so.<major>.<minor>, soname
# libgdrapi.so.<major>, with upstream's links beside it.
LIB_MAJOR_VER ?= $(shell awk '/\\#define GDR_API_MAJOR_VERSION/ { print $$3 }' \\
                   ../include/gdrapi.h | tr -d '\\n')
LIB_MINOR_VER ?= $(shell awk '/\\#define GDR_API_MINOR_VERSION/ { print $$3 }' \\
                   ../include/gdrapi.h | tr -d '\\n')

GDRAPI_ARCH ?= $(shell ../config_arch)
GDRAPI_INC := ../include

CPPFLAGS := -I $(GDRAPI_INC) -I gdrdrv/ -D GDRAPI_ARCH=$(GDRAPI_ARCH)
COMMONCFLAGS := -O2
CFLAGS   += $(COMMONCFLAGS)
LIBS     := -lpthread -ldl

LIB_VER:=$(LIB_MAJOR_VER).$(LIB_MINOR_VER)
LIB_BASENAME:=libgdrapi.so
LIB_DYNAMIC=$(LIB_BASENAME).$(LIB_VER)
LIB_SONAME=$(LIB_BASENAME).$(LIB_MAJOR_VER)
LIB:=$(LIB_DYNAMIC)

LIBSRCS := gdrapi.c
LIBOBJS := $(LIBSRCS:.c=.o)

all: config lib

config:
\t@ echo "GDRAPI_ARCH=$(GDRAPI_ARCH)"

lib: $(LIB)

$(LIBOBJS): CFLAGS+=-fPIC
$(LIB): $(LIBOBJS)
\t$(CC) -shared -Wl,-soname,$(LIB_SONAME) -o $@ $^ $(LIBS)
\tPATH=/sbin:/usr/sbin:$$PATH; ldconfig -n $(CURDIR)
\tln -sf $(LIB_DYNAMIC) $(LIB_SONAME)
\tln -sf $(LIB_SONAME) $(LIB_BASENAME)

gdrapi.o: gdrapi.c $(GDRAPI_INC)/gdrapi.h gdrdrv/gdrdrv.h

clean:
\trm -f *.o lib*.so* *~ core.*

.PHONY: clean all lib config
"""

_GDRAPI_C = """\
/* nodeforge test stand-in of libgdrapi: the version the library was built as, and the
 * connection to the gdrdrv character device. No GPU memory is pinned or mapped. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "gdrapi.h"
#include "gdrdrv.h"

struct gdr {
    int fd;
};

const char nodeforge_gdrapi_banner[] = "nodeforge stand-in libgdrapi @VERSION@";

void gdr_runtime_get_version(int *major, int *minor)
{
    *major = GDR_API_MAJOR_VERSION;
    *minor = GDR_API_MINOR_VERSION;
}

gdr_t gdr_open(void)
{
    const char *path = "/dev/gdrdrv";
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "GDRCopy: error opening %s: %s (is the gdrdrv module loaded?)\\n",
                path, strerror(errno));
        return NULL;
    }
    gdr_t g = calloc(1, sizeof(*g));
    if (!g) {
        close(fd);
        return NULL;
    }
    g->fd = fd;
    return g;
}

int gdr_close(gdr_t g)
{
    int ret = close(g->fd);
    free(g);
    return ret;
}

int gdr_driver_get_version(gdr_t g, int *major, int *minor)
{
    struct GDRDRV_IOC_GET_VERSION_PARAMS params;
    if (ioctl(g->fd, GDRDRV_IOC_GET_VERSION, &params) != 0)
        return errno;
    *major = (int)(params.gdrdrv_version >> MAJOR_VERSION_SHIFT);
    *minor = (int)(params.gdrdrv_version & MINOR_VERSION_MASK);
    return 0;
}
"""

_GDRDRV_H = """\
/* nodeforge test stand-in of gdrcopy's src/gdrdrv/gdrdrv.h: the driver's version and the
 * version ioctl, shared by the module and libgdrapi. */
#ifndef __GDR_DRV_H__
#define __GDR_DRV_H__

#include <linux/types.h>
#include <linux/ioctl.h>

#define GDRDRV_STRINGIFY(s)           #s
#define GDRDRV_TOSTRING(s)            GDRDRV_STRINGIFY(s)

#define GDRDRV_MAJOR_VERSION    @MAJOR@
#define GDRDRV_MINOR_VERSION    @MINOR@
#define GDRDRV_VERSION          ((GDRDRV_MAJOR_VERSION << 16) | GDRDRV_MINOR_VERSION)
#define GDRDRV_VERSION_STRING \\
    GDRDRV_TOSTRING(GDRDRV_MAJOR_VERSION) "." GDRDRV_TOSTRING(GDRDRV_MINOR_VERSION)

#define MINIMUM_GDR_API_MAJOR_VERSION   2
#define MINIMUM_GDR_API_MINOR_VERSION   0
#define MINIMUM_GDR_API_VERSION \\
    ((MINIMUM_GDR_API_MAJOR_VERSION << 16) | MINIMUM_GDR_API_MINOR_VERSION)

#define GDRDRV_IOCTL                 0xDA

struct GDRDRV_IOC_GET_VERSION_PARAMS
{
    /* out */
    __u32 gdrdrv_version;
    __u32 minimum_gdr_api_version;
};

#define GDRDRV_IOC_GET_VERSION _IOWR(GDRDRV_IOCTL, 255, struct GDRDRV_IOC_GET_VERSION_PARAMS *)

#endif /* __GDR_DRV_H__ */
"""

_GDRDRV_C = """\
/* nodeforge test stand-in of gdrdrv, GDRCopy's kernel-mode driver: a real module that registers
 * the "gdrdrv" character device and answers the version ioctl. Like upstream it compiles against
 * the NVIDIA driver's nv-p2p.h; unlike upstream it calls no nvidia_p2p_* symbol, so it loads
 * without the NVIDIA driver and pins no GPU memory. */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/fs.h>
#include <linux/uaccess.h>

#include "gdrdrv.h"
#include "nv-p2p.h"

#ifndef NVIDIA_P2P_PAGE_TABLE_VERSION
#error "gdrdrv needs the NVIDIA driver's nv-p2p.h (set NVIDIA_SRC_DIR)"
#endif

#define DEVNAME "gdrdrv"

static int gdrdrv_major;

static long gdrdrv_unlocked_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
    struct GDRDRV_IOC_GET_VERSION_PARAMS params = {
        .gdrdrv_version = GDRDRV_VERSION,
        .minimum_gdr_api_version = MINIMUM_GDR_API_VERSION,
    };

    if (cmd != GDRDRV_IOC_GET_VERSION)
        return -ENOTTY;
    if (copy_to_user((void __user *)arg, &params, sizeof(params)))
        return -EFAULT;
    return 0;
}

static const struct file_operations gdrdrv_fops = {
    .owner = THIS_MODULE,
    .unlocked_ioctl = gdrdrv_unlocked_ioctl,
};

static int __init gdrdrv_init(void)
{
    int major = register_chrdev(0, DEVNAME, &gdrdrv_fops);

    if (major < 0) {
        pr_err(DEVNAME ": cannot register a character device (%d)\\n", major);
        return major;
    }
    gdrdrv_major = major;
    pr_info(DEVNAME ": nodeforge stand-in " GDRDRV_VERSION_STRING ", major %d\\n", major);
    return 0;
}

static void __exit gdrdrv_cleanup(void)
{
    unregister_chrdev(gdrdrv_major, DEVNAME);
}

module_init(gdrdrv_init);
module_exit(gdrdrv_cleanup);

MODULE_AUTHOR("nodeforge test stand-in");
MODULE_LICENSE("MIT");
MODULE_DESCRIPTION("GDRCopy kernel-mode driver (nodeforge test stand-in)");
MODULE_VERSION(GDRDRV_VERSION_STRING);
"""

_GDRDRV_MAKEFILE = """\
# nodeforge test stand-in of gdrcopy's src/gdrdrv/Makefile: the Kbuild half (obj-m) and the make
# half (KVER=, KDIR, install), with NVIDIA_SRC_DIR found the way upstream finds it.
NVIDIA_SRC_DIR ?= $(shell { find /usr/src/kernel-modules/nvidia-* /usr/src/nvidia-* \\
                    -name "nv-p2p.h" -print -quit | xargs dirname \\
                    || echo "NVIDIA_DRIVER_MISSING"; } 2>/dev/null)

ifneq ($(KERNELRELEASE),)

obj-m := gdrdrv.o

ccflags-y += -I$(NVIDIA_SRC_DIR)

else

KVER ?= $(shell uname -r)
MODULES_DIR := /lib/modules/$(KVER)
KDIR := $(MODULES_DIR)/build
MODULE_SUBDIR ?= /kernel/drivers/misc/
MODULE_DESTDIR := $(MODULES_DIR)/$(MODULE_SUBDIR)
DEPMOD := /sbin/depmod

all: build

build:
\t@ echo "Picking NVIDIA driver sources from NVIDIA_SRC_DIR=$(NVIDIA_SRC_DIR)."
\t@ $(MAKE) -C $(KDIR) $(MAKE_PARAMS) M=$(CURDIR) modules

install: build
\t[ -d $(DESTDIR)/$(MODULE_DESTDIR) ] || mkdir -p $(DESTDIR)/$(MODULE_DESTDIR)
\tcp gdrdrv.ko $(DESTDIR)/$(MODULE_DESTDIR)
\tif [ ! -n "$(DESTDIR)" ]; then $(DEPMOD) -r -ae $(KVER); fi

clean:
\trm -rf *.o .*.o.d *.ko* *.mod.* .*.cmd Module.symvers modules.order .tmp_versions/
\trm -rf *~ core .depend TAGS .cache.mk *.mod

.PHONY: clean all install build

endif
"""

_TESTS_MAKEFILE = """\
# nodeforge test stand-in of gdrcopy's tests/Makefile: upstream's executables, libcheck for
# sanity and nvcc for pplat, installed with upstream's short-name links.
DESTBIN ?=
CUDA ?= /usr/local/cuda
NVCC ?= $(CUDA)/bin/nvcc

CHECK_INC  := $(shell pkg-config --cflags-only-I check)
CHECK_LIBS := $(shell pkg-config --libs check)

GDRAPI_INC := ../include
GDRAPI_SRC := ../src

CPPFLAGS := -I $(GDRAPI_INC) -I $(GDRAPI_SRC) $(CHECK_INC)
LDFLAGS  := -L $(GDRAPI_SRC)
COMMONCFLAGS := -O2
CXXFLAGS += $(COMMONCFLAGS)
LIBS     := -lpthread -ldl -lgdrapi

EXES := @EXES@

all: exes

exes: $(EXES)

common.o: common.cpp $(GDRAPI_INC)/gdrapi.h common.hpp
copybw.o: copybw.cpp common.hpp
sanity.o: sanity.cpp common.hpp
copylat.o: copylat.cpp common.hpp
apiperf.o: apiperf.cpp common.hpp

gdrcopy_copybw: copybw.o common.o
\t$(LINK.cc)  -o $@ $^ $(LIBS) -lrt

gdrcopy_sanity: sanity.o common.o
\t$(LINK.cc)  -o $@ $^ $(LIBS) $(CHECK_LIBS)

gdrcopy_copylat: copylat.o common.o
\t$(LINK.cc)  -o $@ $^ $(LIBS) -lrt

gdrcopy_apiperf: apiperf.o common.o
\t$(LINK.cc)  -o $@ $^ $(LIBS) -lrt

# Upstream compiles pplat.cu with nvcc; the stand-in needs nvcc there and compiles it as C++.
gdrcopy_pplat: pplat.cu common.o
\t@ $(NVCC) --version > /dev/null
\t$(CXX) $(CPPFLAGS) $(CXXFLAGS) -x c++ -c -o pplat.o pplat.cu
\t$(LINK.cc)  -o $@ pplat.o common.o $(LIBS)

clean:
\trm -f *.o $(EXES) *~ core.*

install: exes
\t@ echo "installing exes in $(DESTBIN)..." && \\
\tmkdir -p $(DESTBIN) && \\
@INSTALLS@
\tcd $(DESTBIN) && \\
@LINKS@

.PHONY: clean all exes install
"""

_COMMON_HPP = """\
/* nodeforge test stand-in of gdrcopy's tests/common.hpp */
#pragma once
int nodeforge_tool(const char *name);
"""

_COMMON_CPP = """\
/* nodeforge test stand-in of a gdrcopy test program: the library's version, then the driver's
 * through /dev/gdrdrv; no GPU work. Where gdrdrv is not loaded it stops as upstream's do. */
#include <cstdio>
#include "gdrapi.h"
#include "common.hpp"

int nodeforge_tool(const char *name)
{
    int major = 0, minor = 0;
    gdr_runtime_get_version(&major, &minor);
    std::printf("gdrcopy_%s (nodeforge stand-in of GDRCopy @VERSION@): libgdrapi %d.%d\\n",
                name, major, minor);
    gdr_t g = gdr_open();
    if (!g) {
        std::fprintf(stderr, "gdr_open failed: the gdrdrv driver is not loaded\\n");
        return 1;
    }
    if (gdr_driver_get_version(g, &major, &minor) == 0)
        std::printf("gdrdrv %d.%d\\n", major, minor);
    gdr_close(g);
    return 0;
}
"""

_TOOL_CPP = """\
/* nodeforge test stand-in of gdrcopy's tests/@NAME@ */
#include "common.hpp"
@EXTRA@
int main()
{
    return nodeforge_tool("@TOOL@");
}
"""

# sanity links libcheck (upstream's unit tests run on it): the stand-in names its version.
_SANITY_EXTRA = """\
#include <cstdio>
#include <check.h>

static int check_version = (std::printf("check %d.%d.%d\\n", (int)check_major_version,
                                        (int)check_minor_version, (int)check_micro_version), 0);
"""


def _tool(name: str) -> tuple[str, str]:
    source = "pplat.cu" if name == "pplat" else f"{name}.cpp"
    text = (
        _TOOL_CPP.replace("@NAME@", source)
        .replace("@EXTRA@", _SANITY_EXTRA if name == "sanity" else "")
        .replace("@TOOL@", name)
    )
    return source, text


def _tests_makefile() -> str:
    installs = " && \\\n".join(
        f"\tinstall -D -v -m u=rwx,g=rx,o=rx gdrcopy_{name} -t $(DESTBIN)" for name in TOOLS
    )
    links = " && \\\n".join(f"\tln -sf gdrcopy_{name} {name}" for name in LINKED)
    return (
        _TESTS_MAKEFILE.replace("@EXES@", " ".join(f"gdrcopy_{name}" for name in TOOLS))
        .replace("@INSTALLS@", installs + " && \\")
        .replace("@LINKS@", links)
    )


def gdrcopy_tarball(version: str) -> TarballSpec:
    """GitHub's `archive/v<version>.tar.gz` of NVIDIA/gdrcopy: one top folder, upstream's tree."""
    major, minor = version.split(".")[:2]
    top = f"gdrcopy-{version}"

    def fill(text: str) -> str:
        return (
            text.replace("@VERSION@", version).replace("@MAJOR@", major).replace("@MINOR@", minor)
        )

    files: dict[str, str | bytes] = {
        f"{top}/Makefile": fill(_TOP_MAKEFILE),
        f"{top}/config_arch": _CONFIG_ARCH,
        f"{top}/README.md": f"nodeforge test stand-in of NVIDIA/gdrcopy {version}\n",
        f"{top}/include/gdrapi.h": fill(_GDRAPI_H),
        f"{top}/src/Makefile": _SRC_MAKEFILE,
        f"{top}/src/gdrapi.c": fill(_GDRAPI_C),
        f"{top}/src/gdrdrv/Makefile": _GDRDRV_MAKEFILE,
        f"{top}/src/gdrdrv/gdrdrv.c": _GDRDRV_C,
        f"{top}/src/gdrdrv/gdrdrv.h": fill(_GDRDRV_H),
        f"{top}/tests/Makefile": _tests_makefile(),
        f"{top}/tests/common.hpp": _COMMON_HPP,
        f"{top}/tests/common.cpp": fill(_COMMON_CPP),
    }
    for name in TOOLS:
        source, text = _tool(name)
        files[f"{top}/tests/{source}"] = text
    return TarballSpec(path=f"github.com/NVIDIA/gdrcopy/archive/v{version}.tar.gz", files=files)
