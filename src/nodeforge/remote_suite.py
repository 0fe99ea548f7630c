"""The validation suite run on the node itself, for validation over AWS Systems Manager.

Run Command gives the node one presigned URL: a bundle (nodeforge.aws.ssm_validation) holding
this package, the suite, pytest and testinfra, the resolved vars and `run.json`. This module runs
the suite against the node it is on (testinfra's `local://`) and PUTs each report to the
presigned URL that run.json names for it, so the node needs no AWS credentials and no S3
permission. It imports the standard library and nodeforge only: the node tools' Python (the
gpu_health layer's environment, with pydantic and PyYAML) runs it.

    cd BUNDLE && python -I -c "$(boot_code(".", ..., "main"))" run.json

(the command nodeforge.aws.ssm_validation sends; boot_code puts the bundle on sys.path).

Exit status: 0 every check passed, 1 a check failed, 2 the suite did not run (its log is
uploaded), 3 a report could not be uploaded.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodeforge.errors import InputError
from nodeforge.validate import Stage, run_validation

RUN_FILE = "run.json"
VARS_FILE = "vars.json"
EXIT_PASSED, EXIT_FAILED, EXIT_NOT_RUN, EXIT_NOT_UPLOADED = 0, 1, 2, 3
UPLOAD_TIMEOUT_S = 120


def boot_code(bundle: Path | str, imports: str, call: str) -> str:
    """Python code that puts the bundle's packages first on sys.path and exits with `call`
    of the command line's arguments. On the path, not in PYTHONPATH: the checks' commands on
    the node inherit the environment, and must see the node's Python setup, not the bundle."""
    paths = [f"{bundle}/src", f"{bundle}/site"]
    return (
        f"import sys; sys.path[:0] = {paths!r}; {imports}; raise SystemExit({call}(sys.argv[1:]))"
    )


def report_names(stage: Stage) -> tuple[str, str, str]:
    """The files run_validation writes for a stage: JSON report, JUnit XML, pytest's log."""
    return (f"validation-{stage}.json", f"validation-{stage}.xml", f"validation-{stage}.log")


def upload(path: Path, url: str) -> None:
    # urllib would label the body a form (application/x-www-form-urlencoded); the presigned
    # URL signs no content type, so any is accepted, and this one is what the file is
    request = urllib.request.Request(
        url,
        data=path.read_bytes(),
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=UPLOAD_TIMEOUT_S) as response:
        response.read()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m nodeforge.remote_suite RUN_JSON", file=sys.stderr)
        return EXIT_NOT_RUN
    run_file = Path(args[0]).resolve()
    bundle = run_file.parent
    run: dict[str, Any] = json.loads(run_file.read_text(encoding="utf-8"))
    stage: Stage = run["stage"]
    report_dir = bundle / "reports"
    status = EXIT_PASSED
    try:
        result = run_validation(
            hosts="local://",
            vars_path=bundle / VARS_FILE,
            stage=stage,
            report_dir=report_dir,
            dcgm_level=int(run.get("dcgm_level", 1)),
            pytest_command=[
                sys.executable,
                "-I",
                "-c",
                boot_code(bundle, "import pytest", "pytest.main"),
            ],
        )
        print(result.summary())
        status = EXIT_PASSED if result.ok else EXIT_FAILED
    except InputError as exc:
        print(f"nodeforge: {exc}", file=sys.stderr)
        status = EXIT_NOT_RUN
    urls: dict[str, str] = run["reports"]
    for name in report_names(stage):
        path = report_dir / name
        if not path.exists():
            continue
        try:
            upload(path, urls[name])
        except OSError as exc:
            print(f"nodeforge: could not upload {name}: {exc}", file=sys.stderr)
            return EXIT_NOT_UPLOADED
    return status


if __name__ == "__main__":
    raise SystemExit(main())
