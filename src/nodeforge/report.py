"""pytest plugin of the validation suite: verdicts that tell "did not apply" from "did not run",
and a JSON report beside the JUnit XML.

Loaded with `-p nodeforge.report [--nodeforge-report FILE]`. A check that skips is *not run*, and
fails the session (exit status 1), unless it skipped through `not_applicable()`: the target
itself (its layers, stack, profile or stage) says the check has nothing to verify here. A skip
for any other reason (a tool missing on the node, a service down) leaves a required check
unverified, which must not read as a pass.

The report lists each check with its outcome, its message and the properties the test recorded
(`record_property("declared", ...)`, `("actual", ...)`, `("threshold", ...)`,
`("measured", ...)`), and every measurement that had no baseline to judge it
(`record_property(UNJUDGED, {...})`, see validation/conftest.py `judge`): recorded, listed by
baseline and profile, never silently passed. Schema: see validation/README.md.

PYTEST_DONT_REWRITE: validation/conftest.py imports this module before it names it as a plugin,
and it asserts nothing that pytest would need to rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _pytest.outcomes import Skipped
from testinfra.backend.base import CommandResult
from testinfra.backend.ssh import SshBackend

from nodeforge.validate import NOT_RUN, OUTCOMES, UNJUDGED, UNREACHABLE, describe_unjudged

SCHEMA_VERSION = 3
_NOT_APPLICABLE = "not_applicable"
_SSH_FAILED = 255
"""ssh's own exit status when it could not connect or lost the connection (ssh(1)); testinfra's
SSH backend raises RuntimeError(CommandResult) for it instead of returning the result."""


class NotApplicable(Skipped):
    """The skip of a check that does not apply to this target (see `not_applicable`)."""

    # pytest prints an exception's module before its name unless it is builtins, as it does for
    # its own Skipped: the log then reads "NotApplicable: <reason>".
    __module__ = "builtins"


def not_applicable(reason: str) -> NoReturn:
    """Skip the running check because the target says it has nothing to verify: a layer the
    image does not enable, a component the stack does not have, a capability the build stage
    lacks by definition. Decide it from the resolved vars and the stage, never from the node:
    what the node lacks is for the check to find."""
    __tracebackhide__ = True
    raise NotApplicable(reason)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("nodeforge").addoption(
        "--nodeforge-report", type=Path, default=None, help="write the JSON report here"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(
        _Collector(config.getoption("--nodeforge-report")), "nodeforge-report-collector"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # Marked where the exception is still at hand: with pytest-xdist the report travels to the
    # controller, and its user properties travel with it.
    if report.skipped and call.excinfo is not None and call.excinfo.errisinstance(NotApplicable):
        report.user_properties.append((_NOT_APPLICABLE, True))
    if report.failed and call.excinfo is not None:
        lost = _lost_host(call.excinfo.value)
        if lost is not None:
            report.user_properties.append((UNREACHABLE, lost))
    return report


def _lost_host(error: BaseException) -> str | None:
    """What ssh said when the check failed because it could not reach the host (not because of
    what it found there); None for any other failure."""
    result = error.args[0] if isinstance(error, RuntimeError) and error.args else None
    if not (
        isinstance(result, CommandResult)
        and isinstance(result.backend, SshBackend)
        and result.exit_status == _SSH_FAILED
    ):
        return None
    said: str = result.stderr.strip()
    return said or f"ssh exited {_SSH_FAILED}"


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if outcome(report) == NOT_RUN:
        return NOT_RUN, "N", "NOT RUN"
    return None


def outcome(report: pytest.TestReport) -> str:
    """passed, failed, skipped (did not apply) or not run (skipped otherwise)."""
    if report.skipped and (_NOT_APPLICABLE, True) not in report.user_properties:
        return NOT_RUN
    return report.outcome


class _Collector:
    """Collects every check's verdict during the session; at its end fails the session when a
    check did not run, and writes the report."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.checks: list[dict[str, Any]] = []
        self.unjudged: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a verdict comes from the call, or from setup/teardown when they skip or fail the check
        if report.when != "call" and report.outcome == "passed":
            return
        host = dict(report.user_properties).get("host")
        self.checks.append(
            {
                "id": report.nodeid,
                "host": host,
                "outcome": outcome(report),
                "phase": report.when,
                "message": _message(report),
                UNREACHABLE: dict(report.user_properties).get(UNREACHABLE),
                "properties": {
                    str(k): v
                    for k, v in report.user_properties
                    if k not in (_NOT_APPLICABLE, UNREACHABLE)
                },
                "seconds": round(report.duration, 3),
            }
        )
        self.unjudged += [
            {**value, "check": report.nodeid, "host": host}
            for name, value in report.user_properties
            if name == UNJUDGED and isinstance(value, dict)
        ]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # a module that skips at import (pytest.importorskip) hides every check in it
        if report.skipped:
            self.checks.append(
                {
                    "id": report.nodeid,
                    "host": None,
                    "outcome": NOT_RUN,
                    "phase": "collect",
                    "message": _message(report),
                    UNREACHABLE: None,
                    "properties": {},
                    "seconds": 0.0,
                }
            )

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        not_run = [c for c in self.checks if c["outcome"] == NOT_RUN]
        if not_run:
            terminalreporter.section("not run: required checks that skipped", red=True)
            for check in not_run:
                terminalreporter.line(f"NOT RUN {check['id']}: {check['message']}")
        if self.unjudged:
            terminalreporter.section("unjudged: measured without a baseline", yellow=True)
            for entry in self.unjudged:
                terminalreporter.line(f"UNJUDGED {describe_unjudged(entry)}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        counts = {o: sum(1 for c in self.checks if c["outcome"] == o) for o in OUTCOMES}
        # a run whose only checks did not run collected nothing that ran, and fails the same way
        if counts[NOT_RUN] and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        # pytest-xdist workers report to the controller, which writes the one report
        if self.path is None or hasattr(session.config, "workerinput"):
            return
        document = {
            "schema": SCHEMA_VERSION,
            **_target(session.config),
            "stage": session.config.getoption("--stage", default=None),
            "hosts": session.config.getoption("hosts", default=None),
            "ok": counts["failed"] == 0 and counts[NOT_RUN] == 0 and session.exitstatus == 0,
            "summary": counts,
            "checks": self.checks,
            UNJUDGED: self.unjudged,
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


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
        for prefix in ("Skipped: ", f"{NotApplicable.__name__}: "):
            text = text.removeprefix(prefix)
        return text
    if report.outcome == "failed":
        text = report.longreprtext or str(report.longrepr)
        errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
        return " ".join(errors[:6]) or (text.strip().splitlines() or [""])[-1]
    return ""
