"""pytest plugin of the validation suite: a JSON report beside the JUnit XML.

Loaded with `-p nodeforge.report --nodeforge-report FILE`. Each check lands with its outcome,
its message and the properties the test recorded (`record_property("declared", ...)`,
`("actual", ...)`, `("threshold", ...)`, `("measured", ...)`), so people and tools can read
declared against actual versions and measured against threshold values. Schema: see
validation/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SCHEMA_VERSION = 1


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("nodeforge").addoption(
        "--nodeforge-report", type=Path, default=None, help="write the JSON report here"
    )


def pytest_configure(config: pytest.Config) -> None:
    path: Path | None = config.getoption("--nodeforge-report")
    if path is not None:
        config.pluginmanager.register(_Collector(path), "nodeforge-report-collector")


class _Collector:
    """Collects every check's verdict during the session; writes the report at its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checks: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a verdict comes from the call, or from setup/teardown when they skip or fail the check
        if report.when != "call" and report.outcome == "passed":
            return
        self.checks.append(
            {
                "id": report.nodeid,
                "host": dict(report.user_properties).get("host"),
                "outcome": report.outcome,
                "phase": report.when,
                "message": _message(report),
                "properties": {str(k): v for k, v in report.user_properties},
                "seconds": round(report.duration, 3),
            }
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        counts = {
            outcome: sum(1 for c in self.checks if c["outcome"] == outcome)
            for outcome in ("passed", "failed", "skipped")
        }
        document = {
            "schema": SCHEMA_VERSION,
            **_target(session.config),
            "stage": session.config.getoption("--stage", default=None),
            "hosts": session.config.getoption("hosts", default=None),
            "ok": counts["failed"] == 0 and session.exitstatus == 0,
            "summary": counts,
            "checks": self.checks,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(
            json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )


def _target(config: pytest.Config) -> dict[str, Any]:
    """Image, profile and stack of the resolved vars the suite checked against."""
    path: Path | None = config.getoption("--nodeforge-vars", default=None)
    if path is None or not path.is_file():
        return {}
    nodeforge = json.loads(path.read_text(encoding="utf-8")).get("nodeforge", {})
    return {
        "image": nodeforge.get("image"),
        "profile": nodeforge.get("profile", {}).get("name"),
        "stack": nodeforge.get("stack", {}).get("name"),
    }


def _message(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.outcome == "failed":
        text = report.longreprtext or str(report.longrepr)
        errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
        return " ".join(errors[:6]) or (text.strip().splitlines() or [""])[-1]
    return ""
