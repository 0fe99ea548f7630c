"""`nodeforge apply`: the image's layers converged onto running nodes, in rolling batches.

The vars are rendered in node mode (no image cleanup; roles restart no hardware service and
reboot nothing unless the vars allow it) and `playbooks/node.yml` runs against the nodes with
Ansible's own rolling update: `serial` takes the canary batch first, then batches of `--batch`,
and `max_fail_percentage: 0` ends the run at the first failed node, leaving every later batch
untouched. Around the layers, node.yml's busy guard skips (or, with `--drain`, drains) a busy node
whose driver stack would change, and its health check decides whether the next batch may go
(docs/live-nodes.md). `--check` is Ansible's check mode with diffs: what would change, per node,
and nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from nodeforge.catalog.loader import Catalog
from nodeforge.drift import expand, read_manifest
from nodeforge.errors import InputError
from nodeforge.hosts import check_hosts
from nodeforge.local.playbook import PlaybookResult, Progress, run_playbook
from nodeforge.outfile import output_folder, write_output
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import Target

_BATCH = re.compile(r"^(?:[1-9]\d*|(?:100|[1-9]\d?)%)$")
_INSTANCE_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
# Ansible's connection over AWS Systems Manager (amazon.aws): a session to the instance's SSM
# agent, files moved through an S3 bucket the instance profile can read.
SSM_CONNECTION = "amazon.aws.aws_ssm"
_RECAP = ("ok", "changed", "failures", "unreachable", "skipped")
# how node/guard.yml's notice for a node it left alone begins
_SKIPPED_BUSY = "skipped: busy"


def batch_size(value: str, option: str) -> int | str:
    """An Ansible `serial` entry: a node count, or a percentage of the nodes."""
    if not _BATCH.match(value):
        raise InputError(
            f"'{value}' is not a batch size",
            field=option,
            fix="give a node count (4) or a percentage of the nodes (25%)",
        )
    return value if value.endswith("%") else int(value)


def serial(batch: str | None, canary: str | None) -> list[int | str]:
    """node.yml's `serial`: the canary batch (one node unless told), then the batch size."""
    rest = batch_size(batch, "--batch") if batch else "10%"
    return [batch_size(canary, "--canary") if canary else 1, rest]


def inventory_of(urls: list[str], ssm_bucket: str | None = None) -> dict[str, Any]:
    """An Ansible inventory for the node URLs: ssh://[user@]host[:port], ssm://INSTANCE_ID
    (Systems Manager, for nodes without inbound SSH; its files go through `ssm_bucket`),
    podman://CONTAINER (the pipelined podman connection) and local://."""
    hosts: dict[str, dict[str, Any]] = {}
    for url in urls:
        parts = urlsplit(url)
        name = parts.hostname or ""
        if parts.scheme == "ssh" and name:
            entry: dict[str, Any] = {"ansible_host": name}
            if parts.username:
                entry["ansible_user"] = parts.username
            if parts.port:
                entry["ansible_port"] = parts.port
        elif parts.scheme == "ssm" and _INSTANCE_ID.match(parts.netloc):
            name = parts.netloc
            if not ssm_bucket:
                raise InputError(
                    f"{url} is reached through Systems Manager, which moves files through S3",
                    field="--ssm-bucket",
                    fix="give --ssm-bucket BUCKET, a bucket the instance profile can read and "
                    "write (the AWS pipeline's ssm_bucket serves)",
                )
            entry = {
                "ansible_connection": SSM_CONNECTION,
                "ansible_aws_ssm_instance_id": name,
                "ansible_aws_ssm_bucket_name": ssm_bucket,
            }
        elif parts.scheme == "podman" and parts.netloc:
            name = parts.netloc
            entry = {"ansible_connection": "nodeforge_podman"}
        elif parts.scheme == "local":
            name, entry = "localhost", {"ansible_connection": "local"}
        else:
            raise InputError(
                f"'{url}' is not a node apply can reach",
                field="--hosts",
                fix="name nodes as ssh://[USER@]HOST[:PORT], ssm://i-0123456789abcdef0 or "
                "podman://CONTAINER, or give an Ansible inventory with --inventory",
            )
        hosts[name] = entry
    return {"all": {"hosts": hosts}}


def split_hosts(spec: str) -> list[str]:
    """apply's --hosts: testinfra host URLs (checked as `validate` checks them) and
    ssm://INSTANCE_ID, which Ansible reaches and testinfra reads through the inventory."""
    urls = [host.strip() for host in spec.split(",")]
    for url in urls:
        if url.startswith("ssm://") and not _INSTANCE_ID.match(url.removeprefix("ssm://")):
            raise InputError(
                f"'{url}' does not name an EC2 instance",
                field="--hosts",
                fix="name it as ssm://i-0123456789abcdef0 (the instance id)",
            )
    others = [url for url in urls if not url.startswith("ssm://")]
    if others:
        check_hosts(",".join(others))
    return urls


def _readable(url: str, inventory_path: Path) -> str:
    """The URL testinfra reads a node's manifest through: an ssm:// node through Ansible and
    the run's inventory (testinfra has no Systems Manager backend of its own)."""
    if url.startswith("ssm://"):
        return f"ansible://{url.removeprefix('ssm://')}?ansible_inventory={inventory_path}"
    return url


def versions(manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """What a manifest says was installed, by dotted path: every `version` or `*_version` leaf
    (the stack's driver, CUDA, NCCL, EFA installer, frameworks ...) and the image."""
    found: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif value is not None and path.rsplit(".", 1)[-1].endswith("version"):
            found[path] = str(value)

    if manifest is not None:
        walk(manifest, "")
        found["image"] = str(manifest.get("image"))
    return found


def version_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """ "path: old -> new" for every version that differs (a missing side shows as -)."""
    return [
        f"{key}: {before.get(key, '-')} -> {after.get(key, '-')}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


@dataclass
class ApplyResult:
    image: str
    profile: str
    check: bool
    playbook: PlaybookResult
    log: Path
    untouched: list[str] = field(default_factory=list)
    """Nodes of the inventory the run never reached: a batch before theirs failed."""
    changed_versions: dict[str, list[str]] = field(default_factory=dict)
    """Per node, the versions its manifest names before and after the run (in check mode: the
    manifest the run would write)."""

    @property
    def busy(self) -> dict[str, str]:
        """The nodes the busy guard left alone, with what was running on them."""
        return {
            host: notice
            for host, notices in self.playbook.notices.items()
            for notice in notices
            if notice.startswith(_SKIPPED_BUSY)
        }

    @property
    def ok(self) -> bool:
        """Every node reached, changed as asked and healthy: a node skipped as busy is not at
        the image yet, so the run is not ok (run again once its work has ended)."""
        failed = any(s.get("failures") or s.get("unreachable") for s in self.nodes().values())
        return self.playbook.returncode == 0 and not (failed or self.untouched or self.busy)

    def nodes(self) -> dict[str, dict[str, int]]:
        return self.playbook.hosts

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "profile": self.profile,
            "check": self.check,
            "ok": self.ok,
            "nodes": {
                host: {
                    **{k: stats.get(k, 0) for k in _RECAP},
                    "changes": self.playbook.host_changes.get(host, []),
                    "versions": self.changed_versions.get(host, []),
                    "notices": self.playbook.notices.get(host, []),
                }
                for host, stats in self.nodes().items()
            },
            "untouched": self.untouched,
            "busy": self.busy,
            "failures": self.playbook.failures,
            "log": str(self.log),
        }


def apply(
    catalog: Catalog,
    target: Target,
    *,
    inventory: Path | dict[str, Any],
    node_urls: list[str],
    limit: str | None,
    work_dir: Path,
    repo_root: Path,
    check: bool,
    batches: list[int | str],
    drain: bool,
    progress: Progress,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
) -> ApplyResult:
    folder = output_folder(work_dir)
    document = render(
        catalog, target, mode="node", overrides=overrides, overrides_path=overrides_path
    )
    document["nodeforge_batch_size"] = batches
    if drain:
        document["nodeforge_busy"] = "drain"
    mode = "check mode: nothing changes" if check else f"batches {batches}"
    progress(f"applying {target.image.name} ({target.profile.name}) in node mode, {mode}")
    vars_path = folder / "vars.json"
    write_output(vars_path, to_json(document))
    if isinstance(inventory, dict):
        inventory_path = folder / "inventory.yml"
        write_output(inventory_path, yaml.safe_dump(inventory, sort_keys=False))
    else:
        inventory_path = inventory
    nodes = expand([_readable(url, inventory_path) for url in node_urls])
    manifest_path = str(catalog.common.vars["nodeforge_manifest_path"])
    before = {n.hostname: versions(read_manifest(n, manifest_path)) for n in nodes}
    extra = [*(["--limit", limit] if limit else []), *(["--check", "--diff"] if check else [])]
    log = folder / "ansible.log"
    result = run_playbook(
        repo_root / "playbooks" / "node.yml",
        inventory=inventory_path,
        extra_vars=vars_path,
        repo_root=repo_root,
        log=log,
        progress=progress,
        extra_args=extra,
        name_hosts=True,
    )
    # the nodes expand() listed (an inventory's too): those the recap lacks were never reached
    untouched = [n.hostname for n in nodes if n.hostname not in result.hosts]
    rendered = versions(document["nodeforge_manifest"])
    changed_versions = {}
    for node in nodes:
        if node.hostname not in result.hosts:
            continue
        after = rendered if check else versions(read_manifest(node, manifest_path))
        changed_versions[node.hostname] = version_changes(before[node.hostname], after)
    return ApplyResult(
        image=target.image.name,
        profile=target.profile.name,
        check=check,
        playbook=result,
        log=log,
        untouched=untouched,
        changed_versions=changed_versions,
    )
