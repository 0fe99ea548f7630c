"""Commands that act on machines: build (a local image, or an AMI), validate (hosts) and
drift (running nodes against their image)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from nodeforge.apply import apply as apply_image
from nodeforge.apply import inventory_of, serial, split_hosts
from nodeforge.catalog.loader import Catalog
from nodeforge.commands import ami
from nodeforge.commands.common import checked_target, stderr_progress
from nodeforge.drift import drift as find_drift
from nodeforge.drift import parse_urls
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS
from nodeforge.hosts import check_hosts
from nodeforge.local.build import build_local
from nodeforge.outfile import output_folder, write_output
from nodeforge.paths import REPO_ROOT
from nodeforge.render import load_overrides, render, to_json
from nodeforge.table import text_table
from nodeforge.validate import run_validation


def build(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    ami.check_options(args)
    if args.target == "aws":
        return ami.build(catalog, args, out)
    checked = checked_target(catalog, args, "not built")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    work_dir = args.work_dir or Path("build") / target.image.name
    progress = stderr_progress()
    summary = build_local(
        catalog,
        target,
        repo_root=REPO_ROOT,
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


def validate(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = checked_target(catalog, args, "not validated")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    check_hosts(args.hosts)
    report_dir = output_folder(args.report_dir or Path("build") / target.image.name / "validate")
    vars_path = report_dir / "vars.json"
    document = render(catalog, target, overrides=overrides, overrides_path=args.vars)
    write_output(vars_path, to_json(document))
    run = run_validation(
        hosts=args.hosts,
        vars_path=vars_path,
        stage=args.stage,
        report_dir=report_dir,
        parallel=args.parallel,
        dcgm_level=args.dcgm_level,
        launcher=args.launcher,
    )
    if args.json:
        out.write(to_json({**run.report, "junit": str(run.junit), "json": str(run.json_report)}))
        return EXIT_OK if run.ok else EXIT_VIOLATIONS
    out.write(run.summary())
    return EXIT_OK if run.ok else EXIT_VIOLATIONS


def drift(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    urls = parse_urls(args.hosts, args.inventory, args.limit)
    overrides = load_overrides(args.vars) if args.vars else None
    # where the reports go is checked before any node is reached
    report_root = output_folder(args.report_dir or Path("build") / "drift")
    progress = stderr_progress()
    progress(f"reading the manifests of {', '.join(urls)}")
    result = find_drift(
        catalog,
        urls,
        report_root=report_root,
        profile=args.profile,
        overrides=overrides,
        overrides_path=args.vars,
        progress=progress,
    )
    code = EXIT_OK if result.clean else EXIT_VIOLATIONS
    if args.json:
        out.write(to_json(result.to_json()))
        return code
    parts = []
    for node in result.nodes:
        head = f"{node.node.hostname}  image {node.image or '?'}"
        if node.error is not None:
            parts.append(f"{head}: not checked: {node.error}\n")
        elif not node.drifted:
            parts.append(f"{head}: no drift\n")
        else:
            rows = [[d["check"], d["found"][:100]] for d in node.drifted]
            table = text_table(["check", "found"], rows)
            parts.append(f"{head}: {len(node.drifted)} drifted\n{table}\n")
    drifted = sum(not n.clean for n in result.nodes)
    parts.append(f"{drifted} of {len(result.nodes)} node(s) drifted or not checked")
    parts += [f"report: {path}" for path in result.reports]
    out.write("\n".join(parts) + "\n")
    return code


def apply(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = checked_target(catalog, args, "not applied")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    urls = parse_urls(args.hosts, args.inventory, args.limit, split_hosts)
    inventory = args.inventory.resolve() if args.inventory else inventory_of(urls, args.ssm_bucket)
    batches = serial(args.batch, args.canary)
    work_dir = output_folder(args.work_dir or Path("build") / target.image.name / "apply")
    result = apply_image(
        catalog,
        target,
        inventory=inventory,
        node_urls=urls,
        limit=args.limit,
        work_dir=work_dir,
        repo_root=REPO_ROOT,
        check=args.check,
        batches=batches,
        drain=args.drain,
        progress=stderr_progress(),
        overrides=overrides,
        overrides_path=args.vars,
    )
    code = EXIT_OK if result.ok else EXIT_VIOLATIONS
    if args.json:
        out.write(to_json(result.to_json()))
        return code
    document = result.to_json()
    rows = [
        [host, *(str(node[k]) for k in ("ok", "changed", "failures", "unreachable", "skipped"))]
        for host, node in document["nodes"].items()
    ]
    rows += [[host, "-", "-", "-", "-", "-"] for host in result.untouched]
    verb = "would change" if args.check else "changed"
    lines = [text_table(["node", "ok", verb, "failed", "unreachable", "skipped"], rows), ""]
    for host, node in document["nodes"].items():
        lines += [f"{host} {verb}: {task}" for task in node["changes"]]
        lines += [f"{host} version {change}" for change in node["versions"]]
        lines += [f"{host} {notice}" for notice in node["notices"]]
    if result.untouched:
        lines.append(f"untouched (a batch before theirs failed): {', '.join(result.untouched)}")
    lines += [f"failed: {failure.splitlines()[0]}" for failure in result.playbook.failures]
    lines.append(f"log      {result.log}")
    out.write("\n".join(lines) + "\n")
    return code
