"""Fixtures for the Packer wrapper: the test-double binary and its call log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog
from nodeforge.packer.build import AmiBuildResult, build_amis
from nodeforge.target import target_for

DOUBLE = Path(__file__).resolve().parent / "double" / "packer"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOURCE_AMI = "ami-0aaaaaaaaaaaaaaaa"

Calls = Callable[[], list[dict[str, Any]]]
Build = Callable[..., list[AmiBuildResult]]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Calls:
    """The double's records (argv, events), in call order."""
    log = tmp_path / "double.jsonl"
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_LOG", str(log))
    for name in ("FAIL", "VERSION", "DELAY", "HANG", "IGNORE_SIGINT"):
        monkeypatch.delenv(f"NODEFORGE_PACKER_DOUBLE_{name}", raising=False)
    # no builder to validate here: tests/integration/test_ami_pipeline.py runs that step
    monkeypatch.setenv("NODEFORGE_PACKER_DOUBLE_SHELL_LOCAL", "skip")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)

    def read() -> list[dict[str, Any]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return read


@pytest.fixture
def build(shipped: Catalog, tmp_path: Path, calls: Calls) -> Build:
    """build_amis with the double, a fixed SSM answer and a short Ctrl-C grace."""
    del calls  # requested for its clean double environment only

    def run(
        image: str = "p5-ubuntu24.04", profile: str | None = "p5.48xlarge", **kw: Any
    ) -> list[AmiBuildResult]:
        options: dict[str, Any] = {
            "work_dir": tmp_path / "work",
            "progress": lambda _line: None,
            "packer": str(DOUBLE),
            "resolve_ami": lambda _parameter, _region: SOURCE_AMI,
            "grace_s": 5.0,
            **kw,
        }
        return build_amis(shipped, [target_for(shipped, image, profile)], **options)

    return run
