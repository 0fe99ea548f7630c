"""`nodeforge build IMAGE --target aws`: render, write var files, check, then Packer.

Order: the templates and var files pass the static rules before Packer is even looked for;
`packer init` once, `packer validate` per var file, then the builds (one per image and region)
in parallel, each with its own log. A dry run stops before Packer and returns the commands.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodeforge.aws.config import BuilderNetwork
from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from nodeforge.outfile import output_folder, write_output
from nodeforge.packer import builder_check
from nodeforge.packer.machine import Output
from nodeforge.packer.rules import VarFile, check_template, require_clean
from nodeforge.packer.runner import (
    Children,
    Invocation,
    PackerFailedError,
    Progress,
    Runner,
    build_command,
    check_version,
    init_command,
    packer_path,
    validate_command,
)
from nodeforge.packer.sourceami import Resolver, resolve_ssm_parameter
from nodeforge.packer.template import TEMPLATE_DIR, Template, load_template
from nodeforge.packer.varfile import packer_vars, source_lookup, write_var_file
from nodeforge.paths import REPO_ROOT
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import Target

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")


@dataclass(frozen=True)
class RegionBuild:
    region: str
    var_file: str
    log: str
    manifest: str
    ami_id: str | None = None


@dataclass(frozen=True)
class AmiBuildResult:
    image: str
    profile: str
    stack: str
    dry_run: bool
    commands: list[str]
    """Shell-quoted, in the order they run (init and validate are shared across images)."""
    regions: dict[str, RegionBuild] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def amis(self) -> dict[str, str]:
        return {r: b.ami_id for r, b in self.regions.items() if b.ami_id is not None}

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "amis": self.amis}


@dataclass(frozen=True)
class _Job:
    target: Target
    region: str
    validate: Invocation
    build: Invocation
    var_file: Path
    manifest: Path


def _check_regions(regions: Sequence[str]) -> None:
    for region in regions:
        if not _REGION.match(region):
            raise InputError(
                f"'{region}' is not an AWS region name",
                field="--region",
                fix="use a name such as us-east-1",
            )


def _check_only(template: Template, only: Sequence[str]) -> None:
    known = template.only_names()
    for name in only:
        if name not in known:
            raise InputError(
                f"'{name}' is not a build of the Packer templates in {template.directory}",
                field="--only",
                fix=f"use one of: {', '.join(known)}",
            )


def _prepare(
    catalog: Catalog,
    target: Target,
    *,
    template: Template,
    work_dir: Path,
    regions: Sequence[str],
    packer: str,
    only: Sequence[str],
    dry_run: bool,
    overrides: UserOverrides | None,
    overrides_path: Path | None,
    kms_key_id: str | None,
    network: BuilderNetwork | None,
    resolve_ami: Resolver,
    now: datetime,
) -> list[_Job]:
    """Render the vars, write one checked var file per region; the jobs that will run."""
    image_dir = output_folder(work_dir / target.image.name)
    document = render(
        catalog, target, mode="image", overrides=overrides, overrides_path=overrides_path
    )
    vars_path = image_dir / "vars.json"
    write_output(vars_path, to_json(document))
    os_file = catalog.file_of("os", target.os.name)
    lookup = source_lookup(target, os_file)
    jobs = []
    for region in regions:
        source_ami = None
        if lookup.ssm_parameter is not None and not dry_run:
            source_ami = resolve_ami(lookup.ssm_parameter, region)
        manifest = image_dir / f"manifest-{region}.json"
        values = packer_vars(
            target,
            catalog_file=os_file,
            region=region,
            vars_path=vars_path,
            manifest_path=manifest,
            builder_check=builder_check.command(
                vars_path, image_dir / f"validation-builder-{region}", catalog.root
            ),
            now=now,
            source_ami=source_ami,
            kms_key_id=kms_key_id,
            network=network,
        )
        var_file = write_var_file(image_dir / f"{region}.pkrvars.json", values)
        require_clean(check_template(template, VarFile(var_file, values.to_json())))
        label = f"{target.image.name} {region}"
        jobs.append(
            _Job(
                target=target,
                region=region,
                validate=validate_command(
                    packer,
                    template.directory,
                    var_file,
                    label,
                    log=image_dir / f"packer-validate-{region}.log",
                ),
                build=build_command(
                    packer,
                    template.directory,
                    var_file,
                    label,
                    only=only,
                    log=image_dir / f"packer-build-{region}.log",
                ),
                var_file=var_file,
                manifest=manifest,
            )
        )
    return jobs


def _run_builds(
    runner: Runner, jobs: list[_Job], max_workers: int
) -> dict[tuple[str, str], Output | PackerFailedError]:
    """Every build to its end (one failure does not stop the others); Ctrl-C stops them all."""
    outcomes: dict[tuple[str, str], Output | PackerFailedError] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(jobs)))) as pool:
        futures: dict[Future[Output], _Job] = {
            pool.submit(runner.run, job.build): job for job in jobs
        }
        try:
            pending = set(futures)
            while pending:
                # a timeout keeps the main thread waking up, so Ctrl-C is seen at once
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
                for future in done:
                    job = futures[future]
                    key = (job.target.image.name, job.region)
                    error = future.exception()
                    if isinstance(error, PackerFailedError):
                        outcomes[key] = error
                    elif error is not None:
                        raise error
                    else:
                        outcomes[key] = future.result()
        except BaseException:
            runner.children.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return outcomes


def build_amis(
    catalog: Catalog,
    targets: Sequence[Target],
    *,
    work_dir: Path,
    progress: Progress,
    regions: Sequence[str] | None = None,
    only: Sequence[str] = (),
    dry_run: bool = False,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
    packer: str = "packer",
    template_dir: Path = TEMPLATE_DIR,
    kms_key_id: str | None = None,
    network: BuilderNetwork | None = None,
    max_workers: int = 4,
    resolve_ami: Resolver = resolve_ssm_parameter,
    grace_s: float = 120.0,
    now: datetime | None = None,
) -> list[AmiBuildResult]:
    """Build one AMI per target and region (default: each image's build.region), the builder
    placed by `network` (subnets and groups are regional: the caller passes it for one region).

    Raises InputError for bad input or an unusable Packer, PackerFailedError when a step
    fails (after every parallel build has finished), KeyboardInterrupt after stopping Packer.
    """
    started = time.monotonic()
    now = now or datetime.now(UTC)
    if regions is not None:
        _check_regions(regions)
    template = load_template(template_dir)
    require_clean(check_template(template))
    _check_only(template, only)
    jobs = [
        job
        for target in targets
        for job in _prepare(
            catalog,
            target,
            template=template,
            work_dir=work_dir,
            regions=list(regions) if regions else [target.image.build.region],
            packer=packer,
            only=only,
            dry_run=dry_run,
            overrides=overrides,
            overrides_path=overrides_path,
            kms_key_id=kms_key_id,
            network=network,
            resolve_ami=resolve_ami,
            now=now,
        )
    ]
    init = init_command(packer, template.directory, log=work_dir / "packer-init.log")
    order = [init, *(j.validate for j in jobs), *(j.build for j in jobs)]
    outcomes: dict[tuple[str, str], Output | PackerFailedError] = {}
    if dry_run:
        for invocation in order:
            progress(invocation.shell())
    else:
        binary = packer_path(packer)
        version = check_version(binary)
        progress(f"Packer {version} at {binary}")
        runner = Runner(REPO_ROOT, progress, Children(grace_s))
        try:
            runner.run(init)
            for job in jobs:
                runner.run(job.validate)
        except KeyboardInterrupt:
            runner.children.stop()
            raise
        outcomes = _run_builds(runner, jobs, max_workers)
    results = _results(
        targets=targets,
        jobs=jobs,
        order=order,
        outcomes=outcomes,
        dry_run=dry_run,
        seconds=time.monotonic() - started,
    )
    failures = [o for o in outcomes.values() if isinstance(o, PackerFailedError)]
    if failures:
        first = failures[0]
        raise PackerFailedError(
            first.step,
            first.label,
            first.returncode,
            first.errors,
            first.log,
            built={f"{r.image} {region}": ami for r in results for region, ami in r.amis.items()},
        )
    return results


def _results(
    *,
    targets: Sequence[Target],
    jobs: list[_Job],
    order: list[Invocation],
    outcomes: dict[tuple[str, str], Output | PackerFailedError],
    dry_run: bool,
    seconds: float,
) -> list[AmiBuildResult]:
    results = []
    for target in targets:
        mine = [j for j in jobs if j.target is target]
        regions = {}
        for job in mine:
            outcome = outcomes.get((target.image.name, job.region))
            ami = outcome.amis.get(job.region) if isinstance(outcome, Output) else None
            regions[job.region] = RegionBuild(
                region=job.region,
                var_file=str(job.var_file),
                log=str(job.build.log),
                manifest=str(job.manifest),
                ami_id=ami,
            )
        own = {j.validate for j in mine} | {j.build for j in mine}
        commands = [i.shell() for i in order if i.step == "init" or i in own]
        results.append(
            AmiBuildResult(
                image=target.image.name,
                profile=target.profile.name,
                stack=target.stack.name,
                dry_run=dry_run,
                commands=commands,
                regions=regions,
                seconds=round(seconds, 1),
            )
        )
    return results
