from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.catalog.models import RESERVED_VARS
from nodeforge.errors import InputError
from nodeforge.render import load_overrides, manifest_document, render, to_json
from nodeforge.target import target_for
from tests.conftest import Edit


def _render(catalog: Catalog, image: str, profile: str | None = None, **kw: Any) -> dict[str, Any]:
    return render(catalog, target_for(catalog, image, profile), **kw)


def test_deterministic(shipped: Catalog) -> None:
    first = to_json(_render(shipped, "p5-ubuntu24.04", "p5en.48xlarge"))
    second = to_json(_render(load_catalog(shipped.root), "p5-ubuntu24.04", "p5en.48xlarge"))
    assert first == second
    assert first.endswith("}\n")
    assert json.loads(first)["nodeforge"]["profile"]["name"] == "p5en.48xlarge"


def test_facts_and_derived_values(shipped: Catalog) -> None:
    doc = _render(shipped, "p6-ubuntu24.04", "p6-b300.48xlarge")["nodeforge"]
    assert doc["stack"]["driver"]["version"] == "595.91.07"
    assert doc["driver_flavour"] == "open"
    assert doc["fabric_packages"] == {
        "fabric_manager": "nvidia-fabricmanager",
        "imex": "nvidia-imex",
    }
    assert doc["aws_ofi_nccl_version"] == "1.22.0"
    assert doc["layers"]["nvidia_fabric"] is True
    assert doc["os"]["arch"]["nvidia_repo"] == "ubuntu2404/x86_64"
    assert doc["profile"]["network"]["efa_interfaces"] == 16
    cuda = doc["stack"]["repositories"]["cuda"]
    assert (
        cuda["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    )


def test_the_cuda_repository_key_follows_the_package_family(shipped: Catalog) -> None:
    target = target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge")
    apt = render(shipped, target)["nodeforge"]["stack"]["repositories"]["cuda"]
    assert apt["key_url"].endswith("/repos/ubuntu2404/x86_64/3bf863cc.pub")
    assert apt["gpg_fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    al2023 = replace(target, os=shipped.os["al2023"])
    dnf = render(shipped, al2023)["nodeforge"]["stack"]["repositories"]["cuda"]
    assert dnf["url"].endswith("/repos/amzn2023/x86_64/")
    assert dnf["key_url"].endswith("/repos/amzn2023/x86_64/D42D0685.pub")
    assert dnf["gpg_fingerprint"] == "610C7B14E068A878070DA4E99CD0A493D42D0685"
    assert "rpm_key" not in apt and "rpm_key" not in dnf


def test_compute_capabilities_cover_every_profile_of_the_image(shipped: Catalog) -> None:
    # one AMI serves B200 and B300: code built for it must run on both
    for profile in ("p6-b200.48xlarge", "p6-b300.48xlarge"):
        doc = _render(shipped, "p6-ubuntu24.04", profile)
        assert doc["nodeforge"]["compute_capabilities"] == ["10.0", "10.3"]
        assert doc["nodeforge_manifest"]["compute_capabilities"] == ["10.0", "10.3"]


def test_arm64_placeholders(shipped: Catalog) -> None:
    doc = _render(shipped, "gb200-ubuntu24.04-arm64")["nodeforge"]
    repos = doc["stack"]["repositories"]
    assert repos["cuda"]["url"].endswith("/repos/ubuntu2404/sbsa/")
    assert repos["nvidia_container_toolkit"]["url"].endswith("/stable/deb/arm64/")


def test_layering_last_wins(edit: Edit, catalog_dir: Path, tmp_path: Path) -> None:
    edit("common.yml", lambda d: d["vars"].update(probe="common", common_only=1))
    edit("os/ubuntu24.04.yml", lambda d: d.update(vars={"probe": "os"}))
    edit("stacks/hopper-2026.12.yml", lambda d: d.update(vars={"probe": "stack"}))
    edit("profiles/p5.48xlarge.yml", lambda d: d.update(vars={"probe": "profile"}))
    catalog = load_catalog(catalog_dir)
    assert _render(catalog, "p5-ubuntu24.04", "p5.48xlarge")["probe"] == "profile"
    assert _render(catalog, "p5-ubuntu24.04", "p5e.48xlarge")["probe"] == "stack"
    edit("p5-ubuntu24.04.yml", lambda d: d.update(vars={"probe": "image"}))
    catalog = load_catalog(catalog_dir)
    doc = _render(catalog, "p5-ubuntu24.04", "p5.48xlarge")
    assert doc["probe"] == "image"
    assert doc["common_only"] == 1
    overrides = tmp_path / "user.yml"
    overrides.write_text("vars:\n  probe: user\n")
    doc = _render(
        catalog,
        "p5-ubuntu24.04",
        "p5.48xlarge",
        overrides=load_overrides(overrides),
        overrides_path=overrides,
    )
    assert doc["probe"] == "user"
    assert [entry.split(" ")[0] for entry in doc["nodeforge"]["layering"]] == [
        "common",
        "os:ubuntu24.04",
        "stack:hopper-2026.12",
        "profile:p5.48xlarge",
        "image:p5-ubuntu24.04",
        "user",
    ]


def test_reserved_key(edit: Edit, catalog_dir: Path) -> None:
    path = edit("p5-ubuntu24.04.yml", lambda d: d.update(vars={"nodeforge": {}}))
    with pytest.raises(InputError, match="reserved") as info:
        _render(load_catalog(catalog_dir), "p5-ubuntu24.04", "p5.48xlarge")
    assert info.value.file == path


def test_mirror_rewrites_every_download(shipped: Catalog, tmp_path: Path) -> None:
    overrides = tmp_path / "mirror.json"
    overrides.write_text(json.dumps({"mirror": "http://127.0.0.1:8080/"}))
    doc = _render(
        shipped,
        "p5-ubuntu24.04",
        "p5.48xlarge",
        overrides=load_overrides(overrides),
        overrides_path=overrides,
    )["nodeforge"]
    stack = doc["stack"]
    assert doc["mirror"] == "http://127.0.0.1:8080/"
    assert stack["artifacts"]["efa_installer"]["url"] == (
        "http://127.0.0.1:8080/efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz"
    )
    assert stack["artifacts"]["efa_installer"]["signature_url"].endswith(".tar.gz.sig")
    urls = [
        value
        for group in ("repositories", "artifacts")
        for entry in stack[group].values()
        for key, value in entry.items()
        if key.endswith("url") and value
    ]
    assert urls and all(u.startswith("http://127.0.0.1:8080/") for u in urls)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mirror: ftp://x/\n", "http"),
        ("vars:\n  Bad-Name: 1\n", "snake_case"),
        ("surprise: 1\n", "unknown key"),
        ("- 1\n", "expected a mapping"),
    ],
)
def test_bad_overrides(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "user.yml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_overrides(path)


def test_profile_selection(shipped: Catalog) -> None:
    assert target_for(shipped, "local-debian13", None).profile.name == "g6e.48xlarge"
    with pytest.raises(InputError, match="several profiles"):
        target_for(shipped, "p5-ubuntu24.04", None)
    with pytest.raises(InputError, match="not a target") as info:
        target_for(shipped, "p5-ubuntu24.04", "p6-b200.48xlarge")
    assert info.value.fix is not None and "p5.48xlarge" in info.value.fix
    with pytest.raises(InputError, match="unknown image"):
        target_for(shipped, "p7-ubuntu", None)


def test_mode_and_layered_vars_for_the_manifest(shipped: Catalog) -> None:
    doc = _render(shipped, "local-debian13", mode="node")
    assert doc["nodeforge_mode"] == "node"
    layered = doc["nodeforge"]["vars"]
    assert doc["nodeforge_manifest"]["vars"] == layered
    # the top level: the layered variables, the role inputs (their own names), the reserved keys
    assert layered.items() <= doc.items()
    assert doc["base_mode"] == doc["image_cleanup_mode"] == "node"
    assert not RESERVED_VARS & layered.keys()
    assert layered["nodeforge_manifest_path"] == "/etc/nodeforge/manifest.json"
    assert "nodeforge_mode" not in doc["nodeforge"]
    assert "nodeforge_mode" not in doc["nodeforge_manifest"]


P5_PROFILES = ["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]


def test_manifest_is_the_same_for_every_profile_of_the_image(shipped: Catalog) -> None:
    docs = [_render(shipped, "p5-ubuntu24.04", profile) for profile in P5_PROFILES]
    assert [d["nodeforge"]["profile"]["name"] for d in docs] == P5_PROFILES
    manifest = docs[0]["nodeforge_manifest"]
    assert all(d["nodeforge_manifest"] == manifest for d in docs[1:])
    assert manifest == manifest_document(
        shipped, target_for(shipped, "p5-ubuntu24.04", P5_PROFILES[1])
    )
    assert manifest["profiles"] == P5_PROFILES
    assert {"profile", "driver_flavour"}.isdisjoint(manifest)
    # the image-level facts are the resolved ones themselves, not a summary of them
    facts = manifest.keys() - {"profiles", "layering"}
    assert {k: docs[0]["nodeforge"][k] for k in facts} == {k: manifest[k] for k in facts}
    assert manifest["stack"]["nccl"]["version"] == "2.30.7-1"


def test_manifest_leaves_out_the_profile_layer(edit: Edit, catalog_dir: Path) -> None:
    edit("profiles/p5.48xlarge.yml", lambda d: d.update(vars={"probe": "p5"}))
    edit("profiles/p5en.48xlarge.yml", lambda d: d.update(vars={"probe": "p5en"}))
    catalog = load_catalog(catalog_dir)
    docs = {profile: _render(catalog, "p5-ubuntu24.04", profile) for profile in P5_PROFILES}
    assert docs["p5.48xlarge"]["probe"] == "p5"
    assert docs["p5en.48xlarge"]["nodeforge"]["vars"]["probe"] == "p5en"
    manifests = [d["nodeforge_manifest"] for d in docs.values()]
    assert all(m == manifests[0] for m in manifests[1:])
    assert "probe" not in manifests[0]["vars"]
    assert not any(entry.startswith("profile:") for entry in manifests[0]["layering"])


@pytest.mark.parametrize(
    ("field", "mutate"),
    [
        ("nccl", lambda d: d["nccl"].update(version="2.30.5-1")),
        ("driver", lambda d: d["driver"].update(version="595.71.05")),
        # a pin change needs new locks (rule `locks`); another fitting lock needs none
        (
            "frameworks",
            lambda d: d["frameworks"]["environments"]["train"]["locks"].update(
                x86_64="locks/blackwell-2026.12/train-x86_64.txt"
            ),
        ),
    ],
)
def test_manifest_changes_with_a_stack_version(
    shipped: Catalog, edit: Edit, catalog_dir: Path, field: str, mutate: Callable[[Any], None]
) -> None:
    before = _render(shipped, "p5-ubuntu24.04", "p5e.48xlarge")["nodeforge_manifest"]
    edit("stacks/hopper-2026.12.yml", mutate)
    after = _render(load_catalog(catalog_dir), "p5-ubuntu24.04", "p5e.48xlarge")
    assert after["nodeforge_manifest"] != before
    assert after["nodeforge_manifest"]["stack"][field] != before["stack"][field]
    assert {k: v for k, v in after["nodeforge_manifest"].items() if k != "stack"} == {
        k: v for k, v in before.items() if k != "stack"
    }


def test_user_vars_cannot_set_the_mode(shipped: Catalog, tmp_path: Path) -> None:
    overrides = tmp_path / "user.yml"
    overrides.write_text("vars:\n  nodeforge_mode: node\n")
    with pytest.raises(InputError, match="reserved"):
        _render(
            shipped,
            "local-debian13",
            overrides=load_overrides(overrides),
            overrides_path=overrides,
        )


def test_live_node_vars_are_typed_defaults_in_node_mode_only(
    shipped: Catalog, tmp_path: Path
) -> None:
    """playbooks/node.yml reads the busy guard's and hooks' variables from the rendered vars:
    defaults where no layer sets them, the last layer's value where one does; image builds have
    none. The per-node scheduler names are left to the playbook (each node's hostname)."""
    overrides = tmp_path / "user.yml"
    overrides.write_text("vars:\n  nodeforge_scheduler: slurm\n  nodeforge_drain_poll_s: 2\n")
    loaded = load_overrides(overrides)
    node = _render(
        shipped, "local-debian13", mode="node", overrides=loaded, overrides_path=overrides
    )
    assert node["nodeforge_scheduler"] == "slurm"
    assert node["nodeforge_drain_poll_s"] == 2
    assert node["nodeforge_busy"] == "skip"
    assert node["nodeforge_drain_timeout_s"] == 3600
    assert "slurmd.service" in node["nodeforge_health_units"]
    assert "nodeforge_slurm_node" not in node
    image = _render(shipped, "local-debian13", overrides=loaded, overrides_path=overrides)
    assert "nodeforge_busy" not in image
