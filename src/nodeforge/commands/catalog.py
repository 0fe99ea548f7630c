"""Commands that read the catalog: list, show, check, render, matrix."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from nodeforge.catalog.arch import Arch
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Frameworks
from nodeforge.check import check_targets
from nodeforge.commands.common import checked_target, print_report
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS
from nodeforge.lock import FRAMEWORK_DISTRIBUTIONS
from nodeforge.matrix import HEADERS, support_rows
from nodeforge.outfile import write_output
from nodeforge.render import render, to_json
from nodeforge.table import markdown_table, text_table
from nodeforge.target import targets


def list_entries(catalog: Catalog, kind: str, as_json: bool, out: TextIO) -> int:
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
                s.nccl.version if s.nccl else "-",
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


def show(catalog: Catalog, name: str, as_json: bool, out: TextIO) -> int:
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
                *([["nccl", stack.nccl.version, stack.nccl.source]] if stack.nccl else []),
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
                *([["enroot", stack.enroot.version, "release packages"]] if stack.enroot else []),
                *(
                    [["pyxis", stack.enroot.pyxis.version, stack.enroot.pyxis.artifact]]
                    if stack.enroot and stack.enroot.pyxis
                    else []
                ),
                *_environment_rows(frameworks, image.arch),
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


def check(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    report = check_targets(targets(catalog, args.images), allow_unverified=args.allow_unverified)
    print_report(report, args.json, out)
    return EXIT_OK if report.ok else EXIT_VIOLATIONS


def render_target(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    checked = checked_target(catalog, args, "not rendered")
    if checked is None:
        return EXIT_VIOLATIONS
    target, overrides = checked
    text = to_json(
        render(catalog, target, mode=args.mode, overrides=overrides, overrides_path=args.vars)
    )
    if args.output is None:
        out.write(text)
        return EXIT_OK
    write_output(args.output, text)
    if not args.json:
        print(f"wrote {args.output} ({target.image.name} for {target.profile.name})", file=out)
    return EXIT_OK


def matrix(catalog: Catalog, markdown: bool, as_json: bool, out: TextIO) -> int:
    rows = support_rows(catalog)
    if as_json:
        json.dump([dict(zip(HEADERS, r, strict=True)) for r in rows], out, indent=2)
        out.write("\n")
    elif markdown:
        out.write(markdown_table(HEADERS, rows) + "\n")
    else:
        out.write(text_table(HEADERS, rows) + "\n")
    return EXIT_OK


def _environment_rows(frameworks: Frameworks | None, arch: Arch) -> list[list[str]]:
    """One row per Python environment: its torch and frameworks, and its lock for the arch."""
    if frameworks is None:
        return []
    rows = []
    for name, environment in frameworks.environments.items():
        torch = frameworks.torch_of(name)
        pins = [
            f"torch {torch.version} {torch.variant}"
            if framework == "pytorch"
            else f"{FRAMEWORK_DISTRIBUTIONS[framework][0]} {frameworks.pin(framework)}"
            for framework in environment.frameworks
        ]
        lock = environment.locks.get(arch, f"no lock for {arch}")
        rows.append([f"env {name}", ", ".join(pins), lock])
    return rows
