"""The efa role never runs an installer it could not verify: a checksum that does not match, a
signature from a key other than the pinned one, a tarball changed after signing. Each stops the
role before the installer runs, with a message naming the artifact, and installs nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeforge.local.podman import SystemdContainer
from tests.integration.conftest import require_podman, run_playbook
from tests.mirror import Mirror, build_mirror, default_spec, serve

EFA = "efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz"
# AWS's real fingerprint: the stub mirror's throwaway key is not it.
AWS_FINGERPRINT = "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"
PLAYBOOK = """
- name: The efa role with one bad input
  hosts: all
  become: true
  roles:
    - role: efa
"""


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    built = build_mirror(tmp_path_factory.mktemp("mirror"), default_spec())
    with serve(built) as served:
        yield served.mirror


@pytest.fixture(scope="module")
def node(base_images: dict[str, str]) -> Iterator[SystemdContainer]:
    require_podman()
    with SystemdContainer(base_images["NODEFORGE_BASE_DEBIAN13"]) as container:
        yield container


def _role_vars(mirror: Mirror, **override: str) -> dict[str, str]:
    return {
        "efa_installer_version": "1.51.0",
        "efa_installer_url": mirror.url_of(EFA),
        "efa_installer_sha256": mirror.sha256[EFA],
        "efa_installer_key_url": mirror.url_of("efa-installer.amazonaws.com/aws-efa-installer.key"),
        "efa_installer_gpg_fingerprint": mirror.fingerprint,
        **override,
    }


def _assert_refused(node: SystemdContainer, output: str, reason: str) -> None:
    assert "EFA installer 1.51.0" in output
    assert "aws-efa-installer-1.51.0.tar.gz" in output
    assert reason in output
    assert "Nothing was installed." in output
    assert "Traceback" not in output
    leftovers = (
        "/opt/amazon",
        "/var/tmp/nodeforge-efa",
        "/var/log/nodeforge-efa-installer-stub.log",
    )
    for path in leftovers:
        assert node.exec(["test", "-e", path], check=False).returncode != 0, path


def test_checksum_mismatch(node: SystemdContainer, mirror: Mirror, tmp_path: Path) -> None:
    result = run_playbook(
        node.name, PLAYBOOK, tmp_path, _role_vars(mirror, efa_installer_sha256="0" * 64)
    )
    assert result.returncode != 0
    _assert_refused(node, result.stdout + result.stderr, "did not match")


def test_signature_from_another_key(node: SystemdContainer, mirror: Mirror, tmp_path: Path) -> None:
    result = run_playbook(
        node.name,
        PLAYBOOK,
        tmp_path,
        _role_vars(mirror, efa_installer_gpg_fingerprint=AWS_FINGERPRINT),
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    _assert_refused(node, output, f"pinned fingerprint {AWS_FINGERPRINT}")
    assert f"VALIDSIG {mirror.fingerprint}" in output


def test_tarball_changed_after_signing(
    node: SystemdContainer, mirror: Mirror, tmp_path: Path
) -> None:
    tarball = mirror.root / EFA
    original = tarball.read_bytes()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0xFF
    tarball.write_bytes(bytes(tampered))
    try:
        # with no sha256 in the stack the signature is the only check, and it must hold
        result = run_playbook(
            node.name, PLAYBOOK, tmp_path, _role_vars(mirror, efa_installer_sha256="unknown")
        )
    finally:
        tarball.write_bytes(original)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    _assert_refused(node, output, "the signature does not verify")
    assert "BADSIG" in output
