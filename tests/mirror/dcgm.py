"""NVIDIA DCGM 4 as NVIDIA's CUDA repositories package it, in the 4.0 to 4.6 layout.

Names, versions and relations follow NVIDIA/DCGM's cmake/packaging.cmake (v4.4.2): the
`datacenter-gpu-manager-4` packages at epoch 1 and revision (release) 1, so the deb version is
`1:4.4.2-1` and the pool file `datacenter-gpu-manager-4-core_4.4.2-1_amd64.deb`; the rpms
carry `Epoch: 1`. The core holds nv-hostengine, dcgmi, libdcgm.so.4 and the nvidia-dcgm unit,
and its maintainer script creates the `nvidia-dcgm` service account and /var/log/nvidia-dcgm,
as scripts/deb/postinst does. Each -cudaN package depends on the core at the same version and
recommends -proprietary-cudaN (apt-cache depends on the real 4.6.1 repository); the
proprietary packages are built outside the public tree, so their dependencies here follow the
public components' pattern. DCGM 4.7 split the core into dcgmi, nv-hostengine, libdcgm and
module packages: these stubs do not model that layout.

The stand-ins behave as on a host with no GPU. nv-hostengine keeps the pid file the real one
keeps and touches nothing else; dcgmi takes a live pid in that file for a reachable host
engine, which answers the version query (`dcgmi -v`) and nothing more: without a GPU nothing
else could succeed. Texts and exit statuses are dcgmi's own (dcgmi/Version.cpp, Command.cpp,
Diag.cpp, main_dcgmi.cpp: the dcgmReturn_t is the exit status, -21 exits 235).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tests.mirror.debs import DebSpec
from tests.mirror.rpmrepo import RpmSpec

BASE = "datacenter-gpu-manager-4"
EPOCH = 1
REVISION = "1"
UNIT = "/usr/lib/systemd/system/nvidia-dcgm.service"
SERVICE_ACCOUNT = "nvidia-dcgm"
PID_FILE = "/var/run/nvhostengine.pid"
"""nv-hostengine's default --pid (hostengine/src/HostEngineCommandLine.cpp)."""
CUDA_MAJORS = ("12", "13")
_NOT_ELF = b"nodeforge test stub: not an ELF library\n"

# CommandLineParser's subsystems besides `diag`, which alone falls back to an embedded host
# engine when none answers (StartDiag::DoExecuteConnectionFailure) and so fails otherwise.
_SUBSYSTEMS = (
    "discovery policy group fieldgroup config health stats topo introspect nvlink dmon "
    "modules profile set test mndiag"
)


def deb_version(version: str) -> str:
    return f"{EPOCH}:{version}-{REVISION}"


def unit(version: str) -> str:
    """config-files/systemd/nvidia-dcgm.service.in with CMAKE_INSTALL_BINDIR=bin, as installed."""
    return f"""# nodeforge test stub of nvidia-dcgm.service (DCGM {version}): upstream's directives
[Unit]
Description=NVIDIA DCGM service
After=nvidia-gpu-reset.target
Wants=nvidia-gpu-reset.target

[Service]
User=root
PrivateTmp=false

Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"

ExecStart=/usr/bin/nv-hostengine -n --service-account {SERVICE_ACCOUNT}

Restart=on-abort

[Install]
Alias=dcgm.service
WantedBy=multi-user.target
"""


def _build_info(version: str) -> str:
    """DcgmBuildInfo's lines as printed; the real one skips empty fields, so the stub leaves
    out the build id, date, commit and CRC it has none of."""
    return (
        f'  echo "Version : {version}"\n'
        '  echo "Build Type : RelWithDebInfo"\n'
        f'  echo "Branch Name : v{version}"\n'
        '  echo "CPU Arch : x86_64"\n'
        '  echo "Build Platform : nodeforge test stub"\n'
    )


def nv_hostengine(version: str, pid_file: str = PID_FILE) -> str:
    """Runs until stopped, in the foreground with -n, else as a detached child; -t stops it."""
    return f"""#!/bin/sh
# nodeforge test stub of nv-hostengine {version}: listens on nothing, touches no GPU
build_info() {{
{_build_info(version)}}}
pid_file={pid_file}
daemon=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --version) build_info; exit 0 ;;
    -n|--no-daemon) daemon=no ;;
    --pid) pid_file=${{2:-$pid_file}}; [ $# -gt 1 ] && shift ;;
    -t|--term)
      if read -r pid 2>/dev/null <"$pid_file"; then
        kill "$pid" 2>/dev/null
        rm -f "$pid_file"
      fi
      exit 0 ;;
  esac
  shift
done
if [ "$daemon" = yes ]; then
  sleep infinity </dev/null >/dev/null 2>&1 &
  echo "$!" >"$pid_file" || exit 1
  exit 0
fi
echo "$$" >"$pid_file" || exit 1
exec sleep infinity
"""


def dcgmi(version: str, pid_file: str = PID_FILE) -> str:
    """`--version` (TCLAP's text, argv[0] as given), `-v` (build info only when a host engine
    answers, as from 4.4.1), and the no-host-engine failures of every subsystem."""
    return f"""#!/bin/sh
# nodeforge test stub of dcgmi {version}: no GPU; the stand-in nv-hostengine answers -v only
build_info() {{
{_build_info(version)}}}
host=localhost
host_given=no
previous=
for arg in "$@"; do
  if [ "$previous" = --host ]; then host=$arg; host_given=yes; fi
  previous=$arg
done
engine_answers() {{
  case "$host" in localhost|127.0.0.1) ;; *) return 1 ;; esac
  read -r pid 2>/dev/null <"{pid_file}" && [ -n "$pid" ] && [ -d "/proc/$pid" ]
}}
case "$1" in
  --version)
    printf '\\n%s  version: %s\\n\\n' "$0" "{version}"
    exit 0 ;;
  -v|--vv)
    if engine_answers; then
      printf '\\nLocal build info:\\n'
      build_info
      printf '\\nHostengine build info:\\n'
      build_info
    fi
    exit 0 ;;
  -h|--help)
    printf '\\nUSAGE: \\n\\n   %s  <subsystem> ... (nodeforge test stub)\\n\\n' "$0"
    exit 0 ;;
  diag)
    if [ "$host_given" = yes ]; then
      echo "Error: unable to establish a connection to the specified host: $host"
    fi
    echo "Error: Unable to start an embedded host engine. DCGM initialization error."
    exit 249 ;;
esac
for subsystem in {_SUBSYSTEMS}; do
  if [ "$1" = "$subsystem" ]; then
    echo "Error: unable to establish a connection to the specified host: $host"
    echo "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."
    exit 235
  fi
done
echo "ERROR: Invalid subsystem."
echo
exit 255
"""


def _account_script() -> str:
    """What the core's postinst does: exit status 9 of useradd is an existing account."""
    return f"""set +e
useradd -Urs /usr/sbin/nologin {SERVICE_ACCOUNT}
status=$?
set -e
if [ "$status" -ne 0 ] && [ "$status" -ne 9 ]; then
  exit "$status"
fi
mkdir -p /var/log/nvidia-dcgm
chown {SERVICE_ACCOUNT}:{SERVICE_ACCOUNT} /var/log/nvidia-dcgm
chmod 755 /var/log/nvidia-dcgm"""


@dataclass(frozen=True)
class _Stub:
    """One DCGM package in what its deb and its rpm share. `same` names the packages it needs
    at exactly its own version; `recommends` likewise, as a weak dependency (deb only)."""

    suffix: str
    summary: str
    same: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    install: str = ""

    @property
    def name(self) -> str:
        return f"{BASE}-{self.suffix}"


def _stubs(version: str, lib: str, dev: str) -> tuple[_Stub, ...]:
    major = version.partition(".")[0]
    include = f"/usr/include/{BASE}"
    headers = {
        f"{include}/{name}.h": f"/* nodeforge test stub of DCGM {version}'s {name}.h */\n"
        for name in ("dcgm_agent", "dcgm_fields", "dcgm_structs")
    }
    stubs = [
        _Stub(
            "core",
            "CUDA-version agnostic components of NVIDIA Datacenter GPU Manager (DCGM)",
            files={
                "/usr/bin/nv-hostengine": nv_hostengine(version),
                "/usr/bin/dcgmi": dcgmi(version),
                UNIT: unit(version),
                f"{lib}/libdcgm.so.{version}": _NOT_ELF,
            },
            links={f"{lib}/libdcgm.so.{major}": f"libdcgm.so.{version}"},
            install=_account_script(),
        ),
        _Stub(
            dev,
            "Development files for NVIDIA Datacenter GPU Manager (DCGM)",
            same=("core",),
            files=headers,
            links={f"{lib}/libdcgm.so": f"libdcgm.so.{major}"},
        ),
        _Stub(
            "proprietary",
            "Proprietary CUDA-independent DCGM components",
            same=("core",),
            files={f"{lib}/libdcgmmoduleprofiling.so.{version}": _NOT_ELF},
        ),
        _Stub(
            "multinode",
            "NVIDIA Datacenter GPU Manager (DCGM) multi-node active health diagnostics",
            same=("core",),
            files={f"{lib}/libdcgmmodulemndiag.so.{version}": _NOT_ELF},
        ),
    ]
    for cuda in CUDA_MAJORS:
        plugins = f"/usr/libexec/{BASE}/plugins/cuda{cuda}"
        stubs += [
            _Stub(
                f"cuda{cuda}",
                f"NVIDIA Datacenter GPU Manager (DCGM) binaries for CUDA{cuda} systems",
                same=("core",),
                recommends=(f"proprietary-cuda{cuda}",),
                files={f"{plugins}/libDiagnostic.so.{version}": _NOT_ELF},
            ),
            _Stub(
                f"proprietary-cuda{cuda}",
                f"Proprietary DCGM diagnostic plugins for CUDA {cuda}",
                same=(f"cuda{cuda}", "proprietary"),
                files={f"{plugins}/libEud.so.{version}": _NOT_ELF},
            ),
            _Stub(
                f"multinode-cuda{cuda}",
                f"NVIDIA Datacenter GPU Manager (DCGM) multi-node diagnostics for CUDA{cuda}",
                same=("multinode",),
                files={f"{plugins}/mnubergemm": b"nodeforge test stub: not an executable\n"},
            ),
        ]
    return tuple(stubs)


# What the real debs need from the distribution besides each other (packaging.cmake v4.4.2);
# dpkg's Pre-Depends on passwd and login are left out: both are always installed.
_DEB_DISTRO_DEPENDS = {
    "core": ("libc6 (>= 2.27)", "lshw"),
    "multinode": ("openmpi | openmpi-bin (>= 4.1.1)",),
    "multinode-cuda12": ("openmpi | libopenmpi3 (>= 4.1.1)",),
    "multinode-cuda13": ("openmpi | libopenmpi3 (>= 4.1.1)",),
}


def dcgm_packages(version: str) -> tuple[DebSpec, ...]:
    """The debs of NVIDIA's apt repositories at the upstream `version` (4.4.2)."""
    pinned = deb_version(version)
    return tuple(
        DebSpec(
            name=stub.name,
            version=pinned,
            summary=stub.summary,
            depends=(
                *(f"{BASE}-{other} (= {pinned})" for other in stub.same),
                *_DEB_DISTRO_DEPENDS.get(stub.suffix, ()),
            ),
            recommends=tuple(f"{BASE}-{other} (= {pinned})" for other in stub.recommends),
            files=stub.files,
            links=stub.links,
            scripts=(
                {
                    "postinst": f'#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
                    f"{stub.install}\nfi\n"
                }
                if stub.install
                else {}
            ),
        )
        for stub in _stubs(version, "/usr/lib/x86_64-linux-gnu", "dev")
    )


def dcgm_rpms(version: str) -> tuple[RpmSpec, ...]:
    """The rpms of NVIDIA's amzn2023 repository: plain packages, in no module stream. Only the
    relations among DCGM's own packages are kept: the real ones also require glibc, lshw,
    shadow-utils and openmpi, none of which the AL2023 stand-in's rpm database knows."""
    pinned = f"{EPOCH}:{version}-{REVISION}"
    return tuple(
        RpmSpec(
            name=stub.name,
            version=version,
            release=REVISION,
            epoch=EPOCH,
            summary=stub.summary,
            requires=tuple(f"{BASE}-{other} = {pinned}" for other in stub.same),
            files=stub.files,
            links=stub.links,
            scripts={"post": stub.install} if stub.install else {},
        )
        for stub in _stubs(version, "/usr/lib64", "devel")
    )
