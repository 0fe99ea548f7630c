"""Cold local build time and no-op re-converge time of the embedded default (local-debian13).

Runs `nodeforge build local-debian13 --target local --reconverge --json` once and prints the
cold build, the converge inside it, and the second converge (which must change nothing),
with their ratio, all from the same run. Needs podman (tools/setup-podman.sh). `make bench`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeforge.cli",
                "build",
                "local-debian13",
                "--target",
                "local",
                "--reconverge",
                "--json",
                "--work-dir",
                work,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
        return result.returncode
    summary = json.loads(result.stdout)
    again = summary["reconverge"]
    cold = summary["seconds"] - again["seconds"]
    print(f"{'measure':<34} {'seconds':>8}")
    print(f"{'cold build (render to tagged image)':<34} {cold:>8.1f}")
    print(f"{'no-op re-converge':<34} {again['seconds']:>8.1f}")
    print(f"{'whole command, wall clock':<34} {wall:>8.1f}")
    print(f"tasks: {summary['tasks']} run, {summary['changed']} changed in the cold converge")
    print(f"re-converge changed {int(again['changed'])} tasks (must be 0)")
    print(f"ratio re-converge / cold build: {again['seconds'] / cold:.2f}")
    return 0 if again["changed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
