"""The `nodeforge` command line. Human output by default, `--json` for machines.

Exit codes: 0 ok, 1 violations found, 2 bad usage or unreadable input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from nodeforge import __version__
from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.check import Report, check_targets
from nodeforge.errors import InputError
from nodeforge.local.build import BuildFailedError, build_local
from nodeforge.matrix import HEADERS, support_rows
from nodeforge.render import UserOverrides, load_overrides, render, to_json
from nodeforge.table import markdown_table, text_table
from nodeforge.target import Target, target_for, targets
from nodeforge.validate import run_validation

EXIT_OK, EXIT_VIOLATIONS, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
KINDS = ("images", "stacks", "profiles", "os")


def default_catalog() -> Path:
    """./images when run from a checkout or a user project, else the catalog beside the package."""
    local = Path.cwd() / "images"
    if local.is_dir():
        return local
    return Path(__file__).resolve().parents[2] / "images"


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
    p.add_argument("--target", choices=("local",), required=True, help="where to build")
    p.add_argument("--profile", help="target profile (needed when the image has several)")
    p.add_argument("--vars", type=Path, metavar="FILE", help="user overrides (JSON or YAML)")
    p.add_argument(
        "--reconverge",
        action="store_true",
        help="converge a second time and fail unless it changes nothing (idempotence)",
    )
    p.add_argument(
        "--work-dir", type=Path, metavar="DIR", help="logs and reports (default: build/IMAGE)"
    )
    p.add_argument("--allow-unverified", action="store_true")

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
    p.add_argument("--allow-unverified", action="store_true")

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
        return _list(catalog, args.kind, args.json, out)
    if command == "show":
        return _show(catalog, args.image, args.json, out)
    if command == "check":
        report = check_targets(
            targets(catalog, args.images), allow_unverified=args.allow_unverified
        )
        _print_report(report, args.json, out)
        return EXIT_OK if report.ok else EXIT_VIOLATIONS
    if command == "render":
        return _render(catalog, args, out)
    if command == "build":
        return _build(catalog, args, out)
    if command == "validate":
        return _validate(catalog, args, out)
    return _matrix(catalog, args.markdown, args.json, out)


def _list(catalog: Catalog, kind: str, as_json: bool, out: TextIO) -> int:
    rows: list[list[str]]
    if kind == "images":
        headers = ["image", "os", "arch", "stack", "profiles", "layers"]
        rows = [
            [i.name, i.os, i.arch, i.stack, ", ".join(i.profiles), str(len(i.layers))]
            for i in catalog.images.values()
        ]
    elif kind == "stacks":
        headers = ["stack", "driver", "CUDA", "NCCL", "EFA", "description"]
        rows = [
            [
                s.name,
                s.driver.version,
                ", ".join(s.cuda.toolkits),
                s.nccl.version,
                s.efa.installer_version if s.efa else "-",
                s.description,
            ]
            for s in catalog.stacks.values()
        ]
    elif kind == "profiles":
        headers = ["profile", "arch", "GPUs", "SM", "EFA", "driver floor", "open modules"]
        rows = [
            [
                p.name,
                p.arch,
                f"{p.gpu.count}x {p.gpu.model} {p.gpu.memory_gib} GiB",
                p.gpu.compute_capability,
                str(p.network.efa_interfaces),
                str(p.driver.min_branch),
                p.driver.open_modules,
            ]
            for p in catalog.profiles.values()
        ]
    else:
        headers = ["os", "family", "arches", "default user", "python"]
        rows = [
            [o.name, o.package_family, ", ".join(o.architectures), o.default_user, o.python]
            for o in catalog.os.values()
        ]
    rows.sort()
    if as_json:
        json.dump([dict(zip(headers, r, strict=True)) for r in rows], out, indent=2)
        out.write("\n")
    else:
        out.write(text_table(headers, rows) + "\n")
    return EXIT_OK


def _show(catalog: Catalog, name: str, as_json: bool, out: TextIO) -> int:
    all_targets = targets(catalog, [name])
    image = catalog.images[name]
    stack = catalog.stacks[image.stack]
    if as_json:
        document = {
            "image": image.model_dump(mode="json"),
            "stack": stack.model_dump(mode="json"),
            "os": catalog.os[image.os].model_dump(mode="json"),
            "profiles": {p: catalog.profiles[p].model_dump(mode="json") for p in image.profiles},
        }
        out.write(to_json(document))
        return EXIT_OK
    frameworks = stack.frameworks
    lines = [
        f"image    {image.name}: {image.description}",
        f"file     {catalog.file_of('images', name)}",
        f"os       {image.os} ({image.arch})",
        f"stack    {stack.name}: {stack.description}",
        f"layers   {', '.join(image.layers)}",
        "",
        text_table(
            ["component", "version", "source"],
            [
                ["driver", f"{stack.driver.version} ({stack.driver.flavour})", stack.driver.source],
                ["cuda", ", ".join(stack.cuda.toolkits), stack.cuda.source],
                ["nccl", stack.nccl.version, stack.nccl.source],
                *(
                    [["efa installer", stack.efa.installer_version, stack.efa.artifact]]
                    if stack.efa
                    else []
                ),
                *(
                    [["aws-ofi-nccl", stack.aws_ofi_nccl.version, stack.aws_ofi_nccl.source]]
                    if stack.aws_ofi_nccl
                    else []
                ),
                *(
                    [["gdrcopy", stack.gdrcopy.version, stack.gdrcopy.artifact]]
                    if stack.gdrcopy
                    else []
                ),
                *(
                    [
                        [
                            "pytorch",
                            f"{frameworks.pytorch.version} {frameworks.pytorch.variant}",
                            "pypi",
                        ]
                    ]
                    if frameworks
                    else []
                ),
            ],
        ),
        "",
        text_table(
            ["profile", "GPUs", "driver", "check"],
            [
                [
                    t.profile.name,
                    f"{t.profile.gpu.count}x {t.profile.gpu.model}",
                    t.driver_flavour(),
                    check_targets([t], allow_unverified=True).status_of(name, t.profile.name),
                ]
                for t in all_targets
            ],
        ),
    ]
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


def _print_report(report: Report, as_json: bool, out: TextIO) -> None:
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


def _checked_target(
    catalog: Catalog, args: argparse.Namespace, refused: str
) -> tuple[Target, UserOverrides | None] | None:
    """The target and the user's overrides, or None (report printed) when the rules fail."""
    target = target_for(catalog, args.image, args.profile)
    overrides = load_overrides(args.vars) if args.vars else None
    report = check_targets([target], allow_unverified=args.allow_unverified)
    if report.ok:
        return target, overrides
    _print_report(report, False, sys.stderr)
    print(f"nodeforge: {refused}: fix the errors above first", file=sys.stderr)
    return None


def _render(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = _checked_target(catalog, args, "not rendered")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    text = to_json(
        render(catalog, target, mode=args.mode, overrides=overrides, overrides_path=args.vars)
    )
    if args.output is None:
        out.write(text)
        return EXIT_OK
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.output.with_name(args.output.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.output)
    except OSError as exc:
        raise InputError(f"cannot write the output ({exc.strerror})", file=args.output) from None
    if not args.json:
        print(f"wrote {args.output} ({target.image.name} for {target.profile.name})", file=out)
    return EXIT_OK


def _build(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = _checked_target(catalog, args, "not built")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    repo_root = Path(__file__).resolve().parents[2]
    work_dir = args.work_dir or Path("build") / target.image.name
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"{time.monotonic() - started:6.0f}s  {line}", file=sys.stderr, flush=True)

    summary = build_local(
        catalog,
        target,
        repo_root=repo_root,
        work_dir=work_dir,
        overrides=overrides,
        overrides_path=args.vars,
        progress=progress,
        reconverge=args.reconverge,
    )
    if args.json:
        out.write(to_json(summary.to_json()))
        return EXIT_OK
    v = summary.validation
    lines = [
        f"built    {summary.image_ref}",
        f"target   {summary.image} for {summary.profile}",
        f"time     {summary.seconds:.0f} s",
        f"tasks    {summary.tasks} run, {summary.changed} changed",
        f"checks   {v['passed']} passed, {v['skipped']} skipped, {v['failed']} failed",
        *(
            [
                f"again    {summary.reconverge['seconds']:.0f} s, "
                f"{summary.reconverge['changed']:.0f} changed"
            ]
            if summary.reconverge
            else []
        ),
        f"log      {summary.log}",
        "",
        text_table(["component", "version"], [[k, val] for k, val in summary.bom.items()]),
    ]
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


def _validate(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = _checked_target(catalog, args, "not validated")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    report_dir = args.report_dir or Path("build") / target.image.name / "validate"
    report_dir.mkdir(parents=True, exist_ok=True)
    vars_path = report_dir / "vars.json"
    document = render(catalog, target, overrides=overrides, overrides_path=args.vars)
    vars_path.write_text(to_json(document), encoding="utf-8")
    run = run_validation(
        hosts=args.hosts,
        vars_path=vars_path,
        stage=args.stage,
        report_dir=report_dir,
        parallel=args.parallel,
    )
    if args.json:
        out.write(to_json({**run.report, "junit": str(run.junit), "json": str(run.json_report)}))
        return EXIT_OK if run.ok else EXIT_VIOLATIONS
    checks = run.report.get("checks", [])
    rows = [
        [c["id"].split("::", 1)[-1], c.get("host") or "-", c["outcome"], c["message"][:90]]
        for c in checks
        if c["outcome"] != "passed"
    ]
    counts = run.counts
    if rows:
        out.write(text_table(["check", "host", "outcome", "why"], rows) + "\n\n")
    missing = sorted(
        {
            part.split(" (")[0]
            for c in run.failures()
            if c["message"].startswith("target stage: missing capability ")
            for part in c["message"].removeprefix("target stage: missing capability ").split("; ")
        }
    )
    if missing:
        out.write(f"missing capabilities: {', '.join(missing)}\n")
    out.write(
        f"{args.stage} stage on {args.hosts}: {counts['passed']} passed, {counts['failed']} "
        f"failed, {counts['skipped']} skipped\nreports: {run.junit}, {run.json_report}\n"
    )
    return EXIT_OK if run.ok else EXIT_VIOLATIONS


def _matrix(catalog: Catalog, markdown: bool, as_json: bool, out: TextIO) -> int:
    rows = support_rows(catalog)
    if as_json:
        json.dump([dict(zip(HEADERS, r, strict=True)) for r in rows], out, indent=2)
        out.write("\n")
    elif markdown:
        out.write(markdown_table(HEADERS, rows) + "\n")
    else:
        out.write(text_table(HEADERS, rows) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
