"""The variables of a run against live nodes (playbooks/node.yml's busy guard, drain and resume
hooks, health check), typed here and written into node-mode vars by `render`, so that a bad
value stops before any node is reached and the playbook reads one value, not a default of its
own. Set them in any layer's `vars:` (an image's, a profile's, the --vars file).

The node's name in its scheduler is left to the playbook when not set: each node's own hostname
(Slurm) or FQDN (Kubernetes), which a single value could not give."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodeforge.catalog.loader import input_error_from
from nodeforge.catalog.yamlfile import read_yaml
from nodeforge.errors import InputError

# Debian's and Ubuntu's unit names for what a change of the driver stack can leave failed, and the
# scheduler daemons the health gate restarts.
HEALTH_UNITS = [
    "nvidia-*",
    "nodeforge-*",
    "dcgm*",
    "gdrcopy*",
    "efa*",
    "containerd.service",
    "prometheus-node-exporter*",
    "slurmd.service",
    "kubelet.service",
]


class LiveNodeVars(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    nodeforge_scheduler: Literal["none", "slurm", "kubernetes"] = "none"
    """Whose hooks take a node out of service and back: Slurm drain/resume (scontrol on the
    node), Kubernetes cordon/drain/uncordon (kubectl on the controller), or none."""
    nodeforge_busy: Literal["skip", "drain"] = "skip"
    """A busy node whose driver stack would change: left alone (skip) or drained and waited for
    (drain; `nodeforge apply --drain`)."""
    nodeforge_drain_timeout_s: int = Field(3600, gt=0)
    nodeforge_drain_poll_s: int = Field(10, gt=0)
    nodeforge_health_command: list[str] = Field(default_factory=list)
    """An argv run on the node after its change; non-zero fails the node and ends the rollout."""
    nodeforge_health_units: list[str] = Field(default_factory=lambda: list(HEALTH_UNITS))
    """Unit patterns that must not be failed after the change."""
    nodeforge_kubectl: str = "kubectl"
    nodeforge_kubeconfig: str = ""
    nodeforge_slurm_node: str | None = None
    nodeforge_kubernetes_node: str | None = None


def live_node_vars(layers: Iterable[tuple[str, Path, dict[str, Any]]]) -> dict[str, Any]:
    """The live-node variables from the layered `vars:` (last wins), each layer checked where it
    is written; those without a value (the per-node names) are left out."""
    names = LiveNodeVars.model_fields.keys()
    merged: dict[str, Any] = {}
    for _, path, layer_vars in layers:
        mine = {key: value for key, value in layer_vars.items() if key in names}
        try:
            LiveNodeVars.model_validate(mine)
        except ValidationError as exc:
            raise _error_at(exc, path, mine) from None
        merged |= mine
    return LiveNodeVars.model_validate(merged).model_dump(exclude_none=True)


def _error_at(exc: ValidationError, path: Path, values: dict[str, Any]) -> InputError:
    doc = read_yaml(path)
    found = input_error_from(exc, path, lambda loc: doc.line_of(("vars", *loc)), values)
    return InputError(
        found.message,
        file=path,
        line=found.line,
        field=f"vars.{found.field}",
        fix="give it a value of the kind docs/live-nodes.md lists, or remove it for the default",
    )
