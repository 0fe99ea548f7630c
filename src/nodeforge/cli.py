"""The `nodeforge` command line. Human output by default, `--json` for machines.

Exit codes: 0 ok, 1 violations found, 2 bad usage or unreadable input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from nodeforge.commands.arguments import build_parser
from nodeforge.errors import (
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_VIOLATIONS,
    BuildFailedError,
    InputError,
)
from nodeforge.paths import SHIPPED_CATALOG

_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def default_catalog() -> Path:
    """./images when run from a checkout or a user project, else the catalog of the checkout
    nodeforge is installed from."""
    for candidate in (Path.cwd() / "images", SHIPPED_CATALOG):
        if candidate.is_dir():
            return candidate
    raise InputError(
        f"no catalog: no images/ folder in {Path.cwd()}, and this installation of nodeforge "
        "is not a checkout that ships one",
        field="--catalog",
        fix="run nodeforge from a folder that holds images/, or pass --catalog DIR",
    )


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # a CI runner's SIGTERM cleans up like Ctrl-C: containers removed, nothing half-tagged
    signal.signal(signal.SIGTERM, _interrupt)
    if sys.stdout is None:  # started with stdout closed (`>&-`): nowhere to answer
        print("nodeforge: error: standard output is closed", file=sys.stderr)
        return EXIT_INPUT
    try:
        code = _run(args, sys.stdout)
        sys.stdout.flush()  # here, not at exit: a full disk is an error of this command
    except InputError as exc:
        print(f"nodeforge: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BuildFailedError as exc:
        print(f"nodeforge: build failed: {exc}", file=sys.stderr)
        return EXIT_VIOLATIONS
    except KeyboardInterrupt:
        print("nodeforge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()  # the reader left (`| head`): not an error, and nothing more to say
        return EXIT_OK
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        _drop_stdout()
        print(f"nodeforge: error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return EXIT_INPUT
    return code


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit has nowhere to fail (it would
    print "Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    # Each command's module is imported when that command runs: `check` and `--version` do not
    # pay for boto3, python-hcl2 and the Packer wrapper (benchmarks/bench_startup.py).
    if args.command == "diagnose":  # reads tool output, not the catalog: runs on any node
        from nodeforge.commands.diagnose import diagnose_files

        return diagnose_files(args, out)
    if args.command == "xid-watch":  # runs on the GPU node itself, which has no catalog
        from nodeforge.commands.xid_watch import xid_watch

        return xid_watch(args, out)
    if args.command == "health-gate":  # runs at boot on the GPU node, which has no catalog
        from nodeforge.commands.health_gate import health_gate

        return health_gate(args, out)
    from nodeforge.catalog.loader import load_catalog

    catalog = load_catalog(args.catalog or default_catalog())
    command = args.command
    if command in ("list", "show", "check", "render", "matrix"):
        from nodeforge.commands import catalog as catalog_commands

        if command == "list":
            return catalog_commands.list_entries(catalog, args.kind, args.json, out)
        if command == "show":
            return catalog_commands.show(catalog, args.image, args.json, out)
        if command == "check":
            return catalog_commands.check(catalog, args, out)
        if command == "render":
            return catalog_commands.render_target(catalog, args, out)
        return catalog_commands.matrix(catalog, args.markdown, args.json, out)
    if command in ("build", "validate", "drift", "apply"):
        from nodeforge.commands import machines

        run_command = {
            "build": machines.build,
            "validate": machines.validate,
            "drift": machines.drift,
            "apply": machines.apply,
        }[command]
        return run_command(catalog, args, out)
    if command in ("promote", "reap", "prune"):
        from nodeforge.aws.errors import AwsError
        from nodeforge.commands import aws as aws_commands

        run = {
            "promote": aws_commands.promote,
            "reap": aws_commands.reap,
            "prune": aws_commands.prune,
        }[command]
        try:
            return run(catalog, args, out)
        except AwsError as exc:
            # AWS refused or failed a call: what it said and what to do, not a traceback
            print(f"nodeforge: {command} failed: {exc}", file=sys.stderr)
            return EXIT_VIOLATIONS
    if command == "outdated":
        from nodeforge.commands import outdated as outdated_commands

        return outdated_commands.outdated(catalog, args, out)
    from nodeforge.commands import lock as lock_commands

    return lock_commands.lock(catalog, args, out)


if __name__ == "__main__":
    sys.exit(main())
