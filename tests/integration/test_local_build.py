"""`nodeforge build --target local`: the embedded default end to end, and its failure modes."""

from __future__ import annotations

import json
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
from tests.integration.conftest import LOCAL_IMAGE_REF, local_image_group, require_podman
from tests.mirror import build_mirror, default_spec, serve, write_overrides, write_stack_overlay

pytestmark = local_image_group


def _nodeforge(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeforge.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _build_containers() -> list[str]:
    if shutil.which("podman") is None:
        return []
    listed = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [n for n in listed.stdout.split() if n.startswith("nodeforge-build-")]


def _image_id(ref: str) -> str | None:
    found = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


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
        write_stack_overlay(catalog, "hopper-2026.11", served.mirror)
        image = {
            "name": "local-artifacts",
            "description": "Debian 13 with a layer that downloads a checksummed artifact",
            "extends": "local-debian13",
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
    before = _build_containers()
    result = _nodeforge(
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
    assert _build_containers() == before


def test_mirror_down(artifact_catalog: tuple[Path, Path, Path], tmp_path: Path) -> None:
    catalog, _, _ = artifact_catalog
    dead = tmp_path / "dead-mirror.yml"
    dead.write_text("mirror: http://127.0.0.1:9/\n", encoding="utf-8")
    result = _nodeforge(
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
    result = _nodeforge("build", "local-debian99", "--target", "local")
    assert result.returncode == 2
    assert "unknown image 'local-debian99'" in result.stderr
    result = _nodeforge("build", "local-debian13", "--target", "local", "--profile", "p5.48xlarge")
    assert result.returncode == 2
    assert "not a target of image 'local-debian13'" in result.stderr


def test_non_debian_image_is_refused() -> None:
    result = _nodeforge("build", "p5-ubuntu24.04", "--target", "local", "--profile", "p5.48xlarge")
    assert result.returncode == 2
    assert "local builds need a Debian 12 or 13 base image" in result.stderr


def test_podman_missing(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    result = _nodeforge(
        "build", "local-debian13", "--target", "local", "--work-dir", str(tmp_path), env=env
    )
    assert result.returncode == 2
    assert "podman is not installed" in result.stderr
    assert "tools/setup-podman.sh" in result.stderr


# ---------------------------------------------------------------- real builds


def test_build_reconverges_to_zero_changes(tmp_path: Path) -> None:
    require_podman()
    result = _nodeforge(
        "build",
        "local-debian13",
        "--target",
        "local",
        "--reconverge",
        "--json",
        "--work-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["image_ref"] == LOCAL_IMAGE_REF
    assert summary["changed"] > 0
    assert summary["reconverge"]["changed"] == 0
    assert summary["validation"]["failed"] == 0
    assert summary["validation"]["passed"] >= 10
    assert summary["bom"]["kernel"].startswith("linux-image-cloud-amd64 ")
    assert _image_id(LOCAL_IMAGE_REF) is not None
    assert _build_containers() == []
    # live progress went to stderr, task by task
    assert "base : Packages | install what is missing" in result.stderr


def test_ctrl_c_leaves_no_container_and_no_new_tag(tmp_path: Path) -> None:
    require_podman()
    before = _image_id(LOCAL_IMAGE_REF)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodeforge.cli",
            "build",
            "local-debian13",
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
    assert _build_containers(), "the build should be converging a container by now"
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    assert process.returncode == 130
    assert _build_containers() == []
    assert _image_id(LOCAL_IMAGE_REF) == before
