"""Cold local build and no-op re-converge of the light local image (local-debian13) and of the
whole stack (every layer, tests/mirror/whole_stack.py, from the served test mirror).

Runs `nodeforge build IMAGE --target local --reconverge --json` for each and prints, from that
one run: the cold build, the second converge (which must change nothing), tasks run, the
re-converge's seconds per task, and the five slowest roles. Needs podman
(tools/setup-podman.sh). `make bench`; `--only whole-stack` or `--only default` runs one.
Goals on the 2-core machines: whole stack cold <= 10 min, no-op re-converge <= 90 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.mirror.whole_stack import IMAGE, served_whole_stack  # noqa: E402


def _build(image: str, work: Path, extra: Sequence[str] = ()) -> dict[str, Any] | None:
    argv = [sys.executable, "-m", "nodeforge.cli", "build", image, "--target", "local"]
    argv += ["--reconverge", "--json", "--work-dir", str(work), *extra]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"{image}: build failed\n{result.stderr[-3000:]}", file=sys.stderr)
        return None
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def _default(work: Path) -> dict[str, Any] | None:
    return _build("local-debian13", work)


def _whole_stack(work: Path) -> dict[str, Any] | None:
    with served_whole_stack(work, REPO / "images") as (catalog, overrides, _):
        return _build(IMAGE, work / "work", ["--catalog", str(catalog), "--vars", str(overrides)])


def _report(name: str, summary: dict[str, Any], wall: float) -> bool:
    again = summary["reconverge"]
    cold = summary["seconds"] - again["seconds"]
    print(f"\n{name} ({summary['image_ref']})")
    print(f"  {'cold build (render to tagged image)':<38} {cold:>8.1f} s")
    print(f"  {'no-op re-converge':<38} {again['seconds']:>8.1f} s")
    print(f"  {'whole command, wall clock':<38} {wall:>8.1f} s")
    print(f"  tasks: {summary['tasks']} run, {summary['changed']} changed in the cold converge")
    print(f"  re-converge: {again['tasks']} tasks, {int(again['changed'])} changed (must be 0)")
    print(f"  re-converge seconds per task: {again['seconds'] / max(again['tasks'], 1):.2f}")
    print(f"  ratio re-converge / cold build: {again['seconds'] / cold:.2f}")
    slowest = sorted(summary["role_seconds"].items(), key=lambda item: -item[1])[:5]
    print("  slowest roles (cold converge): " + ", ".join(f"{r} {s:.0f} s" for r, s in slowest))
    return bool(again["changed"] == 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["default", "whole-stack"])
    args = parser.parse_args()
    runs = {"default": _default, "whole-stack": _whole_stack}
    ok = True
    for name, run in runs.items():
        if args.only not in (None, name):
            continue
        with tempfile.TemporaryDirectory() as work:
            started = time.monotonic()
            summary = run(Path(work))
            wall = time.monotonic() - started
        ok = summary is not None and _report(name, summary, wall) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
