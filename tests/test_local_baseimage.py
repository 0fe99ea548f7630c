"""Base image cache keys and missing-tool errors: the parts that need no podman or root."""

from __future__ import annotations

import shutil

import pytest

from nodeforge.errors import InputError
from nodeforge.local import baseimage, podman
from nodeforge.local.baseimage import INCLUDE, MIRROR, base_image_ref, cache_key, ensure_base_image


def test_cache_key_is_stable_sha256() -> None:
    key = cache_key("bookworm")
    assert key == cache_key("bookworm", INCLUDE, MIRROR)
    assert len(key) == 64
    assert int(key, 16) >= 0


def test_cache_key_ignores_package_order_and_trailing_slash() -> None:
    assert cache_key("trixie", reversed(INCLUDE)) == cache_key("trixie")
    assert cache_key("trixie", mirror=MIRROR + "/") == cache_key("trixie")


def test_cache_key_aliases_name_the_same_suite() -> None:
    assert cache_key("debian12") == cache_key("bookworm")
    assert cache_key("debian13") == cache_key("trixie")


@pytest.mark.parametrize(
    ("suite", "include", "mirror"),
    [
        ("trixie", INCLUDE, MIRROR),
        ("bookworm", (*INCLUDE, "curl"), MIRROR),
        ("bookworm", INCLUDE[:-1], MIRROR),
        ("bookworm", INCLUDE, "http://mirror.example/debian"),
    ],
)
def test_cache_key_changes_with_each_input(
    suite: str, include: tuple[str, ...], mirror: str
) -> None:
    assert cache_key(suite, include, mirror) != cache_key("bookworm")


def test_cache_key_changes_with_schema_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cache_key("bookworm")
    monkeypatch.setattr(baseimage, "SCHEMA_VERSION", baseimage.SCHEMA_VERSION + 1)
    assert cache_key("bookworm") != before


def test_image_ref_carries_suite_and_key_prefix() -> None:
    key = cache_key("bookworm")
    assert base_image_ref("debian12", key) == f"localhost/nodeforge-base:bookworm-{key[:12]}"


def test_unknown_suite_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown Debian suite 'jammy'") as info:
        cache_key("jammy")
    assert info.value.fix is not None
    assert "bookworm" in info.value.fix


def test_missing_podman_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(InputError, match="podman is not installed") as info:
        ensure_base_image("bookworm")
    assert "setup-podman.sh" in str(info.value)


def test_missing_debootstrap_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # podman present but the image absent, so the build path must find debootstrap.
    monkeypatch.setattr(podman, "podman_path", lambda: "/usr/bin/podman")
    monkeypatch.setattr(podman, "image_exists", lambda _ref: False)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(InputError, match="debootstrap is not installed"):
        ensure_base_image("trixie")


def test_cached_image_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podman, "podman_path", lambda: "/usr/bin/podman")
    monkeypatch.setattr(podman, "image_exists", lambda _ref: True)

    def no_build(*_args: object) -> None:
        raise AssertionError("a cached image must not be rebuilt")

    monkeypatch.setattr(baseimage, "_debootstrap", no_build)
    messages: list[str] = []
    ref = ensure_base_image("bookworm", progress=messages.append)
    assert ref == base_image_ref("bookworm", cache_key("bookworm"))
    assert messages == [f"base image {ref} is cached"]
