"""Resolved vars: one typed JSON document for a target, from layered catalog entries.

Layering, lowest first (the last layer that sets a variable wins):
    1. common   images/common.yml `vars`
    2. os       images/os/<os>.yml `vars`
    3. stack    images/stacks/<stack>.yml `vars` (after its `extends` chain)
    4. profile  images/profiles/<profile>.yml `vars`
    5. image    images/<image>.yml `vars` (after its `extends` chain)
    6. user     the --vars FILE given to render
Role variables land at the top level; the catalog facts they derive from sit under the
reserved key `nodeforge` (with a copy of the layered variables in `nodeforge.vars`), and
`nodeforge_mode` says image or node.

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
from urllib.parse import urlsplit

from pydantic import Field, ValidationError

from nodeforge.catalog.loader import Catalog, input_error_from
from nodeforge.catalog.models import LAYERS, Model, PlainUrl, Profile, Stack, Vars
from nodeforge.catalog.placeholders import fill, uses
from nodeforge.catalog.yamlfile import read_yaml
from nodeforge.errors import InputError
from nodeforge.target import Target

# 2: the image-level manifest (`nodeforge_manifest`) joined the resolved vars.
SCHEMA_VERSION = 2
RESERVED_VARS = frozenset({"nodeforge", "nodeforge_manifest", "nodeforge_mode"})
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


def resolve_url(url: str, target: Target, mirror: str | None) -> str | None:
    """Fill the URL's placeholders for the target and point it at the mirror when one is set.

    None when the URL needs an NVIDIA repository the OS does not have.
    """
    os_arch = target.os_arch
    nvidia_repo = os_arch.nvidia_repo if os_arch is not None else None
    if uses(url, "nvidia_repo") and nvidia_repo is None:
        return None
    resolved = fill(
        url,
        {
            "nvidia_repo": nvidia_repo or "",
            "arch": target.image.arch,
            "deb_arch": _DEB_ARCH[target.image.arch],
        },
    )
    if mirror is None:
        return resolved
    parts = urlsplit(resolved)
    return f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}"


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
        reserved = RESERVED_VARS & layer_vars.keys()
        if reserved:
            raise InputError(
                f"'{sorted(reserved)[0]}' is reserved for the catalog facts",
                file=path,
                field=f"vars.{sorted(reserved)[0]}",
                fix="rename the variable",
            )
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
        "aws_ofi_nccl_version": str(v) if (v := target.ofi_nccl_version()) else None,
        "mirror": mirror,
    }


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
    return {
        **layered,
        "nodeforge": {
            **_image_facts(catalog, target, overrides.mirror),
            "profile": target.profile.model_dump(mode="json", exclude={"vars", "sources"}),
            "driver_flavour": target.driver_flavour(),
            # compat.yml's branch -> newest CUDA table, for the driver role's preflight
            "driver_cuda": [row.model_dump(mode="json") for row in catalog.compat.driver_cuda],
            "layering": layering,
            "vars": dict(layered),
        },
        "nodeforge_manifest": manifest_document(
            catalog, target, overrides=overrides, overrides_path=overrides_path
        ),
        "nodeforge_mode": mode,
    }


def to_json(document: dict[str, Any]) -> str:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
