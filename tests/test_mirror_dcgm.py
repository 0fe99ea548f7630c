"""The stub DCGM 4 packages of the mirror's NVIDIA CUDA repositories."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror import build_deb, default_spec, throwaway_key
from tests.mirror.dcgm import dcgm_packages, dcgm_rpms, dcgmi, nv_hostengine
from tests.mirror.rpmrepo import build_rpm
from tests.mirror.spec import DCGM

CORE = "datacenter-gpu-manager-4-core"
PINNED = f"1:{DCGM}-1"
UNIT = "usr/lib/systemd/system/nvidia-dcgm.service"

needs_dpkg = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb")


def _field(deb: Path, name: str) -> str:
    result = subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dcgm-debs")
    return {spec.name: build_deb(spec, out) for spec in dcgm_packages(DCGM)}


@pytest.fixture(scope="module")
def core_tree(debs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("dcgm-core")
    subprocess.run(["dpkg-deb", "-x", str(debs[CORE]), str(tree)], check=True)
    return tree


def _sh(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(script), *args], capture_output=True, text=True, check=False, timeout=10
    )


@needs_dpkg
def test_debs_carry_upstream_names_epoch_and_relations(debs: dict[str, Path]) -> None:
    assert sorted(debs) == sorted(
        [
            CORE,
            "datacenter-gpu-manager-4-dev",
            "datacenter-gpu-manager-4-proprietary",
            "datacenter-gpu-manager-4-multinode",
            *(
                f"datacenter-gpu-manager-4-{kind}{cuda}"
                for cuda in ("12", "13")
                for kind in ("cuda", "proprietary-cuda", "multinode-cuda")
            ),
        ]
    )
    # the pool file drops the epoch, the control file keeps it
    assert debs[CORE].name == f"{CORE}_{DCGM}-1_amd64.deb"
    assert {_field(deb, "Version") for deb in debs.values()} == {PINNED}
    assert _field(debs[CORE], "Depends") == "libc6 (>= 2.27), lshw"
    for cuda in ("12", "13"):
        deb = debs[f"datacenter-gpu-manager-4-cuda{cuda}"]
        assert _field(deb, "Depends") == f"{CORE} (= {PINNED})"
        assert _field(deb, "Recommends") == (
            f"datacenter-gpu-manager-4-proprietary-cuda{cuda} (= {PINNED})"
        )
    assert "datacenter-gpu-manager-4-proprietary (= " in _field(
        debs["datacenter-gpu-manager-4-proprietary-cuda12"], "Depends"
    )


@needs_dpkg
def test_core_ships_the_binaries_the_unit_and_the_service_account(
    debs: dict[str, Path], core_tree: Path
) -> None:
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(debs[CORE])], capture_output=True, text=True, check=True
    ).stdout
    for path in ("./usr/bin/nv-hostengine", "./usr/bin/dcgmi"):
        line = next(line for line in listing.splitlines() if line.endswith(path))
        assert line.startswith("-rwxr-xr-x root/root")
    unit = (core_tree / UNIT).read_text()
    assert "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n" in unit
    for directive in ("User=root", "Restart=on-abort", "Alias=dcgm.service"):
        assert f"{directive}\n" in unit
    assert "WantedBy=multi-user.target" in unit
    assert (core_tree / "usr/lib/x86_64-linux-gnu/libdcgm.so.4").readlink() == Path(
        f"libdcgm.so.{DCGM}"
    )
    postinst = subprocess.run(
        ["dpkg-deb", "-I", str(debs[CORE]), "postinst"], capture_output=True, text=True, check=True
    ).stdout
    assert "useradd -Urs /usr/sbin/nologin nvidia-dcgm" in postinst


@needs_dpkg
def test_dcgmi_answers_as_on_a_host_without_gpu_or_host_engine(core_tree: Path) -> None:
    dcgmi_path = core_tree / "usr/bin/dcgmi"
    version = _sh(dcgmi_path, "--version")
    assert (version.returncode, version.stdout) == (0, f"\n{dcgmi_path}  version: {DCGM}\n\n")
    # -v prints build info only for a host engine that answers (dcgmi/Version.cpp, 4.4.1+)
    quiet = _sh(dcgmi_path, "-v")
    assert (quiet.returncode, quiet.stdout) == (0, "")

    diag = _sh(dcgmi_path, "diag", "-r", "1")
    assert diag.returncode == 249  # DCGM_ST_INIT_ERROR (-7)
    assert diag.stdout == (
        "Error: Unable to start an embedded host engine. DCGM initialization error.\n"
    )
    discovery = _sh(dcgmi_path, "discovery", "-l", "--host", "10.0.0.9")
    assert discovery.returncode == 235  # DCGM_ST_CONNECTION_NOT_VALID (-21)
    assert discovery.stdout == (
        "Error: unable to establish a connection to the specified host: 10.0.0.9\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    assert _sh(dcgmi_path, "frobnicate").returncode == 255


@pytest.fixture
def running_engine(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    pid_file = tmp_path / "nvhostengine.pid"
    engine, client = tmp_path / "nv-hostengine", tmp_path / "dcgmi"
    engine.write_text(nv_hostengine(DCGM, str(pid_file)))
    client.write_text(dcgmi(DCGM, str(pid_file)))
    process = subprocess.Popen(["sh", str(engine), "-n", "--service-account", "nvidia-dcgm"])
    try:
        deadline = time.monotonic() + 5
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield engine, client
    finally:
        process.kill()
        process.wait()


def test_dcgmi_reports_both_builds_while_the_stand_in_engine_runs(
    running_engine: tuple[Path, Path],
) -> None:
    engine, client = running_engine
    shown = _sh(client, "-v")
    assert shown.returncode == 0
    local, _, remote = shown.stdout.partition("\nHostengine build info:\n")
    assert local.startswith("\nLocal build info:\n")
    assert f"Version : {DCGM}\n" in local
    assert f"Version : {DCGM}\n" in remote
    # the stand-in has no GPU to serve: every other request still fails
    assert _sh(client, "health", "-c").returncode == 235
    assert _sh(engine, "--version").stdout.startswith(f"Version : {DCGM}\n")


def test_every_cuda_repository_and_amzn2023_serve_dcgm() -> None:
    spec = default_spec()
    for repo in spec.repositories:
        if "/compute/cuda/repos/" in repo.path:
            names = {(p.name, p.version) for p in repo.packages}
            assert (CORE, PINNED) in names, repo.path
    (amzn2023,) = (r for r in spec.rpm_repositories if r.path.endswith("amzn2023/x86_64"))
    assert any(p.name == CORE and p.epoch == 1 for p in amzn2023.packages)


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("rpmbuild", "rpmsign", "rpm", "gpg")),
    reason="needs rpmbuild, rpmsign, rpm and gpg",
)
def test_rpms_carry_epoch_and_require_the_core_at_their_version(tmp_path: Path) -> None:
    rpms = {spec.name: spec for spec in dcgm_rpms(DCGM)}
    assert "datacenter-gpu-manager-4-devel" in rpms
    cuda12 = rpms["datacenter-gpu-manager-4-cuda12"]
    with throwaway_key() as key:
        built = build_rpm(cuda12, tmp_path, key)
        core = build_rpm(rpms[CORE], tmp_path, key)
    assert built.name == f"datacenter-gpu-manager-4-cuda12-{DCGM}-1.x86_64.rpm"
    query = ["rpm", "-qp", "--nosignature", "--qf"]
    evr = subprocess.run(
        [*query, "%{EPOCH}:%{VERSION}-%{RELEASE}", str(built)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert evr.stdout == PINNED
    requires = subprocess.run(
        ["rpm", "-qp", "--nosignature", "--requires", str(built)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"{CORE} = {PINNED}" in requires.stdout.splitlines()
    files = subprocess.run(
        ["rpm", "-qlp", "--nosignature", str(core)], capture_output=True, text=True, check=True
    )
    assert "/usr/lib/systemd/system/nvidia-dcgm.service" in files.stdout.splitlines()
