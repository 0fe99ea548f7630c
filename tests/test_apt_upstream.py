"""The apt side of `nodeforge outdated`: signed apt repositories on loopback (a flat one as NVIDIA
lays them out, a `dists/` one as Debian does), each built by dpkg-scanpackages and signed by a
throwaway gpg key. Served as pinned: nothing to report; a pin removed, a newer version added, a
key rotated, an index tampered with, a repository that does not answer. Debian version order
against dpkg's own, and the package names against the roles that install them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeforge import apt_upstream
from nodeforge.apt_upstream import (
    AptPin,
    AptRepository,
    DebianVersion,
    apt_pins,
    check_pins,
    http_get,
)
from nodeforge.catalog.loader import Catalog
from nodeforge.cli import main
from nodeforge.rolevars import Context, role_inputs
from nodeforge.target import target_for
from tests.conftest import REPO
from tests.mirror.aptrepo import RepoSpec, build_repo
from tests.mirror.debs import DebSpec
from tests.mirror.gpg import SigningKey, throwaway_key
from tests.mirror.server import MirrorServer, serve_directory

FLAT = "developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64"


@pytest.fixture(scope="module")
def key() -> Iterator[SigningKey]:
    with throwaway_key() as made:
        yield made


@pytest.fixture(scope="module")
def other_key() -> Iterator[SigningKey]:
    with throwaway_key("rotated <rotated@example.invalid>") as made:
        yield made


@pytest.fixture
def served(tmp_path: Path, key: SigningKey) -> Iterator[tuple[MirrorServer, Path]]:
    """(server, root): the key published at FLAT/key.pub."""
    root = tmp_path / "mirror"
    key.export(root / FLAT / "key.pub", armor=True)
    with serve_directory(root) as server:
        yield server, root


def _flat(root: Path, key: SigningKey, *packages: DebSpec) -> None:
    build_repo(root, RepoSpec(path=FLAT, packages=packages), key)


def _pins(server: MirrorServer, key: SigningKey) -> list[AptPin]:
    repository = AptRepository(
        f"{server.url}{FLAT}/", "amd64", key_url=f"{server.url}{FLAT}/key.pub",
        fingerprint=key.fingerprint,
    )  # fmt: skip
    return [
        AptPin("nvidia_driver", "nvidia-dkms-595-open", "595.91.07-*", repository),
        AptPin("nccl", "libnccl2", "2.30.7-1+cuda13.2", repository),
    ]


DRIVER = DebSpec("nvidia-dkms-595-open", "595.91.07-0ubuntu1")
NCCL = DebSpec("libnccl2", "2.30.7-1+cuda13.2")


def test_a_repository_that_serves_every_pin_reports_nothing(
    served: tuple[MirrorServer, Path], key: SigningKey
) -> None:
    server, root = served
    _flat(root, key, DRIVER, NCCL, DebSpec("libnccl2", "2.30.7-1+cuda13.0"))
    assert check_pins(_pins(server, key), http_get) == []
    # apt's way in: the clearsigned InRelease, then the index it lists
    assert f"/{FLAT}/InRelease" in server.requests
    assert f"/{FLAT}/Packages.gz" in server.requests


def test_a_removed_pin_is_gone_and_names_what_is_served(
    served: tuple[MirrorServer, Path], key: SigningKey
) -> None:
    server, root = served
    _flat(root, key, DRIVER, DebSpec("libnccl2", "2.30.8-1+cuda13.2"))
    [finding] = check_pins(_pins(server, key), http_get)
    assert (finding.kind, finding.source, finding.environment) == ("gone", "apt", "nccl")
    assert finding.pinned == "libnccl2=2.30.7-1+cuda13.2"
    assert "serves 2.30.8-1+cuda13.2" in finding.detail


def test_a_newer_version_is_news(served: tuple[MirrorServer, Path], key: SigningKey) -> None:
    server, root = served
    _flat(root, key, DRIVER, DebSpec("nvidia-dkms-595-open", "595.101.04-0ubuntu1"), NCCL)
    [finding] = check_pins(_pins(server, key), http_get)
    assert finding.kind == "newer" and finding.project == "nvidia-dkms-595-open"
    assert finding.detail == "595.101.04-0ubuntu1 is out (the stack pins 595.91.07-*)"


def test_a_rotated_key_is_unverified_for_every_pin(
    served: tuple[MirrorServer, Path], key: SigningKey, other_key: SigningKey
) -> None:
    server, root = served
    _flat(root, other_key, DRIVER, NCCL)  # signed by another key than the pinned one
    findings = check_pins(_pins(server, key), http_get)
    assert [f.kind for f in findings] == ["unverified", "unverified"]
    assert f"not signed by the pinned {key.fingerprint}" in findings[0].detail


def test_an_index_that_is_not_the_one_release_lists_is_unverified(
    served: tuple[MirrorServer, Path], key: SigningKey
) -> None:
    server, root = served
    _flat(root, key, DRIVER, NCCL)
    (root / FLAT / "Packages.gz").write_bytes(b"\x1f\x8b tampered")
    findings = check_pins(_pins(server, key), http_get)
    assert {f.kind for f in findings} == {"unverified"}
    assert "does not match its sha256 in Release" in findings[0].detail


def test_release_with_a_detached_signature_when_there_is_no_inrelease(
    served: tuple[MirrorServer, Path], key: SigningKey
) -> None:
    server, root = served
    _flat(root, key, DRIVER, NCCL)
    (root / FLAT / "InRelease").unlink()
    assert check_pins(_pins(server, key), http_get) == []
    assert f"/{FLAT}/Release.gpg" in server.requests


def test_a_repository_that_does_not_answer(
    served: tuple[MirrorServer, Path], key: SigningKey
) -> None:
    server, root = served
    _flat(root, key, DRIVER, NCCL)
    server.fail_with(503)
    findings = check_pins(_pins(server, key), http_get)
    assert {f.kind for f in findings} == {"unreachable"}


# --- Debian's archive: dists/ layout, two suites, the archive keyring ----------------------------


def _debian(root: Path, key: SigningKey, updates: tuple[DebSpec, ...] = ()) -> None:
    archive = "deb.debian.org/debian"
    main_suite = (
        DebSpec("nvidia-open-kernel-dkms", "535.261.03-1"),
        DebSpec("nvidia-cuda-toolkit", "11.8.89~11.8.0-5~deb12u1"),
    )
    for suite, packages in (("bookworm", main_suite), ("bookworm-updates", updates)):
        spec = RepoSpec(
            path=archive, packages=packages, layout="dists", suite=suite, component="non-free"
        )
        build_repo(root, spec, key)


@pytest.fixture
def debian(
    served: tuple[MirrorServer, Path], key: SigningKey, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[MirrorServer, Path, Path]:  # fmt: skip
    """(server, root, --vars file naming it as the mirror); the throwaway key stands in for
    Debian's archive keyring."""
    server, root = served
    keyring = key.export(tmp_path / "debian-archive-keyring.gpg", armor=False)
    monkeypatch.setattr(apt_upstream, "DEBIAN_KEYRING", keyring)
    overrides = tmp_path / "vars.yml"
    overrides.write_text(f"mirror: {server.url}\n", encoding="utf-8")
    return server, root, overrides


def _outdated(
    capsys: pytest.CaptureFixture[str], overrides: Path
) -> tuple[int, list[dict[str, str]]]:
    code = main(
        ["outdated", "local-debian12", "--source", "apt", "--vars", str(overrides), "--json"]
    )
    findings: list[dict[str, str]] = json.loads(capsys.readouterr().out)["findings"]
    return code, findings


def test_the_default_stack_against_debian_s_archive(
    debian: tuple[MirrorServer, Path, Path], key: SigningKey, capsys: pytest.CaptureFixture[str]
) -> None:
    server, root, overrides = debian
    _debian(root, key)
    assert _outdated(capsys, overrides) == (0, [])
    assert "/deb.debian.org/debian/dists/bookworm-updates/InRelease" in server.requests


def test_a_point_release_in_the_updates_suite_is_news(
    debian: tuple[MirrorServer, Path, Path], key: SigningKey, capsys: pytest.CaptureFixture[str]
) -> None:
    _, root, overrides = debian
    _debian(root, key, updates=(DebSpec("nvidia-open-kernel-dkms", "535.274.02-1~deb12u1"),))
    code, [finding] = _outdated(capsys, overrides)
    assert code == 0
    assert finding["kind"] == "newer" and finding["environment"] == "nvidia_driver"
    assert finding["detail"].startswith("535.274.02-1~deb12u1 is out")


def test_a_debian_archive_signed_by_an_unknown_key_fails(
    debian: tuple[MirrorServer, Path, Path], other_key: SigningKey,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _, root, overrides = debian
    _debian(root, other_key)
    code, findings = _outdated(capsys, overrides)
    assert code == 1
    assert [f["kind"] for f in findings] == ["unverified", "unverified"]


# --- which packages, from the rendered role inputs -------------------------------------------


def _target_pins(catalog: Catalog, image: str, profile: str) -> list[AptPin]:
    target = target_for(catalog, image, profile)
    inputs = {name: value for name, (value, _) in role_inputs(Context(target)).items()}
    return apt_pins(target, inputs)


def test_pins_of_the_shipped_images(shipped: Catalog) -> None:
    default = _target_pins(shipped, "local-debian12", "g6e.48xlarge")
    assert [(p.package, p.version) for p in default] == [
        ("nvidia-open-kernel-dkms", "535.261.03-*"),
        ("nvidia-cuda-toolkit", "*~11.8.0-*"),
    ]
    assert default[0].repository.suites == ("bookworm", "bookworm-updates")
    assert default[0].repository.url == "http://deb.debian.org/debian/"
    hopper = _target_pins(shipped, "p5-ubuntu24.04", "p5.48xlarge")
    assert [(p.layer, p.package, p.version) for p in hopper] == [
        ("nvidia_driver", "nvidia-dkms-595-open", "595.91.07-*"),
        ("cuda_toolkit", "cuda-toolkit-13-2", "13.2.2-*"),
        ("cuda_toolkit", "libcudnn9-cuda-13", "9.26.0.51-*"),
        ("nccl", "libnccl2", "2.30.7-1+cuda13.2"),
        ("container_runtime", "nvidia-container-toolkit", "1.20.1-1"),
    ]
    assert hopper[0].repository.fingerprint == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert _target_pins(shipped, "p5-al2023", "p5.48xlarge") == []  # dnf


@pytest.mark.parametrize(
    ("role_file", "name"),
    [
        ("roles/nvidia_driver/vars/main.yml", "nvidia-open-kernel-dkms"),
        ("roles/nvidia_driver/vars/main.yml", "nvidia-kernel-open-dkms"),
        ("roles/nvidia_driver/vars/main.yml", "nvidia-kernel-dkms"),
        ("roles/nvidia_driver/vars/main.yml", '"nvidia-dkms-{{ nvidia_driver_branch }}-open"'),
        ("roles/cuda_toolkit/vars/main.yml", "nvidia-cuda-toolkit"),
        ("roles/cuda_toolkit/vars/main.yml", "'cuda-toolkit-'"),
        ("roles/nccl/vars/main.yml", "libnccl2"),
        ("roles/container_runtime/vars/main.yml", "- nvidia-container-toolkit\n"),
    ],
)
def test_the_names_are_the_ones_the_roles_install(role_file: str, name: str) -> None:
    assert name in (REPO / role_file).read_text(encoding="utf-8")


# --- Debian version order ------------------------------------------------------------------------

ORDERED = [
    ("1.0~rc1", "1.0"),
    ("1.0", "1.0-1"),
    ("1.0-1", "1.0a-1"),
    ("1.0~", "1.0"),
    ("1.0~~", "1.0~"),
    ("2.0", "1:0.1"),
    ("535.261.03-1", "535.261.03-1+deb12u1"),
    ("11.8.89~11.8.0-5~deb12u1", "11.8.89~11.8.0-5"),
    ("2.30.7-1+cuda13.2", "2.30.7-1+cuda13.10"),
    ("595.91.07-0ubuntu1", "595.101.04-0ubuntu1"),
    ("1.9", "1.10"),
    ("1.0-1", "1.0-1.1"),
    ("1.0+b1", "1.0.1"),
]


@pytest.mark.parametrize(("older", "newer"), ORDERED)
def test_debian_version_order(older: str, newer: str) -> None:
    assert DebianVersion(older) < DebianVersion(newer)
    assert DebianVersion(newer) > DebianVersion(older)
    assert DebianVersion(older) != DebianVersion(newer)
    dpkg = shutil.which("dpkg")
    if dpkg is not None:  # and dpkg agrees
        compared = subprocess.run([dpkg, "--compare-versions", older, "lt", newer], check=False)
        assert compared.returncode == 0


def test_equal_debian_versions() -> None:
    assert DebianVersion("1.0") == DebianVersion("1.00")
    assert DebianVersion("0:1.0-1") == DebianVersion("1.0-1")
