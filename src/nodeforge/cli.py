"""The `nodeforge` command line. Human output by default, `--json` for machines.

Exit codes: 0 ok, 1 violations found, 2 bad usage or unreadable input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from nodeforge import __version__
from nodeforge.catalog.loader import load_catalog
from nodeforge.commands import ami as ami_commands
from nodeforge.commands import aws as aws_commands
from nodeforge.commands import catalog as catalog_commands
from nodeforge.commands import lock as lock_commands
from nodeforge.commands import machines
from nodeforge.commands.common import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_VIOLATIONS
from nodeforge.errors import InputError
from nodeforge.local.build import BuildFailedError
from nodeforge.nccl_launch import LAUNCHERS
from nodeforge.paths import SHIPPED_CATALOG

KINDS = ("images", "stacks", "profiles", "os")


def default_catalog() -> Path:
    """./images when run from a checkout or a user project, else the catalog beside the package."""
    local = Path.cwd() / "images"
    if local.is_dir():
        return local
    return SHIPPED_CATALOG


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors exit 2, as ours do
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"nodeforge: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--catalog",
        type=Path,
        default=None,
        metavar="DIR",
        help="catalog directory (default: ./images, else the catalog shipped with nodeforge)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")

    parser = _Parser(prog="nodeforge", description="GPU node image and software-stack builder")
    parser.add_argument("--version", action="version", version=f"nodeforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", parents=[common], help="list catalog entries")
    p.add_argument("kind", nargs="?", choices=KINDS, default="images")

    p = sub.add_parser("show", parents=[common], help="show one image and what it resolves to")
    p.add_argument("image")

    p = sub.add_parser("check", parents=[common], help="run the compatibility rules")
    p.add_argument("images", nargs="*", metavar="IMAGE", help="images to check (default: all)")
    p.add_argument(
        "--allow-unverified",
        action="store_true",
        help="report artifacts without sha256 or signature as warnings, not errors",
    )

    p = sub.add_parser("render", parents=[common], help="print the resolved vars of a target")
    p.add_argument("image")
    p.add_argument("--profile", help="target profile (needed when the image has several)")
    p.add_argument("--mode", choices=("image", "node"), default="image")
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE")
    p.add_argument("--allow-unverified", action="store_true")

    p = sub.add_parser("build", parents=[common], help="build an image")
    p.add_argument("image")
    p.add_argument(
        "--target",
        choices=("local", "aws"),
        required=True,
        help="where to build: a local container image, or an AMI with Packer",
    )
    p.add_argument("--profile", help="target profile (needed when the image has several)")
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument(
        "--reconverge",
        action="store_true",
        help="converge a second time and fail unless it changes nothing (idempotence)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="logs and reports (default: build/IMAGE; --target aws writes DIR/IMAGE)",
    )
    p.add_argument("--allow-unverified", action="store_true")
    ami_commands.add_build_options(p)

    p = sub.add_parser("validate", parents=[common], help="run the validation suite on hosts")
    p.add_argument("image")
    p.add_argument("--profile", help="target profile (needed when the image has several)")
    p.add_argument("--stage", choices=("build", "target"), required=True)
    p.add_argument(
        "--hosts",
        required=True,
        help="testinfra hosts: podman://NAME, ssh://HOST, ansible://GROUP (comma-separated)",
    )
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument("--report-dir", type=Path, metavar="DIR", help="default: build/IMAGE/validate")
    p.add_argument("--parallel", action="store_true", help="check several hosts at once")
    p.add_argument(
        "--dcgm-level",
        type=int,
        choices=(1, 2, 3, 4),
        default=1,
        help="dcgmi diag level at target stage where dcgmi is present (default 1)",
    )
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="mpirun",
        help="multi-node NCCL launcher: Open MPI with a hostfile of the hosts (default), "
        "or Slurm's srun from a node of an allocation",
    )
    p.add_argument("--allow-unverified", action="store_true")

    aws_commands.add_parsers(sub, common)

    lock_commands.add_parser(sub, common)

    p = sub.add_parser("matrix", parents=[common], help="print the support matrix")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return parser


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # a CI runner's SIGTERM cleans up like Ctrl-C: containers removed, nothing half-tagged
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(args, sys.stdout)
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
        return EXIT_OK


def _run(args: argparse.Namespace, out: TextIO) -> int:
    catalog = load_catalog(args.catalog or default_catalog())
    command = args.command
    if command == "list":
        return catalog_commands.list_entries(catalog, args.kind, args.json, out)
    if command == "show":
        return catalog_commands.show(catalog, args.image, args.json, out)
    if command == "check":
        return catalog_commands.check(catalog, args, out)
    if command == "render":
        return catalog_commands.render_target(catalog, args, out)
    if command == "build":
        return machines.build(catalog, args, out)
    if command == "validate":
        return machines.validate(catalog, args, out)
    if command == "promote":
        return aws_commands.promote(catalog, args, out)
    if command == "prune":
        return aws_commands.prune(args, out)
    if command == "lock":
        return lock_commands.lock(catalog, args, out)
    return catalog_commands.matrix(catalog, args.markdown, args.json, out)


if __name__ == "__main__":
    sys.exit(main())
