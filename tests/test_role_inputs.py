"""The role inputs `nodeforge render` derives (src/nodeforge/rolevars.py): golden per shipped
target, a change of one catalog field moves exactly its inputs, and a layer's `vars:` that
sets one is refused."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.catalog.models import LAYERS
from nodeforge.check import check_targets
from nodeforge.errors import InputError
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.rolevars import LAYER_INPUTS
from nodeforge.target import Target, target_for, targets
from tests.conftest import SHIPPED, Edit, with_enroot

GOLDEN = Path(__file__).parent / "golden" / "role_inputs"
# Regenerate after an intended change: NODEFORGE_UPDATE_GOLDEN=1 pytest tests/test_role_inputs.py
UPDATE = os.environ.get("NODEFORGE_UPDATE_GOLDEN") == "1"


def role_inputs(catalog: Catalog, target: Target, **kw: Any) -> dict[str, Any]:
    """The rendered document less the catalog facts and the layered variables: what the roles
    get. The catalog's absolute location is written as <catalog>."""
    doc = render(catalog, target, **kw)
    layered = doc["nodeforge"]["vars"]
    inputs = {k: v for k, v in doc.items() if not k.startswith("nodeforge") and k not in layered}
    root = str(Path(os.path.abspath(catalog.root)))
    text = json.dumps(inputs, sort_keys=True).replace(root, "<catalog>")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _targets() -> list[tuple[str, str]]:
    catalog = load_catalog(SHIPPED)
    return [(t.image.name, t.profile.name) for t in targets(catalog)]


@pytest.mark.parametrize(("image", "profile"), _targets())
def test_golden(shipped: Catalog, image: str, profile: str) -> None:
    inputs = role_inputs(shipped, target_for(shipped, image, profile))
    path = GOLDEN / f"{image}__{profile}.json"
    if UPDATE:
        path.write_text(to_json(inputs), encoding="utf-8")
    assert inputs == json.loads(path.read_text(encoding="utf-8"))


def test_every_layer_derives_its_inputs() -> None:
    assert set(LAYER_INPUTS) == set(LAYERS)


def test_one_stack_version_moves_exactly_its_inputs(shipped: Catalog) -> None:
    target = target_for(shipped, "p6-ubuntu24.04", "p6-b200.48xlarge")
    before = role_inputs(shipped, target)
    driver = target.stack.driver.model_copy(update={"version": "580.105.08"})
    after = role_inputs(
        shipped, replace(target, stack=target.stack.model_copy(update={"driver": driver}))
    )
    changed = {name for name in before if before[name] != after[name]}
    # the boot-time gate compares the loaded driver with it
    assert changed == {
        "nvidia_driver_version",
        "nvidia_fabric_driver_version",
        "gpu_health_expectations",
    }
    assert after["nvidia_driver_version"] == after["nvidia_fabric_driver_version"] == "580.105.08"
    expected = after["gpu_health_expectations"]["p6-b200.48xlarge"]
    assert expected["driver_version"] == "580.105.08"


def test_nccl_version_moves_nccl_only(shipped: Catalog) -> None:
    target = target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge")
    before = role_inputs(shipped, target)
    assert target.stack.nccl is not None
    nccl = target.stack.nccl.model_copy(update={"version": "2.27.8-1"})
    after = role_inputs(
        shipped, replace(target, stack=target.stack.model_copy(update={"nccl": nccl}))
    )
    assert {name for name in before if before[name] != after[name]} == {"nccl_version"}


def test_layers_off_get_no_inputs(shipped: Catalog) -> None:
    inputs = role_inputs(shipped, target_for(shipped, "local-debian13", None))
    assert sorted(inputs) == [
        "base_kernel_headers_packages",
        "base_kernel_image_packages",
        "base_mode",
        "base_refusals",
        "gpu_health_dcgm",
        "gpu_health_dcgm_cuda_major",
        "gpu_health_dcgm_version",
        "gpu_health_expectations",
        "gpu_health_mode",
        "gpu_health_refusals",
        "gpu_health_tools_index_url",
        "gpu_health_tools_lock",
        "gpu_health_tools_python",
        "image_cleanup_mode",
        "image_cleanup_refusals",
    ]


def test_enroot_inputs_come_from_the_stacks_artifacts(shipped: Catalog) -> None:
    inputs = role_inputs(shipped, with_enroot(target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge")))
    release = "https://github.com/NVIDIA/enroot/releases/download/v4.2.1"
    assert inputs["enroot_packages"] == [
        {"url": f"{release}/enroot_4.2.1-1_amd64.deb", "sha256": "a" * 64},
        {"url": f"{release}/enroot+caps_4.2.1-1_amd64.deb", "sha256": "b" * 64},
    ]
    assert (inputs["enroot_pyxis"], inputs["enroot_pyxis_version"]) == (True, "0.24.0")
    assert inputs["enroot_pyxis_url"] == (
        "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    )


def test_enroot_without_pyxis(shipped: Catalog) -> None:
    target = with_enroot(target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge"))
    assert target.stack.enroot is not None
    section = target.stack.enroot.model_copy(update={"pyxis": None})
    inputs = role_inputs(
        shipped, replace(target, stack=target.stack.model_copy(update={"enroot": section}))
    )
    assert (inputs["enroot_pyxis"], inputs["enroot_pyxis_version"], inputs["enroot_pyxis_url"]) == (
        False,
        "",
        "",
    )


def test_mirror_reaches_every_download_pip_included(shipped: Catalog) -> None:
    mirror = "http://127.0.0.1:8080/mirror"
    target = with_enroot(target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge"))
    inputs = role_inputs(shipped, target, overrides=UserOverrides(mirror=mirror))
    urls = [value for _, value in _flatten(inputs) if isinstance(value, str) and "://" in value]
    assert urls and all(url.startswith(f"{mirror}/") for url in urls), urls
    # PyPI's own torch builds: each environment from the mirror's PyPI alone
    indexes = [env["index_urls"] for env in inputs["python_ml_environments"]]
    assert indexes == [[f"{mirror}/pypi.org/simple"]] * 3


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _flatten(v, f"{prefix}{k}.")]
    if isinstance(value, list):
        return [item for i, v in enumerate(value) for item in _flatten(v, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), value)]


def test_locks_resolve_from_the_catalog_in_use(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere"
    shutil.copytree(SHIPPED, copy)
    catalog = load_catalog(copy)
    inputs = render(catalog, target_for(catalog, "p5-ubuntu24.04", "p5.48xlarge"))
    locks = [env["lock"] for env in inputs["python_ml_environments"]]
    assert locks == [
        str(copy / "locks" / "hopper-2026.12" / f"{name}-x86_64.txt")
        for name in ("train", "serve", "sglang")
    ]


def _derived_names() -> list[str]:
    catalog = load_catalog(SHIPPED)
    target = with_enroot(target_for(catalog, "p5-ubuntu24.04", "p5.48xlarge"))
    return sorted(role_inputs(catalog, target))


@pytest.mark.parametrize("name", _derived_names())
def test_a_derived_input_in_the_images_vars_is_refused(
    edit: Edit, catalog_dir: Path, name: str
) -> None:
    edit("p5-ubuntu24.04.yml", lambda d: d.update(vars={name: "999.1.1"}))
    catalog = load_catalog(catalog_dir)
    target = with_enroot(target_for(catalog, "p5-ubuntu24.04", "p5.48xlarge"))
    with pytest.raises(InputError) as caught:
        render(catalog, target)
    error = caught.value
    assert error.file == catalog_dir / "p5-ubuntu24.04.yml"
    assert error.field == f"vars.{name}"
    assert error.line is not None and error.line > 1
    assert "derives from" in str(error) and "change " in str(error)
    findings = check_targets([target]).errors
    assert [f.rule for f in findings] == ["derived-vars"]
    assert name in findings[0].message


def test_the_driver_version_example_names_the_stack_field(edit: Edit, catalog_dir: Path) -> None:
    edit("p5-ubuntu24.04.yml", lambda d: d.update(vars={"nvidia_driver_version": "999.1.1"}))
    catalog = load_catalog(catalog_dir)
    with pytest.raises(InputError, match=r"derives from the stack's driver\.version") as caught:
        render(catalog, target_for(catalog, "p5-ubuntu24.04", "p5.48xlarge"))
    assert "change the stack's driver.version instead" in str(caught.value)


def test_a_derived_input_in_the_users_vars_file_is_refused(
    shipped: Catalog, tmp_path: Path
) -> None:
    overrides = tmp_path / "overrides.yml"
    overrides.write_text("vars:\n  nccl_version: 2.99.9-1\n", encoding="utf-8")
    target = target_for(shipped, "p5-ubuntu24.04", "p5.48xlarge")
    with pytest.raises(InputError) as caught:
        render(
            shipped,
            target,
            overrides=UserOverrides(vars={"nccl_version": "2.99.9-1"}),
            overrides_path=overrides,
        )
    assert (caught.value.file, caught.value.field, caught.value.line) == (
        overrides,
        "vars.nccl_version",
        2,
    )


def _bad_b200(shipped: Catalog) -> Target:
    """The B200 target with a stack that skipped `nodeforge check`: an older, proprietary
    driver and a CUDA that driver does not run."""
    target = target_for(shipped, "p6-ubuntu24.04", "p6-b200.48xlarge")
    driver = target.stack.driver.model_copy(
        update={"branch": 535, "version": "535.261.03", "flavour": "proprietary"}
    )
    stack = target.stack.model_copy(update={"driver": driver})
    return replace(target, stack=stack)


def test_rule_verdicts_reach_the_roles_in_the_rules_words(shipped: Catalog) -> None:
    target = _bad_b200(shipped)
    doc = render(shipped, target)
    findings = check_targets([target]).errors
    by_rule = {f.rule: f for f in findings}
    assert {"driver-floor", "open-modules", "cuda-driver"} <= by_rule.keys()
    for rule, layer in (
        ("driver-floor", "nvidia_driver"),
        ("open-modules", "nvidia_driver"),
        ("cuda-driver", "cuda_toolkit"),
    ):
        finding = by_rule[rule]
        text = f"[{rule}] {finding.message}. Fix: {finding.fix}."
        assert text in doc[f"{layer}_refusals"]
    assert doc["nccl_refusals"] == []


def test_no_rule_text_is_written_again_in_ansible(shipped: Catalog) -> None:
    """The roles assert `<layer>_refusals` empty; no rule's words live in YAML."""
    repo = SHIPPED.parent
    yaml_text = "\n".join(
        " ".join(path.read_text(encoding="utf-8").split())
        for folder in ("roles", "playbooks", "molecule")
        for path in (repo / folder).rglob("*.yml")
    )
    messages = [f.message for f in check_targets([_bad_b200(shipped)]).errors]
    assert messages
    for message in messages:
        # the fixed words between the values a rule fills in
        for chunk in ("is older than", "needs the open kernel modules", "is newer than driver"):
            if chunk in message:
                assert chunk not in yaml_text, chunk
