"""The command line's grammar: every command and option, and nothing the commands import.

Kept apart from the commands so that `nodeforge --help`, `--version` and a usage error import
argparse and no more, and each command imports only what it runs (nodeforge.cli).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, get_args

from nodeforge import __version__
from nodeforge.catalog.arch import Arch
from nodeforge.errors import EXIT_INPUT
from nodeforge.nccl_launch import LAUNCHERS

# The CLI's own ArgumentParser subclass, whatever it is
P = TypeVar("P", bound=argparse.ArgumentParser)

KINDS = ("images", "stacks", "profiles", "os")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors exit 2, as ours do
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"nodeforge: error: {message}\n")


def _add_common_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """--catalog and --json, before the command or after it. A subcommand's parser would set
    its own defaults over the values given before the command, so only the top level has
    defaults; the subcommands' are SUPPRESS (set nothing when absent)."""
    default: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    parser.add_argument(
        "--catalog",
        type=Path,
        metavar="DIR",
        help="catalog directory (default: ./images, else the catalog shipped with nodeforge)",
        **({"default": None} if top_level else default),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text",
        **({"default": False} if top_level else default),
    )


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    _add_common_options(common, top_level=False)

    parser = _Parser(prog="nodeforge", description="GPU node image and software-stack builder")
    parser.add_argument("--version", action="version", version=f"nodeforge {__version__}")
    _add_common_options(parser, top_level=True)
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
    _add_aws_build_options(p)

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

    _add_drift_parser(sub, common)
    _add_apply_parser(sub, common)
    _add_aws_parsers(sub, common)

    _add_lock_parser(sub, common)
    _add_outdated_parser(sub, common)
    _add_diagnose_parser(sub, common)
    _add_xid_watch_parser(sub, common)
    _add_health_gate_parser(sub, common)

    p = sub.add_parser("matrix", parents=[common], help="print the support matrix")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return parser


def _add_aws_build_options(parser: argparse.ArgumentParser) -> None:
    """The `build` options of `--target aws`."""
    group = parser.add_argument_group("--target aws")
    group.add_argument(
        "--region",
        action="extend",
        nargs="+",
        metavar="R",
        help="build in these regions (default: the image's build.region)",
    )
    group.add_argument(
        "--only", action="append", metavar="NAME", help="Packer's -only: build this source only"
    )
    group.add_argument(
        "--dry-run", action="store_true", help="print the Packer commands; run nothing, call no AWS"
    )
    group.add_argument("--packer", metavar="PATH", help="the Packer binary (default: packer)")
    group.add_argument(
        "--kms-key-id", metavar="K", help="KMS key for the root volume (default: the EBS default)"
    )
    group.add_argument(
        "--promote",
        action="store_true",
        help="then validate the AMI on the image's instance types and publish it",
    )
    group.add_argument(
        "--config", type=Path, metavar="FILE", help="pipeline settings for --promote (YAML/JSON)"
    )


def _add_pipeline_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="pipeline settings (YAML/JSON)"
    )


def _add_apply_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    """`apply`: an image's layers onto running nodes, in rolling batches."""
    p = sub.add_parser(
        "apply", parents=[common], help="converge an image's layers onto running nodes"
    )
    p.add_argument("image")
    p.add_argument("--profile", help="target profile (needed when the image has several)")
    p.add_argument(
        "--hosts",
        help="ssh://[USER@]HOST[:PORT], ssm://INSTANCE_ID or podman://NAME (comma-separated)",
    )
    p.add_argument("--inventory", type=Path, metavar="FILE", help="an Ansible inventory")
    p.add_argument("--limit", metavar="PATTERN", help="the inventory's hosts to converge")
    p.add_argument(
        "--ssm-bucket",
        metavar="BUCKET",
        help="the S3 bucket Systems Manager moves files through, for ssm:// hosts",
    )
    p.add_argument("--check", action="store_true", help="show what would change; change nothing")
    p.add_argument("--batch", metavar="N|P%", help="nodes per batch after the canary (10%%)")
    p.add_argument("--canary", metavar="N|P%", help="nodes in the first batch (default 1)")
    p.add_argument(
        "--drain",
        action="store_true",
        help="a busy node whose driver stack changes is drained and waited for, not skipped",
    )
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument("--work-dir", type=Path, metavar="DIR", help="default: build/IMAGE/apply")
    p.add_argument("--allow-unverified", action="store_true")


def _add_drift_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    """`drift`: running nodes against the image their manifest names."""
    p = sub.add_parser(
        "drift",
        parents=[common],
        help="what running nodes no longer have of the image their manifest names",
    )
    p.add_argument(
        "--hosts", help="testinfra hosts: ssh://HOST, podman://NAME, ... (comma-separated)"
    )
    p.add_argument("--inventory", type=Path, metavar="FILE", help="an Ansible inventory")
    p.add_argument("--limit", metavar="PATTERN", help="the inventory's hosts to check")
    p.add_argument("--profile", help="the profile to render (default: the image's first)")
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument("--report-dir", type=Path, metavar="DIR", help="default: build/drift")


def _add_aws_parsers(sub: argparse._SubParsersAction[P], common: P) -> None:
    """`promote`, `reap` and `prune` on the CLI's subparsers, with its common options."""
    p = sub.add_parser(
        "promote", parents=[common], help="validate an AMI on its instance types, then publish it"
    )
    p.add_argument("image")
    p.add_argument("--ami", required=True, metavar="AMI_ID", help="the AMI Packer built")
    _add_pipeline_config(p)
    p.add_argument("--profile", help="validate on this profile only (default: all of the image's)")
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument("--report-dir", type=Path, metavar="DIR", help="default: build/IMAGE/promote")
    p.add_argument("--allow-unverified", action="store_true")

    p = sub.add_parser(
        "reap",
        parents=[common],
        help="end validation instances and placement groups whose nodeforge:ttl has passed",
        description="The second net under promote's cleanup, for runs whose machine died: "
        "terminates the image's validation instances past their nodeforge:ttl (in the config's "
        "region) and deletes its expired placement groups once no instance is in them. Run it "
        "from cron or CI; it keeps everything else.",
    )
    p.add_argument("image")
    _add_pipeline_config(p)
    p.add_argument("--dry-run", action="store_true", help="say what would end, touch nothing")

    p = sub.add_parser("prune", parents=[common], help="deregister an image's old AMIs")
    p.add_argument("image")
    p.add_argument("--keep", type=int, required=True, metavar="N", help="validated AMIs to keep")
    p.add_argument(
        "--unjudged-after",
        type=int,
        default=7,
        metavar="DAYS",
        help="an AMI this old that no promote judged is left from one that did not finish: "
        "it goes too (default: %(default)s)",
    )
    p.add_argument(
        "--deprecated-for",
        type=int,
        default=7,
        metavar="DAYS",
        help="an AMI to go is deprecated first and deleted by a prune once it has been "
        "deprecated this long; 0 deletes at once (default: %(default)s)",
    )
    _add_pipeline_config(p)
    p.add_argument(
        "--dry-run", action="store_true", help="say what would go, and why the rest stays"
    )


def _add_outdated_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    p = sub.add_parser(
        "outdated",
        parents=[common],
        help="what moved upstream since a stack was pinned: PyPI and apt",
        description="Every file the stack's locks pin against the index it was locked from "
        "(gone or yanked: the image no longer builds, exit 1), and every framework pin against "
        "the newest final release there. Every package the stack's apt layers install at an "
        "exact version against its repository, as apt reads it (Release signed by the pinned "
        "key, indexes held to their sha256), for each image that uses the stack: gone or "
        "unverified is exit 1, a newer version is news.",
    )
    p.add_argument("stack")
    p.add_argument(
        "--vars", type=Path, metavar="FILE", help="user overrides: a mirror: is read instead"
    )
    p.add_argument("--fail-on-newer", action="store_true", help="exit 1 on a newer release too")
    p.add_argument(
        "--source",
        choices=["all", "pypi", "apt"],
        default="all",
        help="which pins to check (default: all)",
    )


def _add_diagnose_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    p = sub.add_parser(
        "diagnose",
        parents=[common],
        help="a verdict on a tool output: healthy, fault (with the action), or unreadable",
        description="Reads what nvidia-smi, dcgmi, nccl-tests, an NCCL_DEBUG log, fi_info, the "
        "EFA installer or a kernel log (dmesg, journalctl -k) printed, tells which it is, and "
        "judges it: healthy, a fault with its reason and the recommended action (the Xid "
        "policy's application / reset_gpu / reboot_node / replace_node where the node is at "
        "fault), or unreadable with what each reader expected. Exit 0: all healthy; 1: a fault; "
        "2: unreadable input. Needs no catalog.",
    )
    p.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="tool outputs to read; - or none: standard input",
    )


def _add_xid_watch_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    p = sub.add_parser(
        "xid-watch",
        parents=[common],
        help="follow the kernel log: Xid metrics for node_exporter, an alarm and hooks",
        description="Reads the kernel log line by line (dmesg, journalctl -k, /dev/kmsg), judges "
        "each NVIDIA Xid by the Xid policy, and keeps a node_exporter textfile up to date "
        "(nodeforge_gpu_xid_total, nodeforge_node_health, nodeforge_node_action_required). "
        "The first event asking for reset_gpu or more writes the state file, logs at priority "
        "crit/err and runs the hooks. Needs no catalog.",
    )
    p.add_argument(
        "--source",
        default="-",
        metavar="FILE",
        help="the kernel log: journal (this boot's kernel messages from journalctl, "
        "followed), a file, /dev/kmsg, or - for standard input (default)",
    )
    p.add_argument(
        "--textfile", type=Path, required=True, metavar="PATH", help="the .prom file to keep"
    )
    p.add_argument(
        "--state", type=Path, required=True, metavar="PATH", help="JSON written on the alarm"
    )
    p.add_argument(
        "--hook",
        action="append",
        default=[],
        metavar="CMD",
        help="run on the alarm, without a shell, with NODEFORGE_ACTION, NODEFORGE_REASON, "
        "NODEFORGE_XID, NODEFORGE_GPU set (repeatable)",
    )
    p.add_argument(
        "--once", action="store_true", help="read to the end of the log and exit (no following)"
    )
    p.add_argument(
        "--poll-interval",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="seconds between looks for new lines at the end of a file (default 1)",
    )
    p.add_argument(
        "--hook-timeout",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="seconds a hook may run before it is killed (default 60)",
    )


def _add_health_gate_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    p = sub.add_parser(
        "health-gate",
        parents=[common],
        help="boot-time GPU node checks before the scheduler daemon starts",
        description="Checks the node against what the catalog expects of its instance type: "
        "GPU count and model, loaded driver module against the installed driver, fabric "
        "manager and IMEX, EFA devices, pending row remaps, and the Xid watcher's state file "
        "(reboot_node or replace_node fails). Exit 0: passed; 1: a check failed; 2: bad input. "
        "Needs no catalog.",
    )
    p.add_argument(
        "--expect",
        type=Path,
        required=True,
        metavar="FILE",
        help="JSON of each instance type's gpu_count, gpu_model, driver_version, "
        "efa_interfaces, fabric_manager and imex",
    )
    p.add_argument(
        "--instance-type",
        metavar="TYPE",
        help="default: /sys/devices/virtual/dmi/id/product_name (the instance type on EC2 Nitro)",
    )
    p.add_argument(
        "--xid-state",
        type=Path,
        metavar="FILE",
        help="the xid-watch state file (--state); missing: no Xid event since boot",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=Path(os.environ.get("NODEFORGE_HOST_ROOT", "/")),
        metavar="DIR",
        help="read /proc and /sys under DIR (default: $NODEFORGE_HOST_ROOT or /), for tests",
    )


def _seconds(value: str) -> float:
    """argparse type of a wait: a positive number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 86400:  # also NaN and inf, which time.sleep refuses
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of seconds up to a day")
    return seconds


def lock_time(value: str) -> datetime:
    """argparse type of --as-of: a lock's `# locked:` time."""
    from nodeforge.lock import LOCKED_FORMAT  # noqa: PLC0415 (pydantic, only when given)

    try:
        return datetime.strptime(value, LOCKED_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{value}' is not a UTC time like 2026-12-05T07:27:55Z (a lock's '# locked:' line)"
        ) from None


def _add_lock_parser(sub: argparse._SubParsersAction[P], common: P) -> None:
    p = sub.add_parser(
        "lock",
        parents=[common],
        help="resolve and write the hash-checked locks of a stack's Python environments",
    )
    p.add_argument("stack")
    p.add_argument("--environment", action="append", metavar="NAME", help="default: all")
    p.add_argument("--arch", action="append", choices=get_args(Arch), help="default: the stack's")
    p.add_argument("--python", metavar="X.Y", help="default: the stack's frameworks.python")
    p.add_argument(
        "--torch-variant", metavar="VARIANT", help="cpu, cu126, ...: default the stack's"
    )
    p.add_argument(
        "--platform",
        metavar="TAG",
        help="newest wheel platform tag the target runs (default: manylinux_2_34_<arch>)",
    )
    p.add_argument(
        "--index-url",
        action="append",
        default=[],
        metavar="URL",
        help="first is the index, the rest extra indexes "
        "(default: the variant's PyTorch index, then PyPI)",
    )
    p.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    p.add_argument(
        "--as-of",
        type=lock_time,
        metavar="YYYY-MM-DDTHH:MM:SSZ",
        help="resolve from what the indexes held then (pip --uploaded-prior-to): a lock's "
        "'# locked:' time reproduces it",
    )
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="one lock: write it here")
