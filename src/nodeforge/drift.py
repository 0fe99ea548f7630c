"""`nodeforge drift`: what a running node no longer has of the image it was built as.

Each node names its image in its manifest (`nodeforge_manifest_path`, /etc/nodeforge/
manifest.json, written at build time). Drift renders that image's vars from the catalog in use
and runs validation/ against the node at target stage with the hardware checks left out (they
judge the machine, not what is installed on it): packages and their versions and holds, units,
configuration files such as the NCCL environment, the framework environments, and the manifest
itself against the current render, so a node built from an older catalog shows where the
catalog has moved since. Every failed check is drift, named by the check and what it found.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import testinfra

from nodeforge.catalog.loader import Catalog
from nodeforge.errors import InputError
from nodeforge.hosts import check_hosts
from nodeforge.outfile import output_folder, write_output
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import target_for
from nodeforge.validate import CAPABILITIES, ValidationRun, run_validation

INSTALLED_STATE = f"not ({' or '.join(CAPABILITIES)})"
"""pytest's -m expression for the checks drift runs: all but those needing the hardware."""


@dataclass(frozen=True)
class Node:
    url: str
    """testinfra's URL for this one node."""
    hostname: str
    """As the suite's report names it."""


@dataclass
class NodeDrift:
    node: Node
    image: str | None
    drifted: list[dict[str, str]] = field(default_factory=list)
    """Each failed check: its id and what it found."""
    error: str | None = None
    """Why the node could not be checked (no manifest, unreachable)."""

    @property
    def clean(self) -> bool:
        return self.error is None and not self.drifted

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.node.hostname,
            "url": self.node.url,
            "image": self.image,
            "drifted": self.drifted,
            "error": self.error,
            "clean": self.clean,
        }


@dataclass
class DriftResult:
    nodes: list[NodeDrift] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return all(node.clean for node in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "nodes": [n.to_json() for n in self.nodes],
            "reports": [str(p) for p in self.reports],
        }


def expand(urls: list[str]) -> list[Node]:
    """One Node per host the URLs name (an ansible:// pattern names every inventory host it
    matches)."""
    nodes = []
    for url in urls:
        parts = urlsplit(url)
        try:
            hosts = testinfra.get_hosts([url])
        except AssertionError as exc:  # testinfra's way of saying ansible-inventory failed
            raise InputError(
                f"could not list the hosts of {url}: {' '.join(str(exc).split())[:300]}",
                field="--inventory",
                fix="check it with `ansible-inventory -i FILE --list` (ansible-inventory must "
                "be on PATH: activate nodeforge's virtual environment)",
            ) from None
        if not hosts:
            # a pattern that names no host would check nothing and look clean
            raise InputError(
                f"{url} names no host",
                field="--limit" if parts.scheme == "ansible" else "--hosts",
                fix="name a group or host the inventory has (`ansible-inventory -i FILE --graph`)",
            )
        for host in hosts:
            one = url
            if parts.scheme == "ansible":
                query = f"?{parts.query}" if parts.query else ""
                one = f"ansible://{host.backend.host}{query}"
            nodes.append(Node(url=one, hostname=str(host.backend.hostname)))
    return nodes


def _cat(node: Node, path: str) -> Any:
    """`cat PATH` on the node; RuntimeError when it cannot be reached."""
    try:
        return testinfra.get_host(node.url).run("cat %s", path)
    except KeyError:  # testinfra's ansible backend, given Ansible's result for an unreachable host
        raise RuntimeError(f"{node.hostname} could not be reached") from None


def _manifest(node: Node, manifest_path: str) -> dict[str, Any]:
    """The node's manifest; ValueError saying why there is none."""
    try:
        text = _cat(node, manifest_path)
    except RuntimeError as exc:
        raise ValueError(f"unreachable: {exc}") from None
    if text.rc != 0:
        raise ValueError(
            f"no {manifest_path} ({text.stderr.strip() or f'exit {text.rc}'}): not a node "
            "nodeforge built, or unreachable"
        )
    try:
        found = json.loads(text.stdout)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{manifest_path} is not a nodeforge manifest ({exc})") from None
    if not isinstance(found, dict):
        raise ValueError(f"{manifest_path} is not a nodeforge manifest (not a mapping)")
    return found


def node_image(node: Node, manifest_path: str) -> str:
    """The image the node's manifest names; ValueError saying why there is none."""
    manifest = _manifest(node, manifest_path)
    if "image" not in manifest:
        raise ValueError(f"{manifest_path} is not a nodeforge manifest (no image)")
    return str(manifest["image"])


def read_manifest(node: Node, manifest_path: str) -> dict[str, Any] | None:
    """The node's manifest, None when it has none (or none that parses, or no node answers)."""
    try:
        return _manifest(node, manifest_path)
    except ValueError:
        return None


def drift(
    catalog: Catalog,
    urls: list[str],
    *,
    report_root: Path,
    profile: str | None = None,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> DriftResult:
    """Each node against the image its manifest names, rendered from `catalog` now."""
    manifest_path = str(catalog.common.vars["nodeforge_manifest_path"])
    result = DriftResult()
    by_image: dict[str, list[NodeDrift]] = defaultdict(list)
    for node in expand(urls):
        try:
            image = node_image(node, manifest_path)
        except ValueError as exc:
            result.nodes.append(NodeDrift(node, None, error=str(exc)))
            continue
        if image not in catalog.images:
            message = f"its manifest names image {image}, which the catalog does not have"
            result.nodes.append(NodeDrift(node, image, error=message))
            continue
        entry = NodeDrift(node, image)
        by_image[image].append(entry)
        result.nodes.append(entry)
    for image, entries in by_image.items():
        target = target_for(catalog, image, profile)
        report_dir = output_folder(report_root / image)
        vars_path = report_dir / "vars.json"
        document = render(catalog, target, overrides=overrides, overrides_path=overrides_path)
        write_output(vars_path, to_json(document))
        names = ", ".join(e.node.hostname for e in entries)
        progress(f"checking {names} against image {image} ({target.profile.name})")
        run = run_validation(
            hosts=",".join(e.node.url for e in entries),
            vars_path=vars_path,
            stage="target",
            report_dir=report_dir,
            parallel=len(entries) > 1,
            select=INSTALLED_STATE,
        )
        _attribute(run, entries)
        result.reports.append(run.json_report)
    return result


def _attribute(run: ValidationRun, entries: list[NodeDrift]) -> None:
    by_host = {e.node.hostname: e for e in entries}
    for check in run.failures() + run.not_run():
        entry = by_host.get(str(check.get("host")))
        targets = [entry] if entry is not None else entries
        for target in targets:
            if check.get("unreachable"):
                target.error = f"unreachable: {check['unreachable']}"
                continue
            found = " ".join(str(check["message"]).removeprefix("AssertionError: ").split())
            target.drifted.append({"check": check["id"].split("::", 1)[-1], "found": found})


def parse_urls(
    hosts: str | None,
    inventory: Path | None,
    limit: str | None,
    split: Callable[[str], list[str]] = check_hosts,
) -> list[str]:
    """`--hosts` (checked by `split`) or `--inventory [--limit]` as node URLs."""
    if (hosts is None) == (inventory is None):
        raise InputError(
            "name the nodes with --hosts or with --inventory (one of the two)",
            field="--hosts",
            fix="--hosts ssh://node1,ssh://node2, or --inventory inventory.ini [--limit GROUP]",
        )
    if inventory is not None:
        if not inventory.is_file():
            raise InputError("no such inventory", file=inventory, field="--inventory")
        return [f"ansible://{limit or 'all'}?ansible_inventory={inventory.resolve()}"]
    if limit is not None:
        raise InputError(
            "--limit selects hosts of an --inventory",
            field="--limit",
            fix="drop --limit, or name the nodes with --inventory FILE --limit PATTERN",
        )
    return split(str(hosts))
