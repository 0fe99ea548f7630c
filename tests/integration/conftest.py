"""Integration tests need podman and debootstrap. Where they are missing the tests skip with
the reason, unless NODEFORGE_REQUIRE_PODMAN=1 (CI, `make test`) turns that into a failure.

`make test` runs them on several pytest-xdist workers (`--dist loadgroup`): Molecule scenarios
side by side, and every test that builds or boots the local image in the one group
`local_image`, on one worker, since they share its tag and count build containers. The longest
(`runs_long`) start first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import load_catalog
from nodeforge.local.baseimage import ensure_base_image
from nodeforge.local.playbook import run_in_container
from nodeforge.local.podman import image_exists
from nodeforge.render import manifest_document
from nodeforge.target import target_for
from tests.conftest import REPO, SHIPPED

LOCAL_IMAGE = "local-debian13"
LOCAL_IMAGE_REF = f"localhost/nodeforge/{LOCAL_IMAGE}:{LOCAL_IMAGE}"
MANIFEST_PATH = "/etc/nodeforge/manifest.json"
local_image_group = pytest.mark.xdist_group("local_image")


def require_podman() -> None:
    missing = [tool for tool in ("podman", "debootstrap") if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed (tools/setup-podman.sh installs them)"
    if os.environ.get("NODEFORGE_REQUIRE_PODMAN") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def base_images() -> dict[str, str]:
    """The Debian 12 and 13 base images, built once (cached by content across runs)."""
    require_podman()
    return {
        "NODEFORGE_BASE_DEBIAN12": ensure_base_image("bookworm"),
        "NODEFORGE_BASE_DEBIAN13": ensure_base_image("trixie"),
    }


def _built_from_this_catalog(ref: str) -> bool:
    """Whether the image's manifest is the one the shipped catalog renders now: an image built
    before a catalog change (on a developer's machine, or on a machine that keeps podman's
    storage between runs) fails every manifest check for a reason that is not the test's."""
    if not image_exists(ref):
        return False
    catalog = load_catalog(SHIPPED)
    rendered = manifest_document(catalog, target_for(catalog, LOCAL_IMAGE, None))
    expected = json.loads(json.dumps(rendered))
    shown = subprocess.run(
        ["podman", "run", "--rm", "--entrypoint", "cat", ref, MANIFEST_PATH],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.returncode == 0 and json.loads(shown.stdout) == expected


@pytest.fixture(scope="session")
def local_image() -> str:
    """The image local-debian13, built here unless an image built from this catalog exists."""
    require_podman()
    if not _built_from_this_catalog(LOCAL_IMAGE_REF):
        subprocess.run(
            [sys.executable, "-m", "nodeforge.cli", "build", LOCAL_IMAGE, "--target", "local"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    return LOCAL_IMAGE_REF


def build_containers(image: str) -> list[str]:
    """The containers of the image's local builds that exist now (a finished build leaves
    none); builds of other images, in tests on other workers, are theirs."""
    if shutil.which("podman") is None:
        return []
    listed = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [n for n in listed.stdout.split() if n.startswith(f"nodeforge-build-{image}-")]


def image_id(ref: str) -> str | None:
    """The image id behind a tag, None when there is no such tag."""
    found = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def nodeforge_cli(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`nodeforge ARGS` in a child process, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "nodeforge.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def run_playbook(
    container: str, playbook: str, work_dir: Path, extra_vars: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with the repo's ansible.cfg against one booted container."""
    path = work_dir / "playbook.yml"
    path.write_text(playbook, encoding="utf-8")
    return run_in_container(path, container, extra_vars or {}, repo_root=REPO)
