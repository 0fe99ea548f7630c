"""A no-op `nodeforge apply` on fleets of 1, 8 and 32 nodes, and Ansible's cost per task.

The nodes are systemd containers booted from the local image local-debian13 (with the Slurm
test image's node_exporter on a port of its own, tests/integration/slurm.py: the containers
share the host's network). Each fleet gets one `nodeforge apply local-debian13 --canary 100%`,
all nodes in one batch, and the script prints its wall time, the ratio to one node, the tasks
and the changes. Then the same 40 no-op tasks run over the local connection, over the podman
connection to one node and to the largest fleet: the difference is what the transport costs per
task and node. `make bench`; `--sizes 1,4` for a quicker look. Goal: 32 nodes within 4x the
one-node time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.slurm import slurm_image  # noqa: E402

from nodeforge.local.podman import SystemdContainer, image_exists  # noqa: E402

IMAGE = "local-debian13"
IMAGE_REF = f"localhost/nodeforge/{IMAGE}:{IMAGE}"
NOOP_TASKS = 40
GOAL = 4.0


def _apply(containers: list[str], work: Path) -> tuple[float, dict[str, dict[str, Any]]]:
    argv = [sys.executable, "-m", "nodeforge.cli", "apply", IMAGE, "--canary", "100%", "--json"]
    argv += ["--hosts", ",".join(f"podman://{c}" for c in containers), "--work-dir", str(work)]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"apply on {len(containers)} node(s) failed:\n{result.stderr[-3000:]}")
    return took, json.loads(result.stdout)["nodes"]


def _noop_playbook(folder: Path) -> Path:
    tasks = [
        {"name": f"no-op {i}", "ansible.builtin.command": "true", "changed_when": False}
        for i in range(NOOP_TASKS)
    ]
    path = folder / "noop.yml"
    path.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    return path


def _noop(playbook: Path, inventory: dict[str, dict[str, str]], folder: Path) -> float:
    """Seconds of ansible-playbook running the no-op tasks on the inventory's hosts."""
    path = folder / f"inventory-{len(inventory)}.json"
    path.write_text(json.dumps({"all": {"hosts": inventory}}))
    ansible = Path(sys.executable).parent / "ansible-playbook"
    started = time.monotonic()
    subprocess.run(
        [str(ansible), "-i", str(path), str(playbook)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32", help="fleet sizes (comma-separated)")
    sizes = sorted({int(n) for n in parser.parse_args().sizes.split(",")})
    if not image_exists(IMAGE_REF):
        print(f"building {IMAGE} (once)", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "nodeforge.cli", "build", IMAGE, "--target", "local"],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
    node_image = slurm_image(IMAGE_REF)
    print(f"no-op `nodeforge apply {IMAGE}`, all nodes in one batch (2-core machine)")
    print(f"  {'nodes':>5} {'wall s':>8} {'x first':>10} {'tasks/node':>10} {'changed':>8}")
    one = None
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        fleet: list[str] = []
        for size in sizes:
            print(f"  booting {size - len(fleet)} more node(s)", file=sys.stderr)
            while len(fleet) < size:
                fleet.append(stack.enter_context(SystemdContainer(node_image)).name)
            took, nodes = _apply(fleet, folder / f"apply-{size}")
            one = took if one is None else one  # the smallest fleet is the baseline
            tasks = max(n["ok"] + n["skipped"] for n in nodes.values())
            changed = sum(n["changed"] for n in nodes.values())
            ratio = took / one
            print(f"  {size:>5} {took:>8.1f} {ratio:>10.2f} {tasks:>10} {changed:>8}")
            for task in sorted({t for n in nodes.values() for t in n["changes"]}):
                print(f"        changed: {task}")
        if one is not None and len(sizes) > 1:
            verdict = "met" if took / one <= GOAL else "NOT met"
            print(f"  goal: {sizes[-1]} nodes within {GOAL:.0f}x {sizes[0]}: {verdict}")
        playbook = _noop_playbook(folder)
        controller = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        local = _noop(playbook, {"localhost": controller}, folder)
        podman = {name: {"ansible_connection": "nodeforge_podman"} for name in fleet}
        first = dict(list(podman.items())[:1])
        single = _noop(playbook, first, folder)
        many = _noop(playbook, podman, folder)
    print(f"\n{NOOP_TASKS} no-op tasks (ansible.builtin.command: true)")
    print(f"  local connection, 1 host        {local:>7.1f} s  {local / NOOP_TASKS:.3f} s/task")
    print(f"  podman connection, 1 node       {single:>7.1f} s  {single / NOOP_TASKS:.3f} s/task")
    per_node = many / NOOP_TASKS / len(fleet)
    label = f"podman connection, {len(fleet)} nodes"
    print(f"  {label:<31} {many:>7.1f} s  {per_node:.3f} s/task/node")
    print(f"  transport overhead per task     {(single - local) / NOOP_TASKS:.3f} s")


if __name__ == "__main__":
    main()
