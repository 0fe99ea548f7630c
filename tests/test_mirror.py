"""The local artifact mirror fixture, proven with the host's real apt-get and gpg."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Edit
from tests.mirror import (
    DebSpec,
    IsolatedApt,
    Mirror,
    MirrorGapError,
    RepoSpec,
    Served,
    add_reference_stacks,
    build_mirror,
    default_spec,
    serve,
    throwaway_key,
    verify_detached,
    write_overlay,
    write_stack_overlay,
)
from tests.mirror.efa import EFA_LOG_ENV

CUDA_UBUNTU = "developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64"
CUDA_DEBIAN = "developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64"
CUDA_AMZN2023 = "developer.download.nvidia.com/compute/cuda/repos/amzn2023/x86_64"
DISTS_REPO = "deb.nodeforge.invalid/debian"
EFA = "efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz"
NODEFORGE = Path(sys.executable).with_name("nodeforge")

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("apt-get", "dpkg-deb", "dpkg-scanpackages", "gpg")),
    reason="needs apt-get, dpkg-deb, dpkg-scanpackages (dpkg-dev) and gpg",
)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Mirror:
    """The default mirror plus a classic `dists/` repository, built once for this module."""
    spec = default_spec()
    dists = RepoSpec(
        path=DISTS_REPO,
        layout="dists",
        suite="trixie",
        component="main",
        packages=(
            DebSpec(
                name="hello-stub",
                version="1.0-1",
                files={"/usr/bin/hello-stub": "#!/bin/sh\necho hi\n"},
            ),
        ),
        key_files=(f"{DISTS_REPO}/stub.asc",),
    )
    spec = replace(spec, repositories=(*spec.repositories, dists))
    return build_mirror(tmp_path_factory.mktemp("mirror"), spec)


@pytest.fixture
def served(mirror: Mirror) -> Iterator[Served]:
    with serve(mirror) as running:
        yield running


def _tampered_copy(mirror: Mirror, tmp_path: Path) -> Mirror:
    root = tmp_path / "tampered"
    shutil.copytree(mirror.root, root, symlinks=True)
    return replace(mirror, root=root)


def _apt(tmp_path: Path, mirror: Mirror, *repos: str, keyring: Path | None = None) -> IsolatedApt:
    sources = [mirror.apt_source(repo) for repo in repos]
    if keyring is not None:
        sources = [line.replace(str(mirror.keyring_path), str(keyring)) for line in sources]
    return IsolatedApt(tmp_path / "apt", sources)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        data: bytes = response.read()
        return data


# ------------------------------------------------------------------ packages


def test_stub_debs_are_root_owned_stubs_with_upstream_layout(
    mirror: Mirror, tmp_path: Path
) -> None:
    deb = mirror.repositories[CUDA_UBUNTU].debs["nvidia-utils-580"]
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    )
    assert all(" root/root " in line for line in listing.stdout.splitlines())
    assert "-rwxr-xr-x root/root" in listing.stdout
    assert "./usr/bin/nvidia-smi" in listing.stdout
    description = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Description"], capture_output=True, text=True, check=True
    )
    assert "nodeforge test stub" in description.stdout

    lib = mirror.repositories[CUDA_UBUNTU].debs["libnvidia-compute-580"]
    subprocess.run(["dpkg-deb", "-x", str(lib), str(tmp_path)], check=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    libdir = tmp_path / "usr/lib/x86_64-linux-gnu"
    assert (libdir / "libnvidia-ml.so.580.95.05").is_file()
    assert (libdir / "libnvidia-ml.so.1").readlink() == Path("libnvidia-ml.so.580.95.05")
    smi = tmp_path / "usr/bin/nvidia-smi"
    query = ["--query-gpu=driver_version", "--format=csv,noheader"]
    assert (
        subprocess.run([smi, *query], capture_output=True, text=True, check=True).stdout
        == "580.95.05\n"
    )
    assert subprocess.run([smi], capture_output=True, check=False).returncode == 9


def test_cuda_repo_layout_matches_upstream(mirror: Mirror) -> None:
    for repo in (CUDA_UBUNTU, CUDA_DEBIAN):
        folder = mirror.root / repo
        for name in ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"):
            assert (folder / name).is_file(), f"{repo}/{name}"
        assert (folder / "3bf863cc.pub").read_bytes() == mirror.key_path.read_bytes()
    assert len(mirror.fingerprint) == 40
    assert mirror.fingerprint == mirror.fingerprint.upper()


# ------------------------------------------------------------------ apt, for real


@pytest.mark.parametrize(
    ("repo", "package"),
    [
        (CUDA_UBUNTU, "nvidia-utils-580"),
        (CUDA_DEBIAN, "nvidia-driver-pinning-580"),
        (DISTS_REPO, "hello-stub"),
    ],
)
def test_apt_updates_and_downloads_through_the_signature_chain(
    served: Served, tmp_path: Path, repo: str, package: str
) -> None:
    apt = _apt(tmp_path, served.mirror, repo)
    update = apt.run("update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "W:" not in update.stderr, update.stderr
    assert any(p.endswith("InRelease") for p in served.server.requests)

    download = apt.run("download", package)
    assert download.returncode == 0, download.stdout + download.stderr
    (fetched,) = apt.downloads.glob(f"{package}_*.deb")
    built = served.mirror.repositories[repo].debs[package]
    assert fetched.read_bytes() == built.read_bytes()


def test_apt_rejects_a_repository_signed_by_another_key(served: Served, tmp_path: Path) -> None:
    with throwaway_key() as other:
        keyring = other.export(tmp_path / "other.gpg", armor=False)
    apt = _apt(tmp_path, served.mirror, CUDA_UBUNTU, keyring=keyring)
    update = apt.run("update")
    assert update.returncode != 0
    assert "NO_PUBKEY" in update.stdout + update.stderr


def test_apt_rejects_tampered_packages(mirror: Mirror, tmp_path: Path) -> None:
    tampered = _tampered_copy(mirror, tmp_path)
    folder = tampered.root / CUDA_UBUNTU
    packages = (
        (folder / "Packages").read_bytes().replace(b"580.95.05-0ubuntu1", b"580.95.06-0ubuntu1")
    )
    (folder / "Packages").write_bytes(packages)
    (folder / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    with serve(tampered) as running:
        update = _apt(tmp_path, running.mirror, CUDA_UBUNTU).run("update")
    assert update.returncode != 0
    failure = next(line for line in update.stderr.splitlines() if line.startswith("E: Failed"))
    assert "/Packages" in failure
    assert "Hash Sum mismatch" in failure or "unexpected size" in failure


def test_apt_rejects_a_tampered_inrelease(mirror: Mirror, tmp_path: Path) -> None:
    tampered = _tampered_copy(mirror, tmp_path)
    inrelease = tampered.root / CUDA_UBUNTU / "InRelease"
    inrelease.write_text(
        inrelease.read_text().replace("Label: NVIDIA CUDA", "Label: NVIDIA CUDX"), encoding="utf-8"
    )
    with serve(tampered) as running:
        update = _apt(tmp_path, running.mirror, CUDA_UBUNTU).run("update")
    assert update.returncode != 0
    assert "BADSIG" in update.stdout + update.stderr


# ------------------------------------------------------------------ tarballs


def test_rpm_repo_signed_with_module_streams(mirror: Mirror, tmp_path: Path) -> None:
    repo = mirror.rpm_repositories[CUDA_AMZN2023]
    # rpm's own check, against a database that trusts only the published key
    database = tmp_path / "rpmdb"
    key = repo.directory / "D42D0685.pub"
    subprocess.run(["rpm", "--dbpath", str(database), "--import", str(key)], check=True)
    packages = sorted(repo.directory.glob("*.rpm"))
    checked = subprocess.run(
        ["rpm", "--dbpath", str(database), "-K", *map(str, packages)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert packages
    assert checked.stdout.count("digests signatures OK") == len(packages)
    repomd = repo.directory / "repodata" / "repomd.xml"
    signature = repomd.with_name("repomd.xml.asc")
    assert verify_detached(key, signature, repomd) == mirror.fingerprint
    documents = list(
        yaml.safe_load_all(gzip.decompress((repomd.parent / "modules.yaml.gz").read_bytes()))
    )
    streams = {d["data"]["stream"]: d["data"]["artifacts"]["rpms"] for d in documents}
    assert sorted(streams) == ["575-dkms", "575-open", "580-dkms", "580-open"]
    assert "kmod-nvidia-open-dkms-3:580.95.05-1.amzn2023.noarch" in streams["580-open"]
    assert "kmod-nvidia-latest-dkms-3:580.95.05-1.amzn2023.noarch" in streams["580-dkms"]
    # fabric manager follows the driver inside its stream, under its name of the branch
    assert "nvidia-fabricmanager-0:580.95.05-1.x86_64" in streams["580-open"]
    assert "nvidia-fabric-manager-0:575.57.08-1.x86_64" in streams["575-open"]
    assert "nvidia-imex-575-0:575.57.08-1.x86_64" in streams["575-dkms"]


def test_tarball_checksum_and_signature_hold_until_a_byte_flips(
    mirror: Mirror, tmp_path: Path
) -> None:
    built = mirror.tarballs[EFA]
    assert built.signature is not None
    assert hashlib.sha256(built.file.read_bytes()).hexdigest() == mirror.sha256[EFA]
    assert verify_detached(mirror.key_path, built.signature, built.file) == mirror.fingerprint

    flipped = tmp_path / built.file.name
    data = bytearray(built.file.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    assert hashlib.sha256(flipped.read_bytes()).hexdigest() != mirror.sha256[EFA]
    assert verify_detached(mirror.key_path, built.signature, flipped) is None


def test_tarballs_are_reproducible_and_the_efa_stand_in_checks_its_flags(
    mirror: Mirror, tmp_path: Path
) -> None:
    gdrcopy = mirror.tarballs["github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz"]
    with tarfile.open(gdrcopy.file) as tar:
        assert tar.getnames()[0] == "gdrcopy-2.5.1"
    with tarfile.open(mirror.tarballs[EFA].file) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert "aws-efa-installer/DEBS/DEBIAN12/x86_64/libnccl-ofi_1.22.0_amd64.deb" in names
    log = tmp_path / "efa.log"
    script = tmp_path / "aws-efa-installer/efa_installer.sh"
    env = {EFA_LOG_ENV: str(log), "PATH": "/usr/bin:/bin"}
    # what the real installer refuses, it refuses before installing anything
    unknown = subprocess.run(
        [script, "-y", "--frobnicate"], env=env, capture_output=True, check=False
    )
    assert unknown.returncode == 1
    assert b"unknown option --frobnicate" in unknown.stderr
    bad_mpi = subprocess.run(
        [script, "-y", "--mpi=openmpi9"], env=env, capture_output=True, check=False
    )
    assert bad_mpi.returncode == 1
    assert b"not openmpi9" in bad_mpi.stderr
    assert log.read_text() == "-y --frobnicate\n-y --mpi=openmpi9\n"
    again = build_mirror(tmp_path / "again", replace(default_spec(), repositories=()))
    assert again.sha256 == {p: t.sha256 for p, t in mirror.tarballs.items() if p in again.sha256}


# ------------------------------------------------------------------ server


def test_server_answers_404_in_an_outage_and_refuses_once_stopped(mirror: Mirror) -> None:
    with serve(mirror) as running:
        url = running.mirror.url_of(EFA)
        assert hashlib.sha256(_get(url)).hexdigest() == mirror.sha256[EFA]
        with running.server.outage(), pytest.raises(urllib.error.HTTPError) as info:
            _get(url)
        assert info.value.code == 404
        assert len(_get(url)) > 0
    with pytest.raises(urllib.error.URLError) as refused:
        _get(url)
    assert isinstance(refused.value.reason, ConnectionRefusedError)


# ------------------------------------------------------------------ catalog overlay


def _render(catalog_dir: Path, image: str, overrides: Path, profile: str) -> dict[str, Any]:
    # --catalog belongs to each subcommand: `nodeforge --catalog DIR render` is a usage error.
    command = [str(NODEFORGE), "render", image, "--catalog", str(catalog_dir), "--profile", profile]
    result = subprocess.run(
        [*command, "--vars", str(overrides)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_overlay_points_every_download_at_the_mirror(served: Served, catalog_dir: Path) -> None:
    mirror = served.mirror
    assert mirror.url is not None
    overlay = write_overlay(catalog_dir, "p5-ubuntu24.04", mirror)
    document = _render(catalog_dir, overlay.image, overlay.overrides_file, "p5.48xlarge")
    stack = document["nodeforge"]["stack"]
    assert stack["name"] == "hopper-2026.12-mirror"
    assert set(stack["repositories"]) == {"cuda", "nvidia_container_toolkit"}
    for repo in stack["repositories"].values():
        assert repo["url"].startswith(mirror.url)
        assert repo["gpg_fingerprint"] == mirror.fingerprint
        assert _get(repo["key_url"]) == mirror.key_path.read_bytes()
        assert _get(repo["url"] + "InRelease").startswith(b"-----BEGIN PGP SIGNED MESSAGE-----")
    assert stack["repositories"]["cuda"]["url"] == mirror.url_of(CUDA_UBUNTU + "/")
    assert set(stack["artifacts"]) == {"efa_installer", "gdrcopy", "nccl_tests"}
    for artifact in stack["artifacts"].values():
        assert artifact["url"].startswith(mirror.url)
        assert hashlib.sha256(_get(artifact["url"])).hexdigest() == artifact["sha256"]
    efa = stack["artifacts"]["efa_installer"]
    assert efa["gpg_fingerprint"] == mirror.fingerprint
    assert _get(efa["signature_url"]) == mirror.tarballs[EFA].signature.read_bytes()  # type: ignore[union-attr]


def test_overlay_refuses_a_stack_the_mirror_does_not_cover(
    mirror: Mirror, catalog_dir: Path, edit: Edit
) -> None:
    def add_artifact(data: dict[str, Any]) -> None:
        data["artifacts"]["aws_ofi_nccl"] = {
            "url": "https://github.com/aws/aws-ofi-nccl/archive/v1.22.0.tar.gz",
            "sha256": "unknown",
            "source": "test",
        }

    add_reference_stacks(catalog_dir)
    edit("stacks/hopper-2026.11.yml", add_artifact)
    with pytest.raises(MirrorGapError, match=r"artifacts\.aws_ofi_nccl"):
        write_stack_overlay(catalog_dir, "hopper-2026.11", mirror)
    path = write_stack_overlay(catalog_dir, "hopper-2026.11", mirror, allow_gaps=True)
    assert "aws_ofi_nccl" not in path.read_text()


def test_overlay_checks_coverage_for_the_image_target(mirror: Mirror, catalog_dir: Path) -> None:
    served_elsewhere = mirror.served_at("http://127.0.0.1:9/")
    with pytest.raises(MirrorGapError, match=r"ubuntu2404/sbsa|repositories\.cuda"):
        write_overlay(catalog_dir, "gb200-ubuntu24.04-arm64", served_elsewhere)
