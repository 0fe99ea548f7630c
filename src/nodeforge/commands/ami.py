"""`nodeforge build IMAGE --target aws`: Packer builds the AMI; with `--promote`, the same run
validates it on the image's instance types and publishes it, so one command takes a commit to a
published AMI."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from nodeforge.aws.clients import AwsClients, clients_for
from nodeforge.aws.config import PipelineConfig, load_config
from nodeforge.aws.errors import AwsError
from nodeforge.aws.pipeline import PromoteResult, Validator, promote
from nodeforge.aws.standin import stand_in_from, stand_in_validator
from nodeforge.catalog.loader import Catalog
from nodeforge.commands.aws import aws_session, validator_for
from nodeforge.commands.common import checked_targets, stderr_progress
from nodeforge.errors import EXIT_OK, EXIT_VIOLATIONS, BuildFailedError, InputError
from nodeforge.packer.build import AmiBuildResult, build_amis
from nodeforge.render import UserOverrides, to_json
from nodeforge.table import text_table
from nodeforge.target import Target

_AWS_ONLY = {
    "region": "--region",
    "only": "--only",
    "dry_run": "--dry-run",
    "packer": "--packer",
    "kms_key_id": "--kms-key-id",
    "promote": "--promote",
    "config": "--config",
}
"""argparse dest -> flag, for the options that mean nothing to a local build."""


def check_options(args: argparse.Namespace) -> None:
    """A usage error when an option does not fit the target."""
    if args.target != "aws":
        given = [
            flag for dest, flag in _AWS_ONLY.items() if getattr(args, dest) not in (None, False)
        ]
        if given:
            raise InputError(
                f"{' and '.join(given)} only {'work' if len(given) > 1 else 'works'} with "
                "--target aws",
                field=given[0],
                fix="drop them, or build an AMI with --target aws",
            )
        return
    if args.reconverge:
        raise InputError(
            "--reconverge only works with --target local (it converges a container twice)",
            field="--reconverge",
            fix="drop --reconverge",
        )
    if args.promote and args.config is None:
        raise InputError(
            "--promote needs the pipeline settings",
            field="--config",
            fix="pass --config FILE (see docs/aws-pipeline.md)",
        )


def build(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    # The AMI serves every profile of the image (hardware services start at boot by PCI id),
    # so every profile is checked, and promote validates on each; --profile narrows to one.
    checked = checked_targets(catalog, args, "not built")
    if checked is None:
        return EXIT_VIOLATIONS
    targets, overrides = checked
    work_dir = args.work_dir or Path("build")
    progress = stderr_progress()
    # everything --promote reads is checked before Packer starts a build of most of an hour
    config = load_config(args.config, targets[0].image) if args.config is not None else None
    regions = _build_regions(args, config)
    promotion = (
        _promotion(
            catalog,
            args,
            targets,
            config,
            overrides=overrides,
            work_dir=work_dir,
            progress=progress,
        )
        if args.promote and config is not None
        else None
    )
    [result] = build_amis(
        catalog,
        # Packer renders one vars file per image: the first profile's, unless --profile
        targets[:1],
        work_dir=work_dir,
        # a dry run's progress would repeat the commands printed below
        progress=(lambda _line: None) if args.dry_run else progress,
        regions=regions,
        only=args.only or (),
        dry_run=args.dry_run,
        overrides=overrides,
        overrides_path=args.vars,
        packer=args.packer or "packer",
        kms_key_id=args.kms_key_id,
        network=config.builder_network if config is not None else None,
    )
    if args.dry_run:
        return _dry_run(result, promotion, args, out)
    if promotion is None:
        out.write(to_json({"build": result.to_json()}) if args.json else _summary(result, None))
        return EXIT_OK
    promoted, error = promotion.run(result, progress)
    reports = str(promotion.report_root)
    if args.json:
        outcome = promoted.to_json() if promoted else {"status": "error", "error": error}
        out.write(to_json({"build": result.to_json(), "promote": {**outcome, "reports": reports}}))
    else:
        out.write(_summary(result, promoted) + f"reports  {reports}\n")
    if error:
        print(f"nodeforge: promote failed: {error}", file=sys.stderr)
    return EXIT_OK if promoted is not None and promoted.status == "published" else EXIT_VIOLATIONS


@dataclass(frozen=True)
class _Promotion:
    """What `--promote` does once Packer has built the AMI."""

    catalog: Catalog
    config: PipelineConfig
    config_path: Path
    image: str
    targets: list[Target]
    validator: Callable[[AwsClients], Validator]
    report_root: Path

    def run(
        self, built: AmiBuildResult, progress: Callable[[str], None]
    ) -> tuple[PromoteResult | None, str | None]:
        """The promote result, or None and the AWS error that stopped it."""
        region = self.config.region
        ami = built.amis.get(region)
        if ami is None:
            raise BuildFailedError(
                f"packer build reported no AMI in {region} (log: {built.regions[region].log})"
            )
        try:
            clients = clients_for(aws_session(region), self.config)
            result = promote(
                clients,
                image=self.image,
                ami_id=ami,
                profiles=[t.profile for t in self.targets],
                validate=self.validator(clients),
                progress=progress,
                config_path=self.config_path,
                profile_files={
                    t.profile.name: self.catalog.file_of("profiles", t.profile.name)
                    for t in self.targets
                },
            )
        except AwsError as exc:
            return None, str(exc)
        return result, None


def _build_regions(args: argparse.Namespace, config: PipelineConfig | None) -> list[str] | None:
    """With a pipeline config, the build is in its region only: the builder's subnet and
    groups are that region's, and promote validates there (other regions get copies of the
    validated AMI through copy_regions, never an unvalidated build of their own)."""
    asked: list[str] | None = args.region
    if config is None:
        return asked
    others = [region for region in asked or () if region != config.region]
    if others:
        raise InputError(
            f"with --config the AMI is built in the config's region {config.region} only, "
            f"and --region asks for {', '.join(others)} too",
            field="--region",
            fix=f"drop --region (or name {config.region} only) and list the other regions in "
            f"copy_regions of {args.config}: they get copies of the validated AMI",
        )
    return [config.region]


def _promotion(
    catalog: Catalog,
    args: argparse.Namespace,
    targets: list[Target],
    config: PipelineConfig,
    *,
    overrides: UserOverrides | None,
    work_dir: Path,
    progress: Callable[[str], None],
) -> _Promotion:
    report_root = work_dir / args.image / "promote"
    stand_in = stand_in_from(os.environ)

    def validator(clients: AwsClients) -> Validator:
        if stand_in is not None:
            return stand_in_validator(catalog, stand_in, report_root=report_root, progress=progress)
        return validator_for(
            clients,
            catalog,
            args.image,
            report_root=report_root,
            overrides=overrides,
            overrides_path=args.vars,
            progress=progress,
        )

    return _Promotion(catalog, config, args.config, args.image, targets, validator, report_root)


def _dry_run(
    result: AmiBuildResult, promotion: _Promotion | None, args: argparse.Namespace, out: TextIO
) -> int:
    then = None
    if promotion is not None:
        then = {
            "region": promotion.config.region,
            "profiles": [t.profile.name for t in promotion.targets],
            "config": str(promotion.config_path),
        }
    if args.json:
        document: dict[str, Any] = {"build": result.to_json()}
        if then is not None:
            document["promote"] = then
        out.write(to_json(document))
        return EXIT_OK
    lines = list(result.commands)
    if then is not None:
        lines.append(
            f"# then: validate the {then['region']} AMI on {', '.join(then['profiles'])} and "
            f"publish it (nodeforge promote {args.image} --ami AMI --config {then['config']})"
        )
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


def _summary(result: AmiBuildResult, promoted: PromoteResult | None) -> str:
    rows = [[b.region, b.ami_id or "-", b.log] for b in result.regions.values()]
    lines = [
        f"built    {result.image} (stack {result.stack}, vars of {result.profile})",
        f"time     {result.seconds:.0f} s",
        "",
        text_table(["region", "ami", "log"], rows),
    ]
    if promoted is not None:
        runs = [[r.profile, r.outcome, ", ".join(r.instances) or "-"] for r in promoted.runs]
        lines += [
            "",
            f"{promoted.status:9}{promoted.ami} in {promoted.region} (run {promoted.run_id})",
            "",
            text_table(["profile", "outcome", "instances"], runs),
            *(f"\n{r.profile}: {r.message}" for r in promoted.runs if r.message),
            *(f"ssm      {name}" for name in promoted.parameters),
            *(f"copy     {region} {ami}" for region, ami in promoted.copies.items()),
        ]
    return "\n".join(lines) + "\n"
