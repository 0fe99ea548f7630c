"""Commands of the AWS half of the golden AMI pipeline: promote (validate, then publish or fail)
and prune (old AMIs)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO, TypeVar

import boto3

from nodeforge.aws.clients import AwsClients, clients_for
from nodeforge.aws.config import load_config
from nodeforge.aws.pipeline import Validator, ssh_validator
from nodeforge.aws.pipeline import promote as promote_ami
from nodeforge.aws.prune import Policy
from nodeforge.aws.prune import prune as prune_amis
from nodeforge.aws.reap import reap as reap_runs
from nodeforge.aws.ssm_validation import ssm_validator
from nodeforge.catalog.loader import Catalog
from nodeforge.commands.common import checked_targets, stderr_progress
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.render import UserOverrides, to_json
from nodeforge.table import text_table
from nodeforge.target import image_of

_AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
P = TypeVar("P", bound=argparse.ArgumentParser)


def aws_session(region: str) -> boto3.Session:
    """Credentials from the usual chain (environment, profile, instance role)."""
    return boto3.Session(region_name=region)


def validator_for(
    clients: AwsClients,
    catalog: Catalog,
    image: str,
    *,
    report_root: Path,
    overrides: UserOverrides | None,
    overrides_path: Path | None,
    progress: Callable[[str], None],
) -> Validator:
    """The target stage of validation/ on the instances, over the config's transport."""
    config = clients.config
    if config.validation_transport == "ssm":
        return ssm_validator(
            clients,
            catalog,
            image,
            report_root=report_root,
            overrides=overrides,
            overrides_path=overrides_path,
            progress=progress,
        )
    return ssh_validator(
        catalog,
        image,
        report_root=report_root,
        ssh_user=config.ssh_user,
        overrides=overrides,
        overrides_path=overrides_path,
        ssh_ready_timeout_s=config.ssh_ready_timeout_s,
    )


def promote(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    if not _AMI_ID.match(args.ami):
        raise InputError(
            f"'{args.ami}' is not an AMI id", field="--ami", fix="pass an id like ami-0123abcd"
        )
    config = load_config(args.config, image_of(catalog, args.image))
    checked = checked_targets(catalog, args, "not promoted")
    if checked is None:
        return EXIT_VIOLATIONS
    targets, overrides = checked
    clients = clients_for(aws_session(config.region), config)
    progress = stderr_progress()
    validate = validator_for(
        clients,
        catalog,
        args.image,
        report_root=args.report_dir or Path("build") / args.image / "promote",
        overrides=overrides,
        overrides_path=args.vars,
        progress=progress,
    )
    result = promote_ami(
        clients,
        image=args.image,
        ami_id=args.ami,
        profiles=[t.profile for t in targets],
        validate=validate,
        progress=progress,
        config_path=args.config,
        profile_files={
            t.profile.name: catalog.file_of("profiles", t.profile.name) for t in targets
        },
    )
    code = EXIT_OK if result.status == "published" else EXIT_VIOLATIONS
    if args.json:
        out.write(to_json(result.to_json()))
        return code
    rows = [
        [run.profile, str(len(run.instances)), run.outcome, ", ".join(run.hosts) or "-"]
        for run in result.runs
    ]
    lines = [
        f"{result.status:9}{result.ami} ({result.image}) in {result.region}",
        f"run      {result.run_id}",
        "",
        text_table(["profile", "nodes", "outcome", "hosts"], rows),
        *(f"\n{run.profile}: {run.message}" for run in result.runs if run.message),
    ]
    if result.parameters:
        lines += ["", *(f"ssm      {name}" for name in result.parameters)]
        lines += [f"shared   {account}" for account in result.shared_with]
        lines += [f"copy     {region} {ami}" for region, ami in result.copies.items()]
    out.write("\n".join(lines) + "\n")
    return code


def reap(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config, image_of(catalog, args.image))
    found = reap_runs(
        clients_for(aws_session(config.region), config),
        image=args.image,
        now=datetime.now(UTC),
        dry_run=args.dry_run,
        progress=stderr_progress(),
    )
    if args.json:
        out.write(to_json({"image": args.image, "found": [r.to_json() for r in found]}))
        return EXIT_OK
    rows = [[r.kind, r.name, r.action, r.reason] for r in found]
    ended = sum(r.action in ("terminate", "delete") for r in found)
    verb = "would end" if args.dry_run else "ended"
    table = text_table(["kind", "name", "action", "why"], rows) + "\n\n" if rows else ""
    out.write(f"{table}{args.image} in {config.region}: {verb} {ended} of {len(rows)}\n")
    return EXIT_OK


# What prune does to the AMIs it does not keep, by action, in the order the summary names them:
# (after a dry run, after a real one).
_PRUNE_VERBS = {
    "delete": ("would delete", "deleted"),
    "deprecate": ("would deprecate", "deprecated"),
    "unprotect": ("would unprotect", "unprotected"),
}


def prune(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    if args.keep < 1:
        raise InputError(
            f"--keep {args.keep} would leave no validated AMI",
            field="--keep",
            fix="keep at least 1",
        )
    if args.unjudged_after < 1:
        raise InputError(
            f"--unjudged-after {args.unjudged_after} would delete AMIs a running promote is "
            "still judging",
            field="--unjudged-after",
            fix="give at least 1 day, more than a promote runs",
        )
    if args.deprecated_for < 0:
        raise InputError(
            f"--deprecated-for {args.deprecated_for} is in the past",
            field="--deprecated-for",
            fix="give 0 (delete at once) or more days",
        )
    config = load_config(args.config, image_of(catalog, args.image))
    result = prune_amis(
        clients_for(aws_session(config.region), config),
        image=args.image,
        policy=Policy(
            keep=args.keep,
            unjudged_after=timedelta(days=args.unjudged_after),
            deprecated_for=timedelta(days=args.deprecated_for),
        ),
        now=datetime.now(UTC),
        dry_run=args.dry_run,
        progress=stderr_progress(),
    )
    if args.json:
        out.write(to_json(result.to_json()))
        return EXIT_OK
    rows = [
        [d.region, d.ami, d.created[:10], d.status or "-", d.action, "; ".join(d.reasons)]
        for d in result.decisions
    ]
    counts = {a: sum(d.action == a for d in result.decisions) for a in _PRUNE_VERBS}
    done = [
        f"{verbs[not args.dry_run]} {counts[a]}" for a, verbs in _PRUNE_VERBS.items() if counts[a]
    ]
    out.write(
        text_table(["region", "ami", "created", "status", "action", "why"], rows)
        + f"\n\n{args.image}: {', '.join(done) or 'nothing to do'}, "
        f"kept {len(rows) - sum(counts.values())}\n"
    )
    return EXIT_OK
