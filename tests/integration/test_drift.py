"""`nodeforge drift` against containers booted from the locally built image: a clean node shows
no drift; a node whose hold was removed, whose package version changed and whose unit is gone
shows exactly those; a host without a manifest is not checked, and says why."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeforge.local.podman import SystemdContainer
from nodeforge.local.podman import run as podman
from tests.integration.conftest import local_image_group, nodeforge_cli

pytestmark = local_image_group
TOOLS = "/opt/nodeforge/tools"
EXIT_DRIFT = 1


def _wheel(name: str, version: str) -> bytes:
    """A wheel of `name` at `version` holding an empty package: what pip installs in place of
    the locked one, as an upgrade by hand would (pip reads the version from its metadata)."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        f"{name.replace('-', '_')}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(body)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, body in files.items():
            archive.writestr(path, body)
    return buffer.getvalue()


@pytest.fixture
def node(local_image: str) -> Iterator[str]:
    with SystemdContainer(local_image) as container:
        yield container.name


def _drift(tmp_path: Path, hosts: str) -> tuple[int, dict[str, Any], str]:
    result = nodeforge_cli(
        "drift", "--hosts", hosts, "--report-dir", str(tmp_path / "drift"), "--json"
    )
    return result.returncode, json.loads(result.stdout or "{}"), result.stderr


def test_a_clean_node_has_no_drift_and_a_changed_one_shows_each_change(
    node: str, tmp_path: Path
) -> None:
    code, report, stderr = _drift(tmp_path, f"podman://{node}")
    assert code == 0, stderr
    [clean] = report["nodes"]
    assert clean["image"] == "local-debian13"
    assert clean["drifted"] == []

    # a hold removed, a locked package replaced by another version, a unit file deleted
    wheel = tmp_path / "annotated_types-0.7.0-py3-none-any.whl"
    wheel.write_bytes(_wheel("annotated-types", "0.7.0"))
    podman(["cp", str(wheel), f"{node}:/tmp/{wheel.name}"])
    script = (
        "apt-mark unhold linux-image-cloud-amd64 && "
        f"{TOOLS}/bin/python -m pip install --quiet --no-index --no-deps /tmp/{wheel.name} && "
        "rm /etc/systemd/system/nodeforge-xid-watch.service && systemctl daemon-reload"
    )
    podman(["exec", node, "sh", "-c", script])

    code, report, stderr = _drift(tmp_path, f"podman://{node}")
    assert code == EXIT_DRIFT, stderr
    [changed] = report["nodes"]
    found = {d["check"].split("[")[0]: d["found"] for d in changed["drifted"]}
    assert set(found) == {
        "test_kernel_installed_and_held",
        "test_node_tools_equal_the_lock",
        "test_watcher_and_gate_enabled_before_the_gated_units",
    }
    assert "linux-image-cloud-amd64" in found["test_kernel_installed_and_held"]
    assert "'annotated-types': '0.7.0 (lock: 0.8.0)'" in found["test_node_tools_equal_the_lock"]
    assert (
        "nodeforge-xid-watch.service"
        in found["test_watcher_and_gate_enabled_before_the_gated_units"]
    )


def test_a_host_without_a_manifest_is_not_checked(
    node: str, base_images: dict[str, str], tmp_path: Path
) -> None:
    # the base image: a Debian systemd container that nodeforge never built an image into
    base = base_images["NODEFORGE_BASE_DEBIAN13"]
    other = f"{node}-bare"
    podman(["run", "-d", "--name", other, "--network", "host", base, "sleep", "infinity"])
    try:
        result = nodeforge_cli(
            "drift", "--hosts", f"podman://{node},podman://{other}",
            "--report-dir", str(tmp_path / "drift"),
        )  # fmt: skip
    finally:
        podman(["rm", "-f", "-t", "0", other], check=False)
    assert result.returncode == EXIT_DRIFT, result.stderr
    assert f"{node}  image local-debian13: no drift" in result.stdout
    assert f"{other}  image ?: not checked: no /etc/nodeforge/manifest.json" in result.stdout
    assert "1 of 2 node(s) drifted or not checked" in result.stdout
