"""DKMS kernel module packages, as NVIDIA's and Debian's driver packages ship theirs: the module
source under /usr/src/<module>-<version> with its dkms.conf. The .deb's maintainer scripts add it
to DKMS and build it for every kernel whose headers are installed (dh_dkms); the rpm's %post, as
NVIDIA's kmod-nvidia-*-dkms do, builds it for the running kernel only and ignores a failure, which
leaves the image kernel to whoever installs it.

The module is a real (empty) kernel module carrying the driver's version and licence, so DKMS,
kbuild, modinfo and the role's coherence checks run for real against the image kernel's
headers; it drives no hardware.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.mirror.debs import DebSpec
from tests.mirror.rpmrepo import RpmSpec

_SOURCE = """\
/* nodeforge test stub of the {module} kernel module {version}: loads, drives nothing. */
#include <linux/init.h>
#include <linux/module.h>

MODULE_LICENSE("{licence}");
MODULE_VERSION("{version}");
MODULE_DESCRIPTION("nodeforge test stub of {module}");

static int __init nodeforge_stub_init(void) {{ return 0; }}
static void __exit nodeforge_stub_exit(void) {{}}
module_init(nodeforge_stub_init);
module_exit(nodeforge_stub_exit);
"""

_DKMS_CONF = """\
PACKAGE_NAME="{module}"
PACKAGE_VERSION="{version}"
BUILT_MODULE_NAME[0]="{module}"
DEST_MODULE_LOCATION[0]="/updates/dkms"
AUTOINSTALL="yes"
"""

# What dh_dkms' postinst amounts to here: add once, then build and install for each kernel
# that has headers (the builder's running kernel has none in a container).
_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  dkms status -m {module} -v {version} | grep -q . || dkms add -m {module} -v {version}
  for build in /lib/modules/*/build; do
    [ -e "$build/Makefile" ] || continue
    kernel=$(basename "$(dirname "$build")")
    dkms install -m {module} -v {version} -k "$kernel"
  done
fi
"""

_PRERM = """\
#!/bin/sh
set -e
dkms remove -m {module} -v {version} --all || true
"""

# NVIDIA's kmod-nvidia-open-dkms.spec %post and %preun, in substance.
_RPM_POST = """\
dkms add -m {module} -v {version} -q --rpm_safe_upgrade || :
dkms build -m {module} -v {version} -q || :
dkms install -m {module} -v {version} -q --force || :
"""

_RPM_PREUN = """\
dkms remove -m {module} -v {version} -q --all --rpm_safe_upgrade || :
"""


def _module_files(
    module: str, version: str, licence: str, headers: Mapping[str, str] | None
) -> dict[str, str | bytes]:
    values = {"module": module, "version": version, "licence": licence}
    source = f"/usr/src/{module}-{version}"
    return {
        f"{source}/dkms.conf": _DKMS_CONF.format(**values),
        f"{source}/Kbuild": f"obj-m := {module}.o\n",
        f"{source}/{module}.c": _SOURCE.format(**values),
        **{f"{source}/{path}": text for path, text in (headers or {}).items()},
    }


def dkms_package(
    name: str,
    module: str,
    version: str,
    deb_version: str,
    *,
    licence: str,
    summary: str,
    headers: Mapping[str, str] | None = None,
) -> DebSpec:
    """`name` at `deb_version`, shipping DKMS module `module` at `version`, and `headers`
    (paths under the module's source folder) that other modules build against."""
    values = {"module": module, "version": version, "licence": licence}
    return DebSpec(
        name=name,
        version=deb_version,
        summary=summary,
        section="kernel",
        depends=("dkms",),
        files=_module_files(module, version, licence, headers),
        scripts={"postinst": _POSTINST.format(**values), "prerm": _PRERM.format(**values)},
    )


def dkms_rpm(
    name: str, module: str, version: str, release: str, *, epoch: int, licence: str
) -> RpmSpec:
    """`name` (noarch, as NVIDIA's) at `version`-`release`, shipping DKMS module `module`."""
    values = {"module": module, "version": version}
    return RpmSpec(
        name,
        version,
        release,
        epoch=epoch,
        arch="noarch",
        requires=("dkms",),
        files=_module_files(module, version, licence, None),
        scripts={"post": _RPM_POST.format(**values), "preun": _RPM_PREUN.format(**values)},
    )
