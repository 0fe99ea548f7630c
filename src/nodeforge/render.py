"""Resolved vars: one typed JSON document for a target, from layered catalog entries.

Layering, lowest first (the last layer that sets a variable wins):
    1. common   images/common.yml `vars`
    2. os       images/os/<os>.yml `vars`
    3. stack    images/stacks/<stack>.yml `vars` (after its `extends` chain)
    4. profile  images/profiles/<profile>.yml `vars`
    5. image    images/<image>.yml `vars` (after its `extends` chain)
    6. user     the --vars FILE given to render
The layered variables and every role input of the enabled layers (derived in rolevars.py) land
at the top level; a layer may not set a derived input. The catalog facts sit under the reserved
key `nodeforge` (with a copy of the layered variables in `nodeforge.vars`), and `nodeforge_mode`
says image or node.

The reserved key `nodeforge_manifest` is what the node's manifest holds: the part of
`nodeforge` that is the same for every profile of the image. One image (one AMI) serves all its
profiles and is validated on each, so its manifest cannot record the profile it happened to be
rendered for: it names the image's profiles instead, and leaves out the profile's facts, what
is derived from them (the driver flavour a stack leaves to the profile) and the profile layer of
the variables. No layer may set any of the three reserved keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from nodeforge.catalog.loader import Catalog, input_error_from
from nodeforge.catalog.models import LAYERS, Model, PlainUrl, Profile, Stack, Vars
from nodeforge.catalog.yamlfile import read_yaml
from nodeforge.check import check_targets
from nodeforge.errors import InputError
from nodeforge.live_vars import live_node_vars
from nodeforge.mirror import resolve_url
from nodeforge.rolevars import Context, derived_var_problem, role_inputs
from nodeforge.rules import RULES
from nodeforge.target import Target

# 2: the image-level manifest (`nodeforge_manifest`) joined the resolved vars.
# 3: every role input is derived here (rolevars.py); compat's driver/CUDA table left the facts.
SCHEMA_VERSION = 3
Mode = Literal["image", "node"]
_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


class UserOverrides(Model):
    """The --vars file: the last layer. JSON or YAML."""

    mirror: PlainUrl | None = None
    vars: Vars = Field(default_factory=dict)


def load_overrides(path: Path) -> UserOverrides:
    doc = read_yaml(path)
    if not isinstance(doc.data, dict):
        raise InputError(
            "expected a mapping with 'vars' and/or 'mirror'", file=path, line=doc.line_of(())
        )
    try:
        return UserOverrides.model_validate(doc.data)
    except ValidationError as exc:
        raise input_error_from(exc, path, doc.line_of, doc.data) from None


def _layers(
    catalog: Catalog,
    target: Target,
    profile: Profile | None,
    overrides: UserOverrides,
    overrides_path: Path | None,
) -> Iterable[tuple[str, Path, dict[str, Any]]]:
    yield "common", catalog.root / "common.yml", catalog.common.vars
    yield f"os:{target.os.name}", catalog.file_of("os", target.os.name), target.os.vars
    yield (
        f"stack:{target.stack.name}",
        catalog.file_of("stacks", target.stack.name),
        target.stack.vars,
    )
    if profile is not None:
        yield (
            f"profile:{profile.name}",
            catalog.file_of("profiles", profile.name),
            profile.vars,
        )
    yield (
        f"image:{target.image.name}",
        catalog.file_of("images", target.image.name),
        target.image.vars,
    )
    if overrides_path is not None:
        yield "user", overrides_path, overrides.vars


def _relative(path: Path, root: Path) -> str:
    """How the document names a layer's file: from the catalog's folder for catalog files, by
    name alone for the user's, so that the same inputs give the same bytes from any directory."""
    absolute, catalog = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    if absolute.is_relative_to(catalog):
        return str(absolute.relative_to(catalog.parent))
    return path.name


def _stack_document(stack: Stack, target: Target, mirror: str | None) -> dict[str, Any]:
    data = stack.model_dump(mode="json", exclude={"vars", "sources", "extends"})
    for repository in data["repositories"].values():
        rpm_key = repository.pop("rpm_key")
        if rpm_key is not None and target.os.package_family == "dnf":
            repository.update(rpm_key)
    for group in ("repositories", "artifacts"):
        for entry in data[group].values():
            for key in ("url", "key_url", "signature_url"):
                if entry.get(key) is not None:
                    entry[key] = resolve_url(entry[key], target, mirror)
    data["repositories"] = {k: v for k, v in data["repositories"].items() if v["url"] is not None}
    return data


def _layered(
    catalog: Catalog,
    target: Target,
    profile: Profile | None,
    overrides: UserOverrides,
    overrides_path: Path | None,
) -> tuple[dict[str, Any], list[str]]:
    """The merged variables of the layers (the profile's only when given), and their list."""
    merged: dict[str, Any] = {}
    layering: list[str] = []
    for layer, path, layer_vars in _layers(catalog, target, profile, overrides, overrides_path):
        merged.update(layer_vars)
        layering.append(f"{layer} ({_relative(path, catalog.root)})")
    return merged, layering


def _image_facts(catalog: Catalog, target: Target, mirror: str | None) -> dict[str, Any]:
    """The catalog facts that only the image, its OS, its stack and the mirror decide."""
    os_doc = target.os.model_dump(mode="json", exclude={"vars", "sources", "architectures"})
    os_arch = target.os_arch
    os_doc["arch"] = os_arch.model_dump(mode="json") if os_arch is not None else None
    return {
        "schema": SCHEMA_VERSION,
        "image": target.image.name,
        "arch": target.image.arch,
        "layers": {layer: layer in target.image.layers for layer in LAYERS},
        "build": target.image.build.model_dump(mode="json"),
        "os": os_doc,
        "stack": _stack_document(target.stack, target, mirror),
        "fabric_packages": target.fabric_packages(),
        # What GPU code is built for (nccl-tests): every profile of the image, since one image
        # serves them all.
        "compute_capabilities": sorted(
            {catalog.profiles[name].gpu.compute_capability for name in target.image.profiles}
        ),
        "health_expectations": health_expectations(catalog, target),
        "aws_ofi_nccl_version": str(v) if (v := target.ofi_nccl_version()) else None,
        "mirror": mirror,
    }


def health_expectations(catalog: Catalog, target: Target) -> dict[str, dict[str, Any]]:
    """What the boot-time health gate expects of each instance type the image serves, from its
    profile (nodeforge.health_gate.Expectation less the driver, which is the stack's)."""
    expectations = {}
    for name in target.image.profiles:
        profile = catalog.profiles[name]
        expectations[name] = {
            "gpu_count": profile.gpu.count,
            "gpu_model": profile.gpu.model,
            "efa_interfaces": profile.network.efa_interfaces,
            "fabric_manager": profile.interconnect.fabric_manager,
            "imex": profile.interconnect.imex,
        }
    return expectations


def manifest_document(
    catalog: Catalog,
    target: Target,
    *,
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
) -> dict[str, Any]:
    """The node's manifest (`nodeforge_manifest`): the same for every profile of the target's
    image, so the one AMI of the image matches it whichever profile it is validated on."""
    overrides = overrides or UserOverrides()
    layered, layering = _layered(catalog, target, None, overrides, overrides_path)
    return {
        **_image_facts(catalog, target, overrides.mirror),
        "profiles": list(target.image.profiles),
        "layering": layering,
        "vars": layered,
    }


def render(
    catalog: Catalog,
    target: Target,
    *,
    mode: Mode = "image",
    overrides: UserOverrides | None = None,
    overrides_path: Path | None = None,
) -> dict[str, Any]:
    overrides = overrides or UserOverrides()
    layered, layering = _layered(catalog, target, target.profile, overrides, overrides_path)
    manifest = manifest_document(
        catalog, target, overrides=overrides, overrides_path=overrides_path
    )
    context = Context(
        target, mode, catalog.root, overrides.mirror, manifest, refusals=_refusals(target)
    )
    inputs = role_inputs(context)
    _refuse_derived(
        _layers(catalog, target, target.profile, overrides, overrides_path),
        {name: owner for name, (_, owner) in inputs.items()},
    )
    live = (
        live_node_vars(_layers(catalog, target, target.profile, overrides, overrides_path))
        if mode == "node"
        else {}
    )
    return {
        **layered,
        **live,
        **{name: value for name, (value, _) in inputs.items()},
        "nodeforge": {
            **_image_facts(catalog, target, overrides.mirror),
            "profile": target.profile.model_dump(mode="json", exclude={"vars", "sources"}),
            "driver_flavour": target.driver_flavour(),
            "roles": play_order(target, mode),
            "layering": layering,
            "vars": dict(layered),
        },
        "nodeforge_manifest": manifest,
        "nodeforge_mode": mode,
    }


def play_order(target: Target, mode: Mode) -> list[str]:
    """The roles the playbooks apply, in order: the enabled layers in the catalog's order, the
    manifest once everything is installed, and image cleanup last (images only: it wipes a
    node's identity)."""
    enabled = [layer for layer in LAYERS if target.layer(layer) and layer != "image_cleanup"]
    cleanup = ["image_cleanup"] if mode == "image" and target.layer("image_cleanup") else []
    return [*enabled, "manifest", *cleanup]


def _refusals(target: Target) -> dict[str, list[str]]:
    """The rules' errors by the layer they belong to, in the words of `nodeforge check`: empty
    for a target that passed it, and what the roles refuse when vars were made by other means."""
    layers = {rule.id: rule.layer for rule in RULES}
    refusals: dict[str, list[str]] = {}
    for finding in check_targets([target], allow_unverified=True).errors:
        layer = layers[finding.rule]
        if layer is not None:
            refusals.setdefault(layer, []).append(
                f"[{finding.rule}] {finding.message}. Fix: {finding.fix}."
            )
    return refusals


def _refuse_derived(
    layers: Iterable[tuple[str, Path, dict[str, Any]]], owners: dict[str, str]
) -> None:
    """A layer's `vars:` may not set a role input the catalog derives (rule derived-vars
    reports the catalog's own layers in `check`; this also covers common.yml and --vars)."""
    for _, path, layer_vars in layers:
        clash = sorted(owners.keys() & layer_vars.keys())
        if clash:
            message, fix = derived_var_problem(clash[0], owners[clash[0]])
            raise InputError(
                message,
                file=path,
                field=f"vars.{clash[0]}",
                line=read_yaml(path).line_of(("vars", clash[0])),
                fix=fix,
            )


def to_json(document: dict[str, Any]) -> str:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
