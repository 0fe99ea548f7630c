"""`nodeforge outdated STACK`: what moved on the package indexes since the stack was locked."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from nodeforge.catalog.loader import Catalog
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.lock import read_lock
from nodeforge.mirror import through_mirror
from nodeforge.outdated import (
    BROKEN,
    Fetch,
    Finding,
    check_lock_upstream,
    http_fetch,
    locked_environments,
)
from nodeforge.render import load_overrides, to_json
from nodeforge.table import text_table
from nodeforge.target import stack_of


def outdated(
    catalog: Catalog, args: argparse.Namespace, out: TextIO, fetch: Fetch = http_fetch
) -> int:
    stack = stack_of(catalog, args.stack)
    mirror = load_overrides(args.vars).mirror if args.vars else None
    locks = locked_environments(stack, catalog.root, catalog.compat)
    if not locks:
        raise InputError(
            "the stack locks no Python environments",
            file=catalog.file_of("stacks", stack.name),
            field="frameworks.environments",
            fix="add environments with locks (`nodeforge lock`), or pick a stack that has them",
        )
    findings: list[Finding] = []
    for number, locked in enumerate(locks, start=1):
        print(
            f"[{number}/{len(locks)}] {locked.environment} {locked.arch}: "
            f"{', '.join(through_mirror(u, mirror) for u in locked.index_urls)}",
            file=sys.stderr,
        )
        lock = read_lock(locked.path)
        findings += check_lock_upstream(
            locked, lock, fetch, rewrite=lambda url: through_mirror(url, mirror)
        )
    broken = [f for f in findings if f.kind in BROKEN]
    failing = broken or (args.fail_on_newer and findings)
    if args.json:
        out.write(to_json({"stack": stack.name, "findings": [f.as_dict() for f in findings]}))
    else:
        _print(stack.name, findings, len(locks), out)
    return EXIT_VIOLATIONS if failing else EXIT_OK


def _print(stack: str, findings: list[Finding], locks: int, out: TextIO) -> None:
    if findings:
        rows = [[f.kind, f.environment, f.arch, f.pinned, f.detail] for f in findings]
        out.write(text_table(["finding", "environment", "arch", "pin", "detail"], rows) + "\n\n")
    broken = sum(f.kind in BROKEN for f in findings)
    newer = sum(f.kind == "newer" for f in findings)
    out.write(
        f"{stack}: {locks} lock(s) checked: {broken} pin(s) no longer resolve, "
        f"{newer} newer release(s)\n"
    )
