"""A stand-in for the AWS EFA installer tarball: the real one's layout, flags and outcome.

`aws-efa-installer/efa_installer.sh` parses the real flags (stack-facts §3.2), refuses what the
real installer refuses (no `-y` without a terminal, the kernel module inside a container, the
device check on a host without EFA), installs the stub packages from `DEBS/<OS><VERSION>/<arch>/`
with apt, whose dependencies are Debian's real libfabric and rdma-core, writes
`/opt/amazon/efa_installed_packages` as the real one does, and records how it was called.
"""

from __future__ import annotations

from tests.mirror.debs import DebSpec
from tests.mirror.elf import shared_library
from tests.mirror.nccl import mpi_files
from tests.mirror.tarballs import TarballSpec

EFA_LOG_ENV = "NODEFORGE_EFA_STUB_LOG"
LIBFABRIC_AWS = "2.7.0amzn2.0"
OFI_NCCL = "1.22.0"
OPENMPI4 = "4.1.7"
OPENMPI5 = "5.0.6"
EFA_CONFIG = "1.18"
EFA_KMOD = "3.3.1"
# The OS folders of the real tarball that the stand-in fills, all x86_64.
OS_FOLDERS = ("DEBIAN12", "DEBIAN13", "UBUNTU2204", "UBUNTU2404")
LIB = "/usr/lib/x86_64-linux-gnu"


def efa_packages() -> tuple[DebSpec, ...]:
    """What the installer puts on a node, with the real package names and paths.

    libfabric points at Debian's real library, so `fi_info` and the dynamic loader run real code.
    """
    ldconfig = "#!/bin/sh\nldconfig\n"
    return (
        DebSpec(
            name="libfabric1-aws",
            version=LIBFABRIC_AWS,
            summary="libfabric with the EFA provider, in /opt/amazon/efa",
            section="libs",
            depends=("libfabric1", "rdma-core", "ibverbs-providers"),
            links={"/opt/amazon/efa/lib/libfabric.so.1": f"{LIB}/libfabric.so.1"},
            scripts={"postinst": ldconfig},
        ),
        DebSpec(
            name="libfabric-aws-bin",
            version=LIBFABRIC_AWS,
            summary="libfabric utilities (fi_info, fi_pingpong)",
            depends=(f"libfabric1-aws (= {LIBFABRIC_AWS})", "libfabric-bin"),
            links={
                "/opt/amazon/efa/bin/fi_info": "/usr/bin/fi_info",
                "/opt/amazon/efa/bin/fi_pingpong": "/usr/bin/fi_pingpong",
            },
        ),
        DebSpec(
            name="efa-config",
            version=EFA_CONFIG,
            architecture="all",
            summary="EFA loader configuration",
            files={"/etc/ld.so.conf.d/efa.conf": "/opt/amazon/efa/lib\n"},
            scripts={"postinst": ldconfig},
        ),
        DebSpec(
            name="efa-profile",
            version=EFA_CONFIG,
            architecture="all",
            summary="EFA shell environment",
            files={"/etc/profile.d/efa.sh": "PATH=/opt/amazon/efa/bin:$PATH\n"},
        ),
        DebSpec(
            name="libnccl-ofi",
            version=OFI_NCCL,
            summary="aws-ofi-nccl, the NCCL network plugin for libfabric",
            section="libs",
            depends=(f"libfabric1-aws (= {LIBFABRIC_AWS})",),
            # 1.48 and later: lib/ without the multiarch folder (stack-facts §3.3)
            # a real ELF that needs libfabric: ldconfig indexes it, ldd resolves it to Debian's
            files={
                "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so": shared_library(
                    "libnccl-net-ofi.so",
                    f"NET/OFI Initializing aws-ofi-nccl {OFI_NCCL}",
                    ("libfabric.so.1",),
                ),
                "/etc/ld.so.conf.d/100_ofinccl.conf": "/opt/amazon/ofi-nccl/lib\n",
            },
            # 1.15 renamed the library and kept NCCL's default name as a link
            links={"/opt/amazon/ofi-nccl/lib/libnccl-net.so": "libnccl-net-ofi.so"},
            scripts={"postinst": ldconfig},
        ),
        _openmpi("openmpi40-aws", OPENMPI4, "/opt/amazon/openmpi"),
        _openmpi("openmpi50-aws", OPENMPI5, "/opt/amazon/openmpi5"),
        DebSpec(
            name="efa",
            version=EFA_KMOD,
            summary="EFA kernel module (DKMS)",
            files={"/etc/modules-load.d/efa.conf": "efa\n"},
        ),
    )


def _openmpi(name: str, version: str, prefix: str) -> DebSpec:
    mpirun = f"#!/bin/sh\necho 'mpirun (Open MPI) {version}'\n"
    files, links = mpi_files(version, prefix)
    return DebSpec(
        name=name,
        version=version,
        summary=f"Open MPI {version} for EFA",
        depends=(f"libfabric1-aws (= {LIBFABRIC_AWS})",),
        files={f"{prefix}/bin/mpirun": mpirun, **files},
        links=links,
    )


def installer_script(version: str) -> str:
    return f"""#!/bin/bash
# nodeforge test stand-in for the AWS EFA installer {version}: the real flags and layout,
# stub packages. Never run it outside a test.
set -euo pipefail
INSTALLER_VERSION={version}
log="${{{EFA_LOG_ENV}:-/var/log/nodeforge-efa-installer-stub.log}}"
mkdir -p "$(dirname "$log")"
printf '%s\\n' "$*" >> "$log"

usage() {{
  cat <<USAGE
Usage: efa_installer.sh [options]
  -d, --debug-packages    install debug packages
  -u, --uninstall         uninstall EFA packages
  -y, --yes               do not prompt
  -n, --no-verify         skip the EFA device check
  -l, --skip-limit-conf   skip the locked-memory limit configuration
  -k, --skip-kmod         skip the EFA kernel module
  -g, --enable-gdr        no-op since 1.14.0
  -m, --minimal           kernel module and rdma-core only
  --mpi=LIST              openmpi4, openmpi5 or both (default both)
  --check-signatures      verify every package against EFA_INSTALLER_KEY
  --disable-ngc, --disable-build-ngc
                          no NGC image detection
USAGE
}}

yes=0 verify=1 limits=1 kmod=1 minimal=0 uninstall=0 mpi=openmpi4,openmpi5 signatures=0
while [ $# -gt 0 ]; do
  case "$1" in
    -y|--yes) yes=1 ;;
    -n|--no-verify) verify=0 ;;
    -l|--skip-limit-conf) limits=0 ;;
    -k|--skip-kmod) kmod=0 ;;
    -m|--minimal) minimal=1 ;;
    -u|--uninstall) uninstall=1 ;;
    -d|--debug-packages|-g|--enable-gdr|--disable-ngc|--disable-build-ngc) ;;
    --check-signatures) signatures=1 ;;
    --mpi=*) mpi="${{1#--mpi=}}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "Error: unknown option $1" >&2; usage >&2; exit 1 ;;
  esac
  shift
done

for m in ${{mpi//,/ }}; do
  case "$m" in
    openmpi4|openmpi5) ;;
    *) echo "Error: --mpi accepts openmpi4 and openmpi5, not $m" >&2; exit 1 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || {{ echo "Error: the EFA installer must run as root" >&2; exit 1; }}
if [ "$yes" -eq 0 ] && [ ! -t 0 ]; then
  echo "Error: no terminal to ask on; pass -y to install without prompting" >&2
  exit 1
fi
if [ "$signatures" -eq 1 ] && [ ! -r "${{EFA_INSTALLER_KEY:-}}" ]; then
  echo "Error: --check-signatures needs EFA_INSTALLER_KEY pointing at aws-efa-installer.key" >&2
  exit 1
fi

record=/opt/amazon/efa_installed_packages
export DEBIAN_FRONTEND=noninteractive
if [ "$uninstall" -eq 1 ]; then
  [ -f "$record" ] || {{ echo "EFA is not installed"; exit 0; }}
  mapfile -t installed < <(grep -v '^#' "$record")
  apt-mark unhold "${{installed[@]}}" >/dev/null
  apt-get purge -y -q "${{installed[@]}}"
  rm -f "$record" /etc/security/limits.d/01_efa.conf
  echo "EFA uninstalled"
  exit 0
fi

. /etc/os-release
folder="DEBS/${{ID^^}}${{VERSION_ID//./}}/$(uname -m)"
cd "$(dirname "$0")"
[ -d "$folder" ] || {{ echo "Error: $PRETTY_NAME on $(uname -m) is not supported" >&2; exit 1; }}

if [ "$kmod" -eq 1 ] && systemd-detect-virt --container --quiet; then
  echo "Error: cannot build the EFA kernel module for $(uname -r) in a container;" \\
    "use --skip-kmod" >&2
  exit 1
fi

packages=()
[ "$kmod" -eq 1 ] && packages+=(efa)
if [ "$minimal" -eq 0 ]; then
  packages+=(libfabric1-aws libfabric-aws-bin efa-config efa-profile libnccl-ofi)
  case ",$mpi," in *,openmpi4,*) packages+=(openmpi40-aws) ;; esac
  case ",$mpi," in *,openmpi5,*) packages+=(openmpi50-aws) ;; esac
fi
debs=()
for p in "${{packages[@]}}"; do debs+=("$PWD/$folder/$p"_*.deb); done
if [ "${{#debs[@]}}" -gt 0 ]; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${{debs[@]}}"
fi

if [ "$limits" -eq 1 ]; then
  printf '* soft memlock unlimited\\n* hard memlock unlimited\\n' \\
    > /etc/security/limits.d/01_efa.conf
fi
{{
  echo "# EFA installer version: $INSTALLER_VERSION"
  echo "# Debug packages installed: no"
  echo "# Packages installed:"
  printf '%s\\n' "${{packages[@]}}"
}} > "$record"

if [ "$verify" -eq 1 ] && ! ls /sys/class/infiniband 2>/dev/null | grep -q '^efa'; then
  echo "Error: no EFA device found; pass --no-verify when building on an instance without EFA" >&2
  exit 1
fi
echo "==================================================="
echo "EFA installation complete."
echo "==================================================="
"""


def efa_installer_tarball(version: str) -> TarballSpec:
    top = "aws-efa-installer"
    return TarballSpec(
        path=f"efa-installer.amazonaws.com/aws-efa-installer-{version}.tar.gz",
        files={
            f"{top}/efa_installer.sh": installer_script(version),
            f"{top}/README.stub": "nodeforge test stand-in for the AWS EFA installer\n",
        },
        debs={f"{top}/DEBS/{os_folder}/x86_64": efa_packages() for os_folder in OS_FOLDERS},
        signed=True,
    )
