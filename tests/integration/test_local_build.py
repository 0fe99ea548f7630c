"""`nodeforge build --target local`: the embedded default end to end, and its failure modes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, SHIPPED
from tests.integration.conftest import (
    LOCAL_IMAGE,
    LOCAL_IMAGE_REF,
    build_containers,
    image_id,
    local_image_group,
    nodeforge_cli,
    require_podman,
)
from tests.mirror import (
    add_reference_stacks,
    build_mirror,
    default_spec,
    serve,
    write_overrides,
    write_stack_overlay,
)

pytestmark = local_image_group


# ---------------------------------------------------------------- bad input, no container needed


@pytest.fixture
def artifact_catalog(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """A catalog with a Debian 13 image whose efa and gdrcopy layers download from a served
    test mirror: the EFA installer is checked by its signature, gdrcopy by its sha256.

    Yields (catalog, overrides file, mirror root).
    """
    catalog = tmp_path / "images"
    shutil.copytree(SHIPPED, catalog)
    mirror = build_mirror(tmp_path / "mirror", default_spec())
    with serve(mirror) as served:
        assert served.mirror.url is not None
        add_reference_stacks(catalog)
        write_stack_overlay(catalog, "hopper-2026.11", served.mirror)
        image = {
            "name": "local-artifacts",
            "description": "Debian 13 with a layer that downloads a checksummed artifact",
            "extends": LOCAL_IMAGE,
            "stack": "hopper-2026.11-mirror",
            "layers": ["base", "efa", "gdrcopy", "image_cleanup"],
        }
        (catalog / "local-artifacts.yml").write_text(yaml.safe_dump(image), encoding="utf-8")
        overrides = write_overrides(tmp_path / "mirror-vars.yml", served.mirror.url)
        yield catalog, overrides, mirror.root


def test_checksum_mismatch_stops_before_any_container(
    artifact_catalog: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    catalog, overrides, root = artifact_catalog
    tarball = root / "github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz"
    data = bytearray(tarball.read_bytes())
    data[100] ^= 0xFF
    tarball.write_bytes(bytes(data))
    before = build_containers("local-artifacts")
    result = nodeforge_cli(
        "build",
        "local-artifacts",
        "--target",
        "local",
        "--catalog",
        str(catalog),
        "--vars",
        str(overrides),
        "--work-dir",
        str(tmp_path / "work"),
    )
    assert result.returncode == 2, result.stderr
    assert "artifact 'gdrcopy': sha256 mismatch" in result.stderr
    # the signed EFA installer, checked first, passed with the key fetched from the mirror
    assert (tmp_path / "work" / "artifacts" / "aws-efa-installer-1.51.0.tar.gz").exists()
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "work" / "artifacts" / "v2.5.1.tar.gz").exists()
    assert build_containers("local-artifacts") == before


def test_mirror_down(artifact_catalog: tuple[Path, Path, Path], tmp_path: Path) -> None:
    catalog, _, _ = artifact_catalog
    dead = tmp_path / "dead-mirror.yml"
    dead.write_text("mirror: http://127.0.0.1:9/\n", encoding="utf-8")
    result = nodeforge_cli(
        "build",
        "local-artifacts",
        "--target",
        "local",
        "--catalog",
        str(catalog),
        "--vars",
        str(dead),
        "--work-dir",
        str(tmp_path / "work"),
    )
    assert result.returncode == 2
    assert "127.0.0.1:9" in result.stderr
    assert "start the mirror" in result.stderr


def test_unknown_image_and_profile() -> None:
    result = nodeforge_cli("build", "local-debian99", "--target", "local")
    assert result.returncode == 2
    assert "unknown image 'local-debian99'" in result.stderr
    result = nodeforge_cli(
        "build", "local-debian13", "--target", "local", "--profile", "p5.48xlarge"
    )
    assert result.returncode == 2
    assert "not a target of image 'local-debian13'" in result.stderr


def test_non_debian_image_is_refused() -> None:
    result = nodeforge_cli(
        "build", "p5-ubuntu24.04", "--target", "local", "--profile", "p5.48xlarge"
    )
    assert result.returncode == 2
    assert "local builds need a Debian 12 or 13 base image" in result.stderr


def test_podman_missing(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    result = nodeforge_cli(
        "build", "local-debian13", "--target", "local", "--work-dir", str(tmp_path), env=env
    )
    assert result.returncode == 2
    assert "podman is not installed" in result.stderr
    assert "tools/setup-podman.sh" in result.stderr


# ---------------------------------------------------------------- real builds


def test_ctrl_c_leaves_no_container_and_no_new_tag(tmp_path: Path) -> None:
    require_podman()
    before = image_id(LOCAL_IMAGE_REF)
    # another test's leftover is that test's failure, not this one's
    others = build_containers(LOCAL_IMAGE)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodeforge.cli",
            "build",
            LOCAL_IMAGE,
            "--target",
            "local",
            "--work-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 300
    for line in process.stderr:
        if "[  5]" in line or time.monotonic() > deadline:
            break
    assert set(build_containers(LOCAL_IMAGE)) - set(others), "the build should be converging by now"
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    assert process.returncode == 130
    assert set(build_containers(LOCAL_IMAGE)) - set(others) == set()
    assert image_id(LOCAL_IMAGE_REF) == before
