"""Run the validation suite (validation/) against hosts and read back its reports.

One entry point for `nodeforge validate` and for the build stage of `nodeforge build`: pytest
with testinfra's --hosts, the resolved vars, the stage, JUnit XML and the JSON report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nodeforge.errors import InputError
from nodeforge.nccl_launch import Launcher
from nodeforge.paths import VALIDATION_SUITE

Stage = Literal["build", "target"]


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
        return {k: int(summary.get(k, 0)) for k in ("passed", "failed", "skipped")}

    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["outcome"] == "failed"]


def run_validation(
    *,
    hosts: str,
    vars_path: Path,
    stage: Stage,
    report_dir: Path,
    parallel: bool = False,
    dcgm_level: int = 1,
    launcher: Launcher = "mpirun",
) -> ValidationRun:
    """pytest over validation/ for `hosts` (testinfra's --hosts: podman://, ssh://, ansible://)."""
    if not VALIDATION_SUITE.is_dir():
        raise InputError("the validation suite is missing", file=VALIDATION_SUITE)
    report_dir.mkdir(parents=True, exist_ok=True)
    junit = report_dir / f"validation-{stage}.xml"
    json_report = report_dir / f"validation-{stage}.json"
    log = report_dir / f"validation-{stage}.log"
    argv = [
        sys.executable,
        "-m",
        "pytest",
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
