"""A stand-in for the kubectl commands node.yml's Kubernetes hooks run, with kubectl's command
line, output and exit codes, over a cluster state kept in a JSON file:

    {"nodes": {"NAME": {"unschedulable": false}},
     "pods": [{"namespace": "ns", "name": "p", "node": "NAME", "phase": "Running",
               "gpus": 8, "daemonset": false}],
     "calls": [[argv...], ...]}

Every call is appended to "calls". Supported: `get node NAME -o jsonpath=...`, `get pods
--all-namespaces [--no-headers] --field-selector ... -o custom-columns=...`, `cordon`,
`uncordon`, `drain NAME [--ignore-daemonsets] [--delete-emptydir-data] [--timeout=D]`. Anything
else exits 1 as kubectl does for an unknown command or flag.

`tests/integration/test_apply_guard.py` writes a wrapper script that runs this with the state
file's path first: `kubectl_standin.py STATE ARGS...`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

NOT_FOUND = 'Error from server (NotFound): nodes "{}" not found'


def _pod_object(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API shows it, as far as the hooks read it."""
    limits = {"nvidia.com/gpu": str(pod["gpus"])} if pod.get("gpus") else {}
    return {
        "metadata": {"namespace": pod["namespace"], "name": pod["name"]},
        "spec": {
            "nodeName": pod["node"],
            "containers": [{"name": "main", "resources": {"limits": limits} if limits else {}}],
        },
        "status": {"phase": pod.get("phase", "Running")},
    }


def _path(expression: str) -> list[str]:
    """`.spec.containers[*].resources.limits.nvidia\\.com/gpu` as its keys ('*' for [*])."""
    keys: list[str] = []
    for part in re.split(r"(?<!\\)\.", expression.lstrip(".")):
        name, star, _ = part.partition("[*]")
        keys.append(name.replace("\\.", "."))
        if star:
            keys.append("*")
    return keys


def _values(value: Any, keys: list[str]) -> list[Any]:
    if not keys:
        return [value]
    head, *rest = keys
    if head == "*":
        return [v for item in value or [] for v in _values(item, rest)]
    if not isinstance(value, dict) or head not in value:
        return []
    return _values(value[head], rest)


def _custom_columns(spec: str, objects: list[dict[str, Any]], headers: bool) -> str:
    columns = [column.split(":", 1) for column in spec.split(",")]
    rows = [[name for name, _ in columns]] if headers else []
    for obj in objects:
        cells = []
        for _, expression in columns:
            found = _values(obj, _path(expression))
            cells.append(",".join(str(v) for v in found) if found else "<none>")
        rows.append(cells)
    # kubectl's printers write through tabwriter.NewWriter(out, 6, 4, 3, ' ', 0) (cli-runtime's
    # GetNewTabWriter): a column is its widest cell and three spaces, at least six wide; the
    # last is not padded
    widths = [max(6, max(len(row[i]) for row in rows) + 3) for i in range(len(columns))]
    return "".join(
        "".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in rows
    )


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str]) -> int:
    state_path, *args = argv
    state_file = Path(state_path)
    state = json.loads(state_file.read_text())
    state.setdefault("calls", []).append(args)
    try:
        return _run(state, args)
    finally:
        state_file.write_text(json.dumps(state, indent=2))


def _run(state: dict[str, Any], args: list[str]) -> int:
    nodes: dict[str, dict[str, Any]] = state["nodes"]
    verb = args[0] if args else ""
    if verb == "get" and args[1:2] == ["node"]:
        name = args[2]
        if name not in nodes:
            print(NOT_FOUND.format(name), file=sys.stderr)
            return 1
        if _option(args, "-o") == "jsonpath={.spec.unschedulable}":
            # the field is left out of a schedulable node: jsonpath prints nothing
            print("true" if nodes[name]["unschedulable"] else "", end="")
            return 0
    elif verb == "get" and args[1:2] == ["pods"] and "--all-namespaces" in args:
        selected = dict(
            term.split("=", 1) for term in (_option(args, "--field-selector") or "").split(",")
        )
        pods = [
            _pod_object(pod)
            for pod in state["pods"]
            if selected.get("spec.nodeName", pod["node"]) == pod["node"]
            and selected.get("status.phase", pod.get("phase", "Running"))
            == pod.get("phase", "Running")
        ]
        output = _option(args, "-o") or ""
        if output.startswith("custom-columns="):
            spec = output.removeprefix("custom-columns=")
            print(_custom_columns(spec, pods, "--no-headers" not in args), end="")
            return 0
    elif verb in ("cordon", "uncordon") and len(args) == 2:
        name = args[1]
        if name not in nodes:
            print(NOT_FOUND.format(name), file=sys.stderr)
            return 1
        wanted = verb == "cordon"
        already = nodes[name]["unschedulable"] == wanted
        nodes[name]["unschedulable"] = wanted
        print(f"node/{name} {'already ' if already else ''}{verb}ed")
        return 0
    elif verb == "drain" and len(args) >= 2:
        name = args[1]
        if name not in nodes:
            print(NOT_FOUND.format(name), file=sys.stderr)
            return 1
        nodes[name]["unschedulable"] = True
        print(f"node/{name} cordoned")
        staying = []
        for pod in state["pods"]:
            if pod["node"] != name or (pod.get("daemonset") and "--ignore-daemonsets" in args):
                staying.append(pod)
                continue
            print(f"evicting pod {pod['namespace']}/{pod['name']}")
            print(f"pod/{pod['name']} evicted")
        state["pods"] = staying
        print(f"node/{name} drained")
        return 0
    print(f'error: unknown command "{" ".join(args)}" for "kubectl"', file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
