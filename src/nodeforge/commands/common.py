"""What every command shares: exit codes, the target check, the findings report."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from nodeforge.catalog.loader import Catalog
from nodeforge.check import Report, check_targets
from nodeforge.render import UserOverrides, load_overrides, to_json
from nodeforge.table import text_table
from nodeforge.target import Target, target_for
from nodeforge.target import targets as image_targets


def print_report(report: Report, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(to_json(report.to_json()))
        return
    rows = [[image, profile, report.status_of(image, profile)] for image, profile in report.targets]
    out.write(text_table(["image", "profile", "status"], rows) + "\n")
    for f in report.findings:
        out.write(f"\n{f.severity.upper()} [{f.rule}] {f.image} / {f.profile}\n")
        out.write(f"  {f.message}\n  fix: {f.fix}\n")
    errors, warnings = len(report.errors), len(report.findings) - len(report.errors)
    out.write(
        f"\n{len(report.targets)} targets checked: {errors} error(s), {warnings} warning(s)\n"
    )


def checked_targets(
    catalog: Catalog, args: argparse.Namespace, refused: str
) -> tuple[list[Target], UserOverrides | None] | None:
    """The image's targets (only `--profile` when given) and the user's overrides, or None
    (report printed) when the rules fail."""
    targets = (
        [target_for(catalog, args.image, args.profile)]
        if args.profile
        else image_targets(catalog, [args.image])
    )
    overrides = load_overrides(args.vars) if args.vars else None
    report = check_targets(targets, allow_unverified=args.allow_unverified)
    if report.ok:
        return targets, overrides
    print_report(report, False, sys.stderr)
    print(f"nodeforge: {refused}: fix the errors above first", file=sys.stderr)
    return None


def checked_target(
    catalog: Catalog, args: argparse.Namespace, refused: str
) -> tuple[Target, UserOverrides | None] | None:
    """One target (the image's only profile, or `--profile`), as checked_targets."""
    target = target_for(catalog, args.image, args.profile)
    overrides = load_overrides(args.vars) if args.vars else None
    report = check_targets([target], allow_unverified=args.allow_unverified)
    if report.ok:
        return target, overrides
    print_report(report, False, sys.stderr)
    print(f"nodeforge: {refused}: fix the errors above first", file=sys.stderr)
    return None


def stderr_progress() -> Callable[[str], None]:
    """Progress lines on stderr, with the seconds since the command started."""
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"{time.monotonic() - started:6.0f}s  {line}", file=sys.stderr, flush=True)

    return progress
