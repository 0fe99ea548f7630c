"""The template's builder check (nodeforge.packer.builder_check) over real ssh: a builder that
cannot be reached is named as infrastructure, a failing check as the image."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog
from nodeforge.packer import builder_check
from nodeforge.render import render, to_json
from nodeforge.target import target_for
from nodeforge.validate import ValidationRun
from tests.conftest import SHIPPED

IMAGE = "p5-ubuntu24.04"


def _vars(shipped: Catalog, tmp_path: Path) -> Path:
    path = tmp_path / "vars.json"
    path.write_text(to_json(render(shipped, target_for(shipped, IMAGE, "p5.48xlarge"))))
    return path


def test_a_builder_that_drops_ssh_is_infrastructure(
    shipped: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the real suite over real ssh to a port where nothing listens: ssh exits 255 every time
    for name in list(os.environ):
        if name.startswith("NODEFORGE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(builder_check.HOST, "127.0.0.1")
    monkeypatch.setenv(builder_check.PORT, "1")
    monkeypatch.setenv(builder_check.USER, "ubuntu")
    monkeypatch.setenv(builder_check.KEY, "not a key")
    reports = tmp_path / "reports"
    argv = ["--vars-file", str(_vars(shipped, tmp_path)), "--report-dir", str(reports)]
    assert builder_check.main([*argv, "--catalog", str(SHIPPED)]) == 1
    err = capsys.readouterr().err
    assert "SSH to the builder was lost during validation's build stage" in err
    assert "infrastructure, not the image" in err
    assert "Connection refused" in err
    report = json.loads((reports / "validation-build.json").read_text())
    failed = [c for c in report["checks"] if c["outcome"] == "failed"]
    assert failed and all(c["unreachable"] for c in failed)


def _run(ok: bool, checks: list[dict[str, Any]], tmp_path: Path) -> ValidationRun:
    return ValidationRun(
        ok=ok,
        returncode=0 if ok else 1,
        report={"checks": checks},
        junit=tmp_path / "j.xml",
        json_report=tmp_path / "r.json",
        log=tmp_path / "l.log",
    )


def test_a_failed_check_is_the_image(tmp_path: Path) -> None:
    failed = [{"id": "x", "outcome": "failed", "message": "m", "unreachable": None}]
    line = builder_check.verdict_line(_run(False, failed, tmp_path), tmp_path)
    assert line is not None
    assert "the builder failed validation's build stage: no AMI" in line
    assert builder_check.verdict_line(_run(True, [], tmp_path), tmp_path) is None
