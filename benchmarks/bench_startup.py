"""How long the `nodeforge` command takes to start, and what its imports cost.

Runs `nodeforge --version`, `nodeforge check` (shipped catalog) and `nodeforge build --help` as
fresh processes, several times each, and prints best and median wall time, then the slowest
imports of `check` from `python -X importtime`. Also prints each command's time as a ratio of
a bare `python -c pass` measured in the same run: these machines are shared, and the ratio
says more than a wall time does. The goal for `check` is under 0.5 s wall. Run with
`make bench`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "nodeforge --version": ["-m", "nodeforge.cli", "--version"],
    "nodeforge check": ["-m", "nodeforge.cli", "check", "--catalog", str(REPO / "images")],
    "nodeforge build --help": ["-m", "nodeforge.cli", "build", "--help"],
}
GOAL_CHECK_S = 0.5


def wall_times(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def slowest_imports(argv: list[str], count: int) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the top-level imports, slowest first."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], check=True, capture_output=True, text=True
    )
    found = []
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split(":", 1)[1].split("|")
        # nesting shows as indentation after the one space that follows the bar
        if cumulative.strip().isdigit() and not name.startswith("  "):
            found.append((int(cumulative), name.strip()))
    return sorted(found, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    medians = {}
    print(f"{'command':<26} {'best s':>8} {'median s':>9} {'x python':>9}")
    for label, argv in COMMANDS.items():
        samples = wall_times(argv, args.runs)
        medians[label] = statistics.median(samples)
        ratio = medians[label] / medians["python -c pass"]
        print(f"{label:<26} {min(samples):>8.3f} {medians[label]:>9.3f} {ratio:>9.1f}")

    check = medians["nodeforge check"]
    verdict = "meets" if check < GOAL_CHECK_S else "misses"
    print(f"\n`nodeforge check` median {check:.3f} s {verdict} the {GOAL_CHECK_S} s goal")
    print("\nslowest top-level imports of `nodeforge check` (cumulative):")
    for micros, name in slowest_imports(COMMANDS["nodeforge check"], 8):
        print(f"  {micros / 1e6:7.3f} s  {name}")


if __name__ == "__main__":
    main()
