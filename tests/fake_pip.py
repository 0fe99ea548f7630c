"""pip replaced for lock tests: its `--report` written from a canned install list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def fake_pip(monkeypatch: pytest.MonkeyPatch, report: dict[str, Any] | None) -> None:
    """pip replaced: writes `report` where --report says, or fails as an unreachable index."""

    def run(command: list[str], **_: Any) -> Any:
        class Result:
            returncode = 0 if report is not None else 1
            stderr = "ERROR: No matching distribution found for torch==2.13.0+cu126"

        if report is not None:
            Path(command[command.index("--report") + 1]).write_text(json.dumps(report))
        return Result()

    monkeypatch.setattr("nodeforge.lock.subprocess.run", run)


def report_item(name: str, version: str, sha: str | None) -> dict[str, Any]:
    archive = {"hashes": {"sha256": sha}} if sha else {}
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": f"https://files/{name}.whl", "archive_info": archive},
    }
