"""The build stage of validation/ against Packer's builder, before the AMI exists.

The template's last provisioner (images/packer/build.pkr.hcl, a shell-local one) runs
`python -m nodeforge.packer.builder_check` after the last Ansible pass: a failing check exits
non-zero, Packer fails the build, and no AMI is registered. Packer hands over the builder's
address, login and temporary key in the environment (its `build.Host`, `build.Port`,
`build.User` and `build.SSHPrivateKey`); the checks reach it over SSH as Packer's Ansible does.
The JUnit and JSON reports land in `--report-dir`, in the build's work folder.

Under the validation stand-in of end-to-end tests (nodeforge.aws.standin: a fake AWS account
only), the stand-in's hosts are checked instead, against the stand-in image's own vars.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from nodeforge.aws.pipeline import run_suite
from nodeforge.aws.standin import stand_in_from
from nodeforge.catalog.loader import load_catalog
from nodeforge.errors import EXIT_INPUT, EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.target import target_for
from nodeforge.validate import UNREACHABLE, ValidationRun, run_validation

HOST = "NODEFORGE_BUILDER_HOST"
PORT = "NODEFORGE_BUILDER_PORT"
USER = "NODEFORGE_BUILDER_USER"
KEY = "NODEFORGE_BUILDER_SSH_KEY"


def command(vars_file: Path, report_dir: Path, catalog_root: Path) -> list[str]:
    """The argv the template's shell-local provisioner runs, with this interpreter."""
    return [
        sys.executable,
        "-m",
        __name__,
        "--vars-file",
        str(vars_file.resolve()),
        "--report-dir",
        str(report_dir.resolve()),
        "--catalog",
        str(catalog_root.resolve()),
    ]


def builder_hosts(environ: Mapping[str, str], folder: Path) -> str:
    """testinfra's host URL for the builder, through an ssh_config written into `folder`."""
    missing = [name for name in (HOST, USER, KEY) if not environ.get(name)]
    if missing:
        raise InputError(
            f"{', '.join(missing)} not set: Packer's shell-local provisioner passes the "
            "builder's build.Host, build.User and build.SSHPrivateKey",
            field=missing[0],
            fix="run this from images/packer/build.pkr.hcl, not by hand",
        )
    key = folder / "builder-key"
    key.touch(mode=0o600)
    key.write_text(environ[KEY].rstrip("\n") + "\n", encoding="utf-8")
    config = folder / "ssh_config"
    # The builder is an instance launched minutes ago for this build: nobody knows its host key
    # yet, and Packer's own connection does not check it either.
    config.write_text(
        "Host builder\n"
        f"  HostName {environ[HOST]}\n"
        f"  Port {environ.get(PORT) or 22}\n"
        f"  User {environ[USER]}\n"
        f"  IdentityFile {key}\n"
        "  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n",
        encoding="utf-8",
    )
    return f"ssh://builder?ssh_config={config}"


def check_builder(
    vars_file: Path, report_dir: Path, catalog_root: Path, environ: Mapping[str, str]
) -> ValidationRun:
    """The build stage's run against the builder (or the stand-in's hosts)."""
    stand_in = stand_in_from(environ)
    if stand_in is not None:
        catalog = load_catalog(catalog_root)
        target = target_for(catalog, stand_in.image, stand_in.profile)
        hosts = stand_in.builder_hosts or stand_in.hosts
        print(f"{hosts} in place of the builder ({stand_in.image} vars)", flush=True)
        return run_suite(catalog, target, hosts=hosts, stage="build", report_dir=report_dir)
    with tempfile.TemporaryDirectory(prefix="nodeforge-builder-") as folder:
        hosts = builder_hosts(environ, Path(folder))
        run = run_validation(hosts=hosts, vars_path=vars_file, stage="build", report_dir=report_dir)
    print(run.summary(), end="", flush=True)
    return run


def verdict_line(run: ValidationRun, report_dir: Path) -> str | None:
    """What the build's log says when the check did not pass: a lost SSH connection judged
    nothing about the image (Packer fails the build either way: no AMI)."""
    if run.ok:
        return None
    if lost := run.unreachable():
        return (
            f"nodeforge: SSH to the builder was lost during validation's build stage "
            f"({len(lost)} check(s) could not run: {lost[0][UNREACHABLE]}): infrastructure, "
            f"not the image; no AMI. Run the build again (reports in {report_dir})"
        )
    return (
        f"nodeforge: the builder failed validation's build stage: no AMI (reports in {report_dir})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeforge.packer.builder_check",
        description="validation/'s build stage against Packer's builder (shell-local)",
    )
    parser.add_argument("--vars-file", type=Path, required=True, help="the build's resolved vars")
    parser.add_argument("--report-dir", type=Path, required=True, help="JUnit and JSON reports")
    parser.add_argument("--catalog", type=Path, required=True, help="the catalog of the build")
    args = parser.parse_args(argv)
    try:
        run = check_builder(args.vars_file, args.report_dir, args.catalog, os.environ)
    except InputError as exc:
        print(f"nodeforge: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    line = verdict_line(run, args.report_dir)
    if line is not None:
        print(line, file=sys.stderr)
    return EXIT_OK if run.ok else EXIT_VIOLATIONS


if __name__ == "__main__":
    raise SystemExit(main())
