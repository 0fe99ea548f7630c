"""`nodeforge health-gate --expect FILE`: may this GPU node start its scheduler daemon?"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from nodeforge.catalog.yamlfile import read_bounded
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS
from nodeforge.health_gate import (
    GateResult,
    LocalFiles,
    SubprocessRunner,
    parse_expectations,
    run_gate,
)
from nodeforge.render import to_json
from nodeforge.table import text_table

# one entry per instance type of the catalog: a few kilobytes; more is not an expect file
MAX_EXPECT_BYTES = 1 << 20


def health_gate(args: argparse.Namespace, out: TextIO) -> int:
    expect_path: Path = args.expect
    raw = read_bounded(expect_path, MAX_EXPECT_BYTES, "expect files")
    expectations = parse_expectations(raw.decode("utf-8", "replace"), expect_path)
    result = run_gate(
        expectations,
        runner=SubprocessRunner(),
        files=LocalFiles(args.root),
        instance_type=args.instance_type,
        xid_state=str(args.xid_state) if args.xid_state is not None else None,
        state_files=LocalFiles(Path("/")),
    )
    out.write(to_json(result.as_dict()) if args.json else text(result))
    return EXIT_OK if result.passed else EXIT_VIOLATIONS


def text(result: GateResult) -> str:
    rows = [[check.name, check.status, check.reason] for check in result.checks]
    table = text_table(["check", "result", "reason"], rows)
    verdict = "passed" if result.passed else f"FAILED: {result.first_reason}"
    return f"{table}\nhealth gate: {verdict}\n"
