"""Run the validation suite (validation/) against hosts and read back its reports.

One entry point for `nodeforge validate` and for the build stage of `nodeforge build`: pytest
with testinfra's --hosts, the resolved vars, the stage, JUnit XML and the JSON report
(written by nodeforge.report, which shares the outcome names below).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nodeforge.errors import InputError
from nodeforge.nccl_launch import Launcher
from nodeforge.paths import VALIDATION_SUITE
from nodeforge.table import text_table

Stage = Literal["build", "target"]
NOT_RUN = "not run"
OUTCOMES = ("passed", "failed", "skipped", NOT_RUN)
"""A check's outcome: `skipped` did not apply to the target; `not run` was required and skipped."""
CAPABILITIES = ("gpu", "nvswitch", "efa", "multinode")
"""The hardware markers of validation/: a check needing one judges the machine."""
UNJUDGED = "unjudged"
UNREACHABLE = "unreachable"
"""A failed check's field: what ssh said when it lost the host (the check judged nothing about
the node), None otherwise."""
_MISSING_CAPABILITY = "target stage: missing capability "


@dataclass(frozen=True)
class ValidationRun:
    ok: bool
    returncode: int
    report: dict[str, Any]
    junit: Path
    json_report: Path
    log: Path

    @property
    def counts(self) -> dict[str, int]:
        summary: dict[str, int] = self.report.get("summary", {})
        return {k: int(summary.get(k, 0)) for k in OUTCOMES}

    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["outcome"] == "failed"]

    def unreachable(self) -> list[dict[str, Any]]:
        """Failed checks that never reached their host: the run is an infrastructure failure,
        not a verdict on the node."""
        return [c for c in self.failures() if c.get(UNREACHABLE)]

    def not_run(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["outcome"] == NOT_RUN]

    def unjudged(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.report.get(UNJUDGED, [])
        return entries

    def summary(self) -> str:
        """What a person reads after a run: every check that did not pass (failed, not run,
        skipped) with why, the capabilities the hosts lack, the measurements no baseline
        judged, the counts and where the reports are."""
        parts = []
        rows = [
            [c["id"].split("::", 1)[-1], c.get("host") or "-", c["outcome"], c["message"][:90]]
            for c in self.report.get("checks", [])
            if c["outcome"] != "passed"
        ]
        if rows:
            parts.append(text_table(["check", "host", "outcome", "why"], rows) + "\n")
        missing = sorted(
            {
                part.split(" (")[0]
                for c in self.failures()
                if c["message"].startswith(_MISSING_CAPABILITY)
                for part in c["message"].removeprefix(_MISSING_CAPABILITY).split("; ")
            }
        )
        if missing:
            parts.append(f"missing capabilities: {', '.join(missing)}")
        if self.not_run():
            parts.append(
                f"not run: {len(self.not_run())} required check(s) skipped, so the run fails "
                "(a check skips without failing only where the target says it does not apply)"
            )
        if self.unjudged():
            parts.append("unjudged (measured, no baseline to judge against: record one):")
            parts += [f"  {describe_unjudged(entry)}" for entry in self.unjudged()]
        counts = self.counts
        parts.append(
            f"{self.report.get('stage')} stage on {self.report.get('hosts')}: "
            f"{counts['passed']} passed, {counts['failed']} failed, {counts[NOT_RUN]} not run, "
            f"{counts['skipped']} skipped (not applicable), {len(self.unjudged())} unjudged"
        )
        parts.append(f"reports: {self.junit}, {self.json_report}")
        return "\n".join(parts) + "\n"


def describe_unjudged(entry: dict[str, Any]) -> str:
    """One line naming the baseline, its profile, what was measured, where and by which check."""
    measured = ", ".join(f"{m:g}" for m in entry.get("measured", []))
    where = f" on {entry['host']}" if entry.get("host") else ""
    check = str(entry.get("check", "")).split("::", 1)[-1]
    return (
        f"{entry.get('profile')} {entry.get('baseline')} (status {entry.get('status')}): "
        f"measured {measured} {entry.get('unit')}{where} by {check}"
    )


def run_validation(
    *,
    hosts: str,
    vars_path: Path,
    stage: Stage,
    report_dir: Path,
    parallel: bool = False,
    dcgm_level: int = 1,
    launcher: Launcher = "mpirun",
    ssh_extra_args: str | None = None,
    pytest_command: Sequence[str] = (sys.executable, "-m", "pytest"),
    select: str | None = None,
) -> ValidationRun:
    """pytest over validation/ for `hosts` (testinfra's --hosts: podman://, ssh://, ansible://);
    `ssh_extra_args` go to every ssh:// connection (testinfra's --ssh-extra-args); `select`:
    a pytest -m expression (the other checks are not collected)."""
    if not VALIDATION_SUITE.is_dir():
        raise InputError("the validation suite is missing", file=VALIDATION_SUITE)
    report_dir.mkdir(parents=True, exist_ok=True)
    junit = report_dir / f"validation-{stage}.xml"
    json_report = report_dir / f"validation-{stage}.json"
    log = report_dir / f"validation-{stage}.log"
    argv = [
        *pytest_command,
        str(VALIDATION_SUITE),
        f"--hosts={hosts}",
        f"--nodeforge-vars={vars_path}",
        f"--stage={stage}",
        f"--dcgm-level={dcgm_level}",
        f"--launcher={launcher}",
        f"--junitxml={junit}",
        f"--nodeforge-report={json_report}",
        "-p",
        "nodeforge.report",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(VALIDATION_SUITE),
        "-q",
        "-rfE",
    ]
    if ssh_extra_args:
        argv.append(f"--ssh-extra-args={ssh_extra_args}")
    if select:
        argv += ["-m", select]
    if parallel:
        argv += ["-n", "auto"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    log.write_text(result.stdout + result.stderr, encoding="utf-8")
    if not json_report.exists():
        # pytest stopped before the session ran: a usage or collection error
        tail = " ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
        raise InputError(f"the validation suite did not run ({tail})", file=log)
    report: dict[str, Any] = json.loads(json_report.read_text(encoding="utf-8"))
    return ValidationRun(
        ok=result.returncode == 0 and bool(report.get("ok")),
        returncode=result.returncode,
        report=report,
        junit=junit,
        json_report=json_report,
        log=log,
    )
