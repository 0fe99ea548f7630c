"""plugins/connection/nodeforge_podman.py: the collection's podman connection, with pipelining."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible_collections.containers.podman.plugins.connection import podman

from tests.conftest import REPO


def _plugin() -> ModuleType:
    path = REPO / "plugins" / "connection" / "nodeforge_podman.py"
    spec = importlib.util.spec_from_file_location("nodeforge_podman", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(documentation: str) -> dict[str, Any]:
    options: dict[str, Any] = yaml.safe_load(documentation)["options"]
    return options


def test_it_takes_the_collections_options_by_the_same_names() -> None:
    ours, theirs = _options(_plugin().DOCUMENTATION), _options(podman.DOCUMENTATION)
    assert set(ours) == set(theirs)
    for name, option in theirs.items():
        for source in ("vars", "env", "ini", "default"):
            assert ours[name].get(source) == option.get(source), (name, source)


@pytest.mark.parametrize(
    ("cmd", "in_data", "sent"),
    [
        # a pipelined module arrives on stdin: podman must pass it on
        (["exec"], b"module", ["exec", "--interactive"]),
        (["exec", "--user", "1000"], b"module", ["exec", "--interactive", "--user", "1000"]),
        # no input, or not an exec: as the collection sends it
        (["exec"], None, ["exec"]),
        ("mount", None, "mount"),
        (["cp"], b"", ["cp"]),
    ],
)
def test_exec_with_input_is_interactive(
    monkeypatch: pytest.MonkeyPatch, cmd: Any, in_data: bytes | None, sent: Any
) -> None:
    calls: list[Any] = []

    def collection_podman(_self: Any, cmd: Any, *_rest: Any) -> tuple[int, bytes, bytes]:
        calls.append(cmd)
        return 0, b"", b""

    monkeypatch.setattr(podman.Connection, "_podman", collection_podman)
    connection = object.__new__(_plugin().Connection)
    connection._podman(cmd, ["true"], in_data)
    assert calls == [sent]


def test_pipelining_is_on() -> None:
    connection = _plugin().Connection
    assert connection.has_pipelining is True
    assert podman.Connection.has_pipelining is False  # what this plugin exists to change
