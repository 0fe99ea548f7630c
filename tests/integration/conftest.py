"""Integration tests need podman and debootstrap. Where they are missing the tests skip with
the reason, unless NODEFORGE_REQUIRE_PODMAN=1 (CI, `make test`) turns that into a failure."""

from __future__ import annotations

import os
import shutil

import pytest

from nodeforge.local.baseimage import ensure_base_image


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
