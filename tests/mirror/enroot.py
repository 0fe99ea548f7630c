"""Stand-ins of NVIDIA/enroot's release packages and NVIDIA/pyxis's source tarball.

enroot: `enroot_<ver>-1_<deb_arch>.deb` and `enroot+caps_<ver>-1_<deb_arch>.deb`, as GitHub
release assets, with upstream's package names, dependencies (pkg/deb/control, the ones Debian
12 and 13 both carry), configuration folders (/etc/enroot/{enroot.conf.d, environ.d, hooks.d,
mounts.d}) and helper names; the +caps package's postinst grants the capabilities upstream's
does (setcap on enroot-mksquashovlfs and enroot-aufs2ovlfs). `enroot version` answers the
release; every other command says it is a stand-in and fails.

pyxis: GitHub's `archive/refs/tags/v<ver>.tar.gz`, folder `pyxis-<ver>/`, with upstream's
Makefile interface (prefix, libdir, datadir, DESTDIR, CPPFLAGS; `make`, `make install`, which
writes `$(datadir)/pyxis/pyxis.conf`). What it builds is a real SPANK plugin: it compiles
against the node's `slurm/spank.h`, registers upstream's main `[pyxis]` srun options (so
`srun --help` lists them once Slurm loads it), and, like upstream's config parser, refuses a
plugstack argument it does not know. It runs no container.
"""

from __future__ import annotations

from tests.mirror.debs import DebSpec
from tests.mirror.tarballs import TarballSpec

ENROOT_RELEASE = (
    "github.com/NVIDIA/enroot/releases/download/v{version}/{package}_{version}-1_{arch}.deb"
)
PYXIS_ARCHIVE = "github.com/NVIDIA/pyxis/archive/refs/tags/v{version}.tar.gz"
# pkg/deb/control Depends, less parallel and bsdmainutils (a transitional package on Debian 12):
# what the stand-in's one command needs is none of them, and each costs the scenario time.
ENROOT_DEPENDS = ("bash (>= 4.2)", "curl", "gawk | mawk", "jq (>= 1.5)", "squashfs-tools", "zstd")
HELPERS = (
    "enroot-aufs2ovlfs",
    "enroot-mksquashovlfs",
    "enroot-mount",
    "enroot-nsenter",
    "enroot-switchroot",
)
# The upstream plugstack arguments (pyxis config.c) the stand-in accepts.
PYXIS_ARGUMENTS = (
    "runtime_path",
    "execute_entrypoint",
    "container_scope",
    "sbatch_support",
    "use_enroot_load",
    "importer",
)

_ENROOT = """\
#!/bin/sh
# nodeforge test stand-in of enroot @VERSION@: answers `enroot version`, nothing else.
case "$1" in
  version) echo "@VERSION@" ;;
  *) echo "enroot: nodeforge test stand-in, '$1' is not implemented" >&2; exit 1 ;;
esac
"""

_HELPER = """\
#!/bin/sh
# nodeforge test stand-in of enroot's @NAME@ helper.
echo "@NAME@: nodeforge test stand-in" >&2
exit 1
"""

_CONF = """\
# nodeforge test stand-in of enroot's enroot.conf: every setting at its default (commented).
#ENROOT_LIBRARY_PATH        /usr/lib/enroot
#ENROOT_SYSCONF_PATH        /etc/enroot
#ENROOT_RUNTIME_PATH        ${XDG_RUNTIME_DIR}/enroot
#ENROOT_CACHE_PATH          ${XDG_CACHE_HOME}/enroot
#ENROOT_DATA_PATH           ${XDG_DATA_HOME}/enroot
#ENROOT_TEMP_PATH           ${TMPDIR:-/tmp}
"""

_CAPS_POSTINST = """\
#!/bin/sh
set -e
case "$1" in
    configure|abort-upgrade|abort-remove|abort-deconfigure)
        setcap cap_sys_admin+pe "$(command -v enroot-mksquashovlfs)"
        setcap cap_sys_admin,cap_mknod+pe "$(command -v enroot-aufs2ovlfs)"
    ;;
esac
exit 0
"""

_PYXIS_MAKEFILE = """\
# nodeforge test stand-in of NVIDIA/pyxis @VERSION@: upstream's variables and targets.
prefix      ?= /usr/local
libdir      ?= $(prefix)/lib
datarootdir ?= $(prefix)/share
datadir     ?= $(datarootdir)

PLUGINDIR := $(abspath $(DESTDIR)/$(libdir)/slurm)
CONFDIR   := $(abspath $(DESTDIR)/$(datadir)/pyxis)

VERSION   ?= @VERSION@

PLUGIN := spank_pyxis.so
CONF   := pyxis.conf

.PHONY: all install clean

CPPFLAGS := -D_GNU_SOURCE -DPYXIS_VERSION=\\"$(VERSION)\\" $(CPPFLAGS)
CFLAGS := -std=gnu11 -O2 -Wall -fpic $(CFLAGS)

all: $(PLUGIN)

$(PLUGIN): pyxis.c
\t$(CC) $(CFLAGS) $(CPPFLAGS) -shared -o $@ $<

install: all
\tinstall -d -m 755 $(PLUGINDIR)
\tinstall -m 644 $(PLUGIN) $(PLUGINDIR)
\tinstall -d -m 755 $(CONFDIR)
\techo 'required $(libdir)/slurm/$(PLUGIN)' | install -m 644 /dev/stdin $(CONFDIR)/$(CONF)

clean:
\trm -f $(PLUGIN)
"""

_PYXIS_C = """\
/* nodeforge test stand-in of NVIDIA/pyxis: a SPANK plugin named pyxis that registers
 * upstream's main srun options and refuses unknown plugstack arguments. It runs no container. */
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1)

static const char *known[] = { @ARGUMENTS@, NULL };

static int noop(int val, const char *optarg, int remote)
{
    (void)val; (void)optarg; (void)remote;
    return 0;
}

static struct spank_option options[] = {
    { "container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
      "[pyxis] the image to use for the container filesystem", 1, 0, noop },
    { "container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
      "[pyxis] bind mount[s] inside the container", 1, 0, noop },
    { "container-workdir", "PATH", "[pyxis] working directory inside the container", 1, 0, noop },
    { "container-name", "NAME",
      "[pyxis] name to use for saving and loading the container", 1, 0, noop },
    SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *eq = strchr(av[i], '=');
        size_t len = eq ? (size_t)(eq - av[i]) : strlen(av[i]);
        int ok = 0;
        for (const char **k = known; *k; k++)
            if (strlen(*k) == len && strncmp(av[i], *k, len) == 0)
                ok = 1;
        if (!ok || !eq) {
            slurm_error("pyxis: unknown configuration option: %s", av[i]);
            return -1;
        }
    }
    for (int i = 0; options[i].name; i++)
        if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
            return -1;
    return 0;
}
"""


def enroot_debs(version: str, arch: str = "amd64") -> tuple[TarballSpec, TarballSpec]:
    """enroot and enroot+caps at `version` (upstream's `-1` Debian revision) for `arch`."""
    files: dict[str, str | bytes] = {
        "/usr/bin/enroot": _ENROOT.replace("@VERSION@", version),
        "/etc/enroot/enroot.conf": _CONF,
        "/etc/enroot/enroot.conf.d/README": "# Drop-ins for enroot.conf (*.conf, read in order)\n",
        "/etc/enroot/environ.d/10-terminal.env": "TERM\n",
        "/etc/enroot/hooks.d/98-nvidia.sh": "#!/bin/sh\n# nodeforge test stand-in\nexit 0\n",
        "/etc/enroot/mounts.d/10-system.fstab": "# nodeforge test stand-in\n",
    }
    files |= {f"/usr/bin/{name}": _HELPER.replace("@NAME@", name) for name in HELPERS}
    full = f"{version}-1"
    enroot = DebSpec(
        name="enroot",
        version=full,
        architecture=arch,
        summary="Unprivileged container sandboxing utility",
        depends=ENROOT_DEPENDS,
        section="utils",
        files=files,
    )
    caps = DebSpec(
        name="enroot+caps",
        version=full,
        architecture=arch,
        summary="Unprivileged container sandboxing utility (extra capabilities)",
        depends=(f"enroot (= {full})", "libcap2-bin"),
        section="utils",
        scripts={"postinst": _CAPS_POSTINST},
    )
    return (
        TarballSpec(
            ENROOT_RELEASE.format(version=version, package=enroot.name, arch=arch), deb=enroot
        ),
        TarballSpec(ENROOT_RELEASE.format(version=version, package=caps.name, arch=arch), deb=caps),
    )


def pyxis_tarball(version: str) -> TarballSpec:
    top = f"pyxis-{version}"
    arguments = ", ".join(f'"{name}"' for name in PYXIS_ARGUMENTS)
    return TarballSpec(
        path=PYXIS_ARCHIVE.format(version=version),
        files={
            f"{top}/Makefile": _PYXIS_MAKEFILE.replace("@VERSION@", version),
            f"{top}/pyxis.c": _PYXIS_C.replace("@ARGUMENTS@", arguments),
            f"{top}/README.md": f"# nodeforge test stand-in of NVIDIA/pyxis {version}\n",
        },
    )
