"""The download preflight against the local mirror fixture: real HTTP, real gpg, stub tarballs."""

from __future__ import annotations

import dataclasses
import shutil
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from nodeforge import artifacts
from nodeforge.artifacts import artifacts_for, check_mirror, fetch_and_verify, fetch_key
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Artifact, AwsOfiNccl
from nodeforge.errors import InputError
from nodeforge.mirror import resolve_url
from nodeforge.target import Target, target_for
from tests.conftest import with_enroot
from tests.mirror import Mirror, Served, build_mirror, default_spec, serve

EFA = "efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz"
GDRCOPY = "github.com/NVIDIA/gdrcopy/archive/v2.5.1.tar.gz"
OTHER_KEY = "A" * 40

pytestmark = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Mirror:
    """Tarballs only: the apt repositories are not needed here and cost seconds to build."""
    spec = dataclasses.replace(default_spec(), repositories=())
    return build_mirror(tmp_path_factory.mktemp("mirror"), spec)


@pytest.fixture
def served(mirror: Mirror) -> Iterator[Served]:
    with serve(mirror) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "BACKOFF_S", 0.0)


def _by_sha256(mirror: Mirror, path: str = GDRCOPY) -> Artifact:
    return Artifact(url=f"https://{path}", sha256=mirror.sha256[path], source="test")


def _by_signature(mirror: Mirror, fingerprint: str | None = None) -> Artifact:
    return Artifact(
        url=f"https://{EFA}",
        sha256="unknown",
        gpg_fingerprint=fingerprint or mirror.fingerprint,
        signature_url=f"https://{EFA}.sig",
        key_url="https://efa-installer.amazonaws.com/aws-efa-installer.key",
        source="test",
    )


def _fetch_efa(served: Served, dest: Path, artifact: Artifact) -> Path:
    mirror = served.mirror
    return fetch_and_verify(
        "efa_installer",
        artifact,
        mirror.url_of(EFA),
        mirror.url_of(EFA + ".sig"),
        dest,
        keyring=mirror.key_path,
        retries=1,
    )


def _tampered(mirror: Mirror, tmp_path: Path, path: str) -> Mirror:
    root = tmp_path / "tampered"
    shutil.copytree(mirror.root, root)
    data = bytearray((root / path).read_bytes())
    data[len(data) // 2] ^= 0x01
    (root / path).write_bytes(bytes(data))
    return dataclasses.replace(mirror, root=root)


# ------------------------------------------------------------------ good downloads


def test_sha256_pinned_tarball_verifies(served: Served, tmp_path: Path) -> None:
    said: list[str] = []
    got = fetch_and_verify(
        "gdrcopy",
        _by_sha256(served.mirror),
        served.mirror.url_of(GDRCOPY),
        None,
        tmp_path / "dl",
        progress=said.append,
    )
    assert got == tmp_path / "dl" / "v2.5.1.tar.gz"
    assert got.read_bytes() == served.mirror.tarballs[GDRCOPY].file.read_bytes()
    assert sorted(p.name for p in got.parent.iterdir()) == ["v2.5.1.tar.gz"]
    assert said[0].startswith("downloading gdrcopy from http://127.0.0.1:")
    assert said[-1].startswith("verified gdrcopy")


def test_signature_pinned_tarball_verifies(served: Served, tmp_path: Path) -> None:
    got = _fetch_efa(served, tmp_path, _by_signature(served.mirror))
    assert got.read_bytes() == served.mirror.tarballs[EFA].file.read_bytes()
    # The signature is kept beside it, so that a later run can reuse the file offline.
    assert sorted(p.name for p in tmp_path.iterdir()) == [got.name, got.name + ".sig"]
    assert served.server.requests == [f"/{EFA}", f"/{EFA}.sig"]


# ------------------------------------------------------------------ tampering


def test_flipped_byte_is_a_sha256_mismatch_and_leaves_nothing(
    mirror: Mirror, tmp_path: Path
) -> None:
    dest = tmp_path / "dl"
    with serve(_tampered(mirror, tmp_path, GDRCOPY)) as running:
        url = running.mirror.url_of(GDRCOPY)
        with pytest.raises(InputError, match=r"sha256 mismatch") as info:
            fetch_and_verify("gdrcopy", _by_sha256(mirror), url, None, dest)
    message = str(info.value)
    assert message.startswith("artifact 'gdrcopy': sha256 mismatch (expected ")
    assert mirror.sha256[GDRCOPY] in message
    assert url in message
    assert list(dest.iterdir()) == []


def test_flipped_byte_fails_the_signature_and_leaves_nothing(
    mirror: Mirror, tmp_path: Path
) -> None:
    dest = tmp_path / "dl"
    failed = pytest.raises(InputError, match=r"signature check failed \(BADSIG\)")
    with serve(_tampered(mirror, tmp_path, EFA)) as running, failed as info:
        _fetch_efa(running, dest, _by_signature(mirror))
    assert str(info.value).startswith("artifact 'efa_installer': ")
    assert list(dest.iterdir()) == []


def test_a_signature_from_another_key_than_the_pinned_one_fails(
    served: Served, tmp_path: Path
) -> None:
    with pytest.raises(InputError) as info:
        _fetch_efa(served, tmp_path, _by_signature(served.mirror, OTHER_KEY))
    message = str(info.value)
    assert f"signed by key {served.mirror.fingerprint}, not the pinned {OTHER_KEY}" in message
    assert list(tmp_path.iterdir()) == []


def test_a_signed_artifact_needs_the_public_key_before_any_request(
    served: Served, tmp_path: Path
) -> None:
    mirror = served.mirror
    with pytest.raises(InputError, match="public key is needed"):
        fetch_and_verify(
            "efa_installer",
            _by_signature(mirror),
            mirror.url_of(EFA),
            mirror.url_of(EFA + ".sig"),
            tmp_path,
        )
    assert served.server.requests == []


# ------------------------------------------------------------------ unreachable


def test_404_is_reported_at_once_without_retries(served: Served, tmp_path: Path) -> None:
    url = served.mirror.url_of("github.com/NVIDIA/gdrcopy/archive/v9.9.9.tar.gz")
    with pytest.raises(InputError, match=r"HTTP 404") as info:
        fetch_and_verify("gdrcopy", _by_sha256(served.mirror), url, None, tmp_path, retries=3)
    assert str(info.value).startswith(f"artifact 'gdrcopy': cannot download {url} (HTTP 404")
    assert len(served.server.requests) == 1
    assert list(tmp_path.iterdir()) == []


def test_5xx_is_retried_then_reported(served: Served, tmp_path: Path) -> None:
    said: list[str] = []
    served.server.fail_with(503)
    with pytest.raises(InputError, match=r"cannot download .* \(HTTP 503") as info:
        fetch_and_verify(
            "gdrcopy",
            _by_sha256(served.mirror),
            served.mirror.url_of(GDRCOPY),
            None,
            tmp_path,
            retries=2,
            progress=said.append,
        )
    assert "Fix: start the mirror" in str(info.value)
    assert len(served.server.requests) == 3
    assert sum("retrying" in line for line in said) == 2


def test_a_stopped_mirror_cannot_download(served: Served, tmp_path: Path) -> None:
    url = served.mirror.url_of(GDRCOPY)
    served.server.stop()
    with pytest.raises(InputError) as info:
        fetch_and_verify("gdrcopy", _by_sha256(served.mirror), url, None, tmp_path, retries=1)
    message = str(info.value)
    assert message.startswith(f"artifact 'gdrcopy': cannot download {url} (Connection refused)")
    assert message.endswith("Fix: start the mirror or check the mirror: setting in --vars FILE")


def test_a_mirror_that_never_answers_times_out(tmp_path: Path) -> None:
    # A listening socket nobody accepts on: the connection opens, the response never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/{GDRCOPY}"
        artifact = Artifact(url=f"https://{GDRCOPY}", sha256="0" * 64, source="test")
        with pytest.raises(InputError, match=r"cannot download .* \(timed out\)"):
            fetch_and_verify("gdrcopy", artifact, url, None, tmp_path, retries=0, timeout=0.2)
    assert list(tmp_path.iterdir()) == []


def test_s3_urls_need_a_mirror(tmp_path: Path) -> None:
    artifact = Artifact(url="s3://bucket/x.tar.gz", sha256="unknown", source="test")
    with pytest.raises(InputError, match="only http:// and https://"):
        fetch_and_verify("x", artifact, artifact.url, None, tmp_path)


# ------------------------------------------------------------------ reuse


def test_a_verified_file_is_reused_without_a_request(served: Served, tmp_path: Path) -> None:
    mirror = served.mirror
    first = fetch_and_verify("gdrcopy", _by_sha256(mirror), mirror.url_of(GDRCOPY), None, tmp_path)
    signed = _fetch_efa(served, tmp_path, _by_signature(mirror))
    before = served.server.requests
    said: list[str] = []
    again = fetch_and_verify(
        "gdrcopy", _by_sha256(mirror), mirror.url_of(GDRCOPY), None, tmp_path, progress=said.append
    )
    assert again == first
    assert _fetch_efa(served, tmp_path, _by_signature(mirror)) == signed
    assert served.server.requests == before
    assert said == []


def test_a_corrupt_cached_file_is_fetched_again(served: Served, tmp_path: Path) -> None:
    mirror = served.mirror
    (tmp_path / "v2.5.1.tar.gz").write_bytes(b"truncated")
    got = fetch_and_verify("gdrcopy", _by_sha256(mirror), mirror.url_of(GDRCOPY), None, tmp_path)
    assert got.read_bytes() == mirror.tarballs[GDRCOPY].file.read_bytes()
    assert served.server.requests == [f"/{GDRCOPY}"]


# ------------------------------------------------------------------ mirror check


def test_check_mirror_up_down(served: Served) -> None:
    url = served.mirror.url_of("")
    check_mirror(url)
    with served.server.outage(404):
        check_mirror(url)  # any answer counts as up
    served.server.stop()
    with pytest.raises(InputError, match=r"does not answer \(Connection refused\)"):
        check_mirror(url)


# ------------------------------------------------------------------ which artifacts


@pytest.fixture
def p5(shipped: Catalog) -> Target:
    return target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge")


def _with_layers(target: Target, layers: Sequence[str]) -> Target:
    image = target.image.model_copy(update={"layers": list(layers)})
    return dataclasses.replace(target, image=image)


def test_artifacts_for_follows_the_enabled_layers(p5: Target) -> None:
    assert set(artifacts_for(p5)) == {"efa_installer", "gdrcopy", "nccl_tests"}
    no_efa = _with_layers(p5, [layer for layer in p5.image.layers if layer != "efa"])
    assert set(artifacts_for(no_efa)) == {"gdrcopy", "nccl_tests"}
    assert artifacts_for(_with_layers(p5, ["base", "nvidia_driver"])) == {}


def test_artifacts_for_takes_the_enroot_packages_of_the_images_architecture(p5: Target) -> None:
    enroot = with_enroot(p5)
    assert set(artifacts_for(enroot)) == {
        "efa_installer",
        "gdrcopy",
        "nccl_tests",
        "enroot_amd64",
        "enroot_caps_amd64",
        "pyxis",
    }
    assert enroot.stack.enroot is not None
    section = enroot.stack.enroot.model_copy(update={"pyxis": None})
    no_pyxis = dataclasses.replace(
        enroot, stack=enroot.stack.model_copy(update={"enroot": section})
    )
    assert "pyxis" not in artifacts_for(no_pyxis)


def test_artifacts_for_takes_aws_ofi_nccl_only_when_built_from_source(p5: Target) -> None:
    url = "https://github.com/aws/aws-ofi-nccl/archive/v1.22.0.tar.gz"
    plugin = Artifact(url=url, sha256="unknown", source="test")
    stack = p5.stack.model_copy(
        update={
            "aws_ofi_nccl": AwsOfiNccl(version="1.22.0", source="source", artifact="ofi"),
            "artifacts": {**p5.stack.artifacts, "ofi": plugin},
        }
    )
    from_source = dataclasses.replace(p5, stack=stack)
    assert artifacts_for(from_source)["ofi"] == plugin
    no_plugin_layer = [layer for layer in p5.image.layers if layer != "aws_ofi_nccl"]
    assert "ofi" not in artifacts_for(_with_layers(from_source, no_plugin_layer))
    bundled = stack.model_copy(
        update={"aws_ofi_nccl": AwsOfiNccl(version="1.22.0", source="efa-installer")}
    )
    assert "ofi" not in artifacts_for(dataclasses.replace(p5, stack=bundled))


def test_a_stacks_artifacts_resolve_onto_the_mirror_and_verify(
    served: Served, p5: Target, tmp_path: Path
) -> None:
    """End to end: the shipped stack's URLs, rewritten to the mirror, with the stub pins."""
    mirror = served.mirror
    assert mirror.url is not None
    for name, artifact in artifacts_for(p5).items():
        url = resolve_url(artifact.url, p5, mirror.url)
        assert url is not None
        path = url.removeprefix(mirror.url)
        stub = artifact.model_copy(
            update={
                "sha256": mirror.sha256[path] if artifact.sha256 != "unknown" else "unknown",
                "gpg_fingerprint": mirror.fingerprint if artifact.gpg_fingerprint else None,
            }
        )
        signature = artifact.signature_url
        signature_url = resolve_url(signature, p5, mirror.url) if signature else None
        got = fetch_and_verify(
            name, stub, url, signature_url, tmp_path, keyring=mirror.key_path, retries=0
        )
        assert got.read_bytes() == mirror.tarballs[path].file.read_bytes()


def test_the_fetched_signer_key_verifies_the_signed_tarball(served: Served, tmp_path: Path) -> None:
    key = fetch_key(
        "efa_installer",
        served.mirror.url_of("efa-installer.amazonaws.com/aws-efa-installer.key"),
        tmp_path,
    )
    assert key.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    artifact = _by_signature(served.mirror)
    got = fetch_and_verify(
        "efa_installer",
        artifact,
        served.mirror.url_of(EFA),
        served.mirror.url_of(f"{EFA}.sig"),
        tmp_path / "downloads",
        keyring=key,
    )
    assert got.name == "aws-efa-installer-1.51.0.tar.gz"


def test_a_missing_signer_key_names_the_artifact(served: Served, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="artifact 'efa_installer': cannot download"):
        fetch_key("efa_installer", served.mirror.url_of("nowhere/key.asc"), tmp_path, retries=0)
    assert list(tmp_path.iterdir()) == []
