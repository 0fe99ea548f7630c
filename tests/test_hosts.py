"""`--hosts` is checked before any check runs: a typo is an error, never an empty pass."""

from __future__ import annotations

import importlib

import pytest

from nodeforge.errors import InputError
from nodeforge.hosts import BACKENDS, check_hosts


def test_the_backends_are_testinfras() -> None:
    # testinfra ships no type information: read its table as plain data
    assert set(importlib.import_module("testinfra.backend").BACKENDS) == BACKENDS


@pytest.mark.parametrize(
    "spec",
    [
        "podman://node-1",
        "ssh://ubuntu@10.0.0.5:22",
        "ansible://gpu_nodes",
        "local://",
        "ansible://",
    ],
)
def test_accepted(spec: str) -> None:
    assert check_hosts(spec) == [spec]


def test_several_hosts() -> None:
    assert check_hosts("podman://a, podman://b") == ["podman://a", "podman://b"]


@pytest.mark.parametrize(
    "spec", ["bogus://x", "node-1", "podman://", "ssh://", "podman://a,,podman://b", ""]
)
def test_refused_with_the_field_and_the_fix(spec: str) -> None:
    with pytest.raises(InputError) as caught:
        check_hosts(spec)
    assert caught.value.field == "--hosts"
    assert caught.value.fix is not None and "podman://CONTAINER" in caught.value.fix
