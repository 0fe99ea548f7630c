"""How long `nodeforge check` takes on the shipped catalog and on one 20 times larger.

Prints wall time per run (best and median of several) for load + every rule over every target,
and the ratio between the two catalogs, measured in the same run. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from nodeforge.catalog.loader import load_catalog
from nodeforge.check import check_targets
from nodeforge.target import targets

SHIPPED = Path(__file__).resolve().parents[1] / "images"


def _copy_entry(src: Path, dst: Path, rename: dict[str, str], suffix: str) -> None:
    data: dict[str, Any] = yaml.safe_load(src.read_text(encoding="utf-8"))
    data["name"] = f"{data['name']}{suffix}"
    for key in ("os", "stack", "extends"):
        if isinstance(data.get(key), str):
            data[key] = rename.get(data[key], data[key])
    if isinstance(data.get("profiles"), list):
        data["profiles"] = [rename.get(p, p) for p in data["profiles"]]
    dst.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def synthetic_catalog(root: Path, factor: int) -> Path:
    """The shipped catalog plus factor-1 renamed copies of every entry, references rewired."""
    shutil.copytree(SHIPPED, root)
    entries = [
        p
        for folder in (root / "os", root / "stacks", root / "profiles", root)
        for p in sorted(folder.glob("*.yml"))
        if p.name not in ("common.yml", "compat.yml")
    ]
    for copy in range(1, factor):
        suffix = f"-x{copy}"
        rename = {p.stem: f"{p.stem}{suffix}" for p in entries}
        for path in entries:
            _copy_entry(path, path.with_name(f"{path.stem}{suffix}.yml"), rename, suffix)
    return root


def time_check(catalog: Path, runs: int) -> tuple[float, float, int, int]:
    samples = []
    files = n_targets = 0
    for _ in range(runs):
        start = time.perf_counter()
        loaded = load_catalog(catalog)
        report = check_targets(targets(loaded))
        samples.append(time.perf_counter() - start)
        n_targets = len(report.targets)
        if not report.ok:
            raise SystemExit(f"{catalog}: check failed: {report.errors[0]}")
    files = sum(1 for _ in catalog.rglob("*.yml"))
    return min(samples), statistics.median(samples), files, n_targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--factor", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = synthetic_catalog(Path(tmp) / "images", args.factor)
        rows = [
            ("shipped", *time_check(SHIPPED, args.runs)),
            (f"synthetic x{args.factor}", *time_check(big, args.runs)),
        ]
    print(f"{'catalog':<16} {'files':>6} {'targets':>8} {'best s':>8} {'median s':>9}")
    for name, best, median, files, n_targets in rows:
        print(f"{name:<16} {files:>6} {n_targets:>8} {best:>8.3f} {median:>9.3f}")
    ratio = rows[1][2] / rows[0][2]
    print(f"ratio (median, synthetic / shipped): {ratio:.1f}x for {args.factor}x the entries")
    slowest = max(r[2] for r in rows)
    print(f"under one second: {'yes' if slowest < 1.0 else 'NO'} (slowest median {slowest:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
