"""The local build's commit of the converged container: a 14 GB CUDA image takes minutes, so it
says it is still at work; a failed commit is an error naming the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.catalog.loader import Catalog
from nodeforge.local import build, podman
from nodeforge.target import target_for


def _fake_podman(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "podman"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def test_a_long_commit_reports_progress_and_returns_the_id(
    shipped: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _fake_podman(tmp_path, 'echo "$@" > "$(dirname "$0")/args"; sleep 0.5; echo 0123abcd')
    monkeypatch.setattr(podman, "podman_path", lambda: str(script))
    monkeypatch.setattr(build, "COMMIT_HEARTBEAT_S", 0.1)
    said: list[str] = []
    target = target_for(shipped, "local-debian12", None)
    assert build._commit("c1", target, said.append) == "0123abcd"
    assert said and all(line.startswith("still committing (") for line in said)
    args = (tmp_path / "args").read_text(encoding="utf-8")
    assert args.startswith("commit ") and args.rstrip().endswith(" c1")
    assert "LABEL org.nodeforge.image=local-debian12" in args


def test_a_failed_commit_names_the_command_and_its_error(
    shipped: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _fake_podman(tmp_path, 'echo "Error: no space left on device" >&2; exit 125')
    monkeypatch.setattr(podman, "podman_path", lambda: str(script))
    target = target_for(shipped, "local-debian12", None)
    with pytest.raises(podman.PodmanError, match="exited 125: Error: no space left on device"):
        build._commit("c1", target, lambda _line: None)
