"""`nodeforge outdated STACK`: what moved upstream since the stack was pinned and locked."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from nodeforge.apt_upstream import FetchBytes, apt_pins, check_pins, http_get
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Stack
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.lock import read_lock
from nodeforge.mirror import through_mirror
from nodeforge.outdated import BROKEN, Finding, check_lock_upstream, locked_environments
from nodeforge.render import load_overrides, to_json
from nodeforge.rolevars import Context, role_inputs
from nodeforge.table import text_table
from nodeforge.target import stack_of, targets


def outdated(
    catalog: Catalog, args: argparse.Namespace, out: TextIO, fetch: FetchBytes = http_get
) -> int:
    stack = stack_of(catalog, args.stack)
    mirror = load_overrides(args.vars).mirror if args.vars else None
    findings: list[Finding] = []
    checked: dict[str, int] = {}
    if args.source in ("all", "pypi"):
        found, checked["lock(s)"] = _pypi(
            catalog, stack, mirror, fetch, required=args.source == "pypi"
        )
        findings += found
    if args.source in ("all", "apt"):
        found, checked["apt pin(s)"] = _apt(
            catalog, stack, mirror, fetch, required=args.source == "apt"
        )
        findings += found
    if not any(checked.values()):
        raise InputError(
            "the stack pins nothing this command checks: no locked Python environment, no "
            "apt package at an exact version in any image",
            file=catalog.file_of("stacks", stack.name),
            field="frameworks.environments",
            fix="add environments with locks (`nodeforge lock`), or pick a stack that has them",
        )
    broken = [f for f in findings if f.kind in BROKEN]
    failing = broken or (args.fail_on_newer and findings)
    if args.json:
        out.write(to_json({"stack": stack.name, "findings": [f.as_dict() for f in findings]}))
    else:
        counted = " and ".join(f"{count} {what}" for what, count in checked.items())
        _print(stack.name, findings, counted, out)
    return EXIT_VIOLATIONS if failing else EXIT_OK


def _pypi(
    catalog: Catalog, stack: Stack, mirror: str | None, fetch: FetchBytes, *, required: bool
) -> tuple[list[Finding], int]:
    locks = locked_environments(stack, catalog.root, catalog.compat)
    if not locks and required:
        raise InputError(
            "the stack locks no Python environments",
            file=catalog.file_of("stacks", stack.name),
            field="frameworks.environments",
            fix="add environments with locks (`nodeforge lock`), or pick a stack that has them",
        )
    findings: list[Finding] = []
    for number, locked in enumerate(locks, start=1):
        print(
            f"[pypi {number}/{len(locks)}] {locked.environment} {locked.arch}: "
            f"{', '.join(through_mirror(u, mirror) for u in locked.index_urls)}",
            file=sys.stderr,
        )
        findings += check_lock_upstream(
            locked,
            read_lock(locked.path),
            lambda url: None if (body := fetch(url)) is None else body.decode("utf-8", "replace"),
            rewrite=lambda url: through_mirror(url, mirror),
        )
    return findings, len(locks)


def _apt(
    catalog: Catalog, stack: Stack, mirror: str | None, fetch: FetchBytes, *, required: bool
) -> tuple[list[Finding], int]:
    pins = []
    on_dnf = set()
    for target in targets(catalog):
        if target.stack.name != stack.name or target.image.name in on_dnf:
            continue
        if target.os.package_family != "apt":
            on_dnf.add(target.image.name)
            print(
                f"[apt] {target.image.name}: {target.os.name} installs through dnf, not checked",
                file=sys.stderr,
            )
            continue
        context = Context(target, catalog_root=catalog.root, mirror=mirror)
        inputs = {name: value for name, (value, _owner) in role_inputs(context).items()}
        pins += [pin for pin in apt_pins(target, inputs) if pin not in pins]
    if not pins and required:
        raise InputError(
            "no image installs an apt package of this stack at a pinned version",
            file=catalog.file_of("stacks", stack.name),
            fix="name the stack of an image with apt layers (nodeforge list images)",
        )
    repositories = list(dict.fromkeys(pin.repository.url for pin in pins))
    for number, url in enumerate(repositories, start=1):
        print(f"[apt {number}/{len(repositories)}] {url}", file=sys.stderr)
    return check_pins(pins, fetch), len(pins)


def _print(stack: str, findings: list[Finding], checked: str, out: TextIO) -> None:
    if findings:
        rows = [[f.kind, f.source, f.environment, f.arch, f.pinned, f.detail] for f in findings]
        headers = ["finding", "source", "where", "arch", "pin", "detail"]
        out.write(text_table(headers, rows) + "\n\n")
    broken = sum(f.kind in BROKEN for f in findings)
    newer = sum(f.kind == "newer" for f in findings)
    out.write(
        f"{stack}: {checked} checked: {broken} pin(s) gone, unverified or unreachable, "
        f"{newer} newer release(s)\n"
    )
