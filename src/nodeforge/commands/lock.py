"""`nodeforge lock STACK`: write the hash-checked locks of the stack's Python environments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO, TypeVar

from nodeforge.catalog.loader import Catalog
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.lock import (
    LockFailedError,
    LockRequest,
    lock_environment,
    render_lock,
    request_for,
)
from nodeforge.outfile import check_output, write_output
from nodeforge.render import to_json
from nodeforge.target import stack_of

# The CLI's own ArgumentParser subclass, whatever it is
P = TypeVar("P", bound=argparse.ArgumentParser)


def lock(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    stack = stack_of(catalog, args.stack)
    stack_file = catalog.file_of("stacks", stack.name)
    environments = args.environment or (
        list(stack.frameworks.environments) if stack.frameworks else []
    )
    arches = args.arch or stack.architectures
    if not environments:
        raise InputError(
            "the stack has no Python environments",
            file=stack_file,
            field="frameworks.environments",
            fix="add frameworks.environments (e.g. train: {frameworks: [pytorch, ...]})",
        )
    if args.output is not None and len(environments) * len(arches) > 1:
        raise InputError(
            "-o writes one lock: name one --environment and one --arch with it",
            fix="drop -o to write every lock to the path the stack gives it",
        )
    if args.platform and len(arches) > 1:
        raise InputError(
            "a --platform tag belongs to one architecture", fix="add --arch with --platform"
        )
    planned: list[tuple[LockRequest, Path]] = []
    for environment in environments:
        for arch in arches:
            request = request_for(
                stack,
                environment,
                arch,
                catalog.compat,
                python=args.python,
                torch_variant=args.torch_variant,
                platform=args.platform,
                index_urls=tuple(args.index_url),
                find_links=tuple(args.find_links),
                as_of=args.as_of,
                stack_file=stack_file,
            )
            if args.output is None and request.overrides():
                raise InputError(
                    f"a lock with overrides ({request.overrides()}) is not the stack's lock",
                    fix="write it elsewhere with -o FILE",
                )
            path = args.output or _stack_path(catalog, stack_file, request)
            check_output(path)
            planned.append((request, path))
    written: list[dict[str, str]] = []
    failed = 0
    for request, path in planned:
        try:
            result = lock_environment(request)
        except LockFailedError as exc:
            # no hashes are invented for what could not be resolved: nothing is written
            print(f"nodeforge: lock failed, {path} not written: {exc}", file=sys.stderr)
            failed += 1
            continue
        write_output(path, render_lock(result))
        written.append(
            {"environment": request.environment, "arch": request.arch, "lock": str(path)}
        )
        if not args.json:
            out.write(f"{path}: {len(result.requirements)} requirements\n")
    if args.json:
        out.write(to_json({"written": written, "failed": failed}))
    return EXIT_VIOLATIONS if failed else EXIT_OK


def _stack_path(catalog: Catalog, stack_file: Path, request: LockRequest) -> Path:
    environment, arch = request.environment, request.arch
    relative = request.frameworks.environments[environment].locks.get(arch)
    if relative is None:
        raise InputError(
            f"environment '{environment}' names no lock for {arch}",
            file=stack_file,
            field=f"frameworks.environments.{environment}.locks.{arch}",
            fix=f"add locks.{arch}: locks/{request.stack}/{environment}-{arch}.txt, "
            "or pass -o FILE",
        )
    return catalog.root / relative
