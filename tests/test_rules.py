"""Each rule: a pass case on the shipped catalog and a fail case on a planted bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from nodeforge.catalog.compat import KnownBad, KnownBadWhen
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Artifact
from nodeforge.check import Finding, check_targets
from nodeforge.lock import Lock, read_lock, render_lock
from nodeforge.rules import LAYER_SECTIONS, RULES
from nodeforge.target import Target, target_for, targets
from tests.conftest import with_enroot

HOPPER = ("p5-ubuntu24.04", "p5.48xlarge")
B200 = ("p6-ubuntu24.04", "p6-b200.48xlarge")
B300 = ("p6-ubuntu24.04", "p6-b300.48xlarge")
GB200 = ("gb200-ubuntu24.04-arm64", "p6e-gb200.36xlarge")


M = TypeVar("M", bound=BaseModel)


def _set(model: M, **changes: Any) -> M:
    return model.model_copy(update=changes)


def _findings(target: Target, rule: str, *, allow_unverified: bool = False) -> list[Finding]:
    report = check_targets([target], allow_unverified=allow_unverified)
    return [f for f in report.findings if f.rule == rule]


def _errors(target: Target, rule: str) -> list[Finding]:
    return [f for f in _findings(target, rule) if f.severity == "error"]


def test_rule_ids_are_unique() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))


def test_shipped_catalog_passes_every_rule(shipped: Catalog) -> None:
    report = check_targets(targets(shipped))
    assert report.ok, report.errors
    assert len(report.targets) == 11


@pytest.mark.parametrize("pair", [HOPPER, B200, B300, GB200])
def test_shipped_targets_have_no_findings(shipped: Catalog, pair: tuple[str, str]) -> None:
    assert check_targets([target_for(shipped, *pair)]).findings == []


def test_driver_floor(shipped: Catalog) -> None:
    target = target_for(shipped, *B300)
    old = replace(target, stack=_set(target.stack, driver=_set(target.stack.driver, branch=570)))
    [finding] = _errors(old, "driver-floor")
    assert "floor 580" in finding.message
    assert "branch 580 or newer" in finding.fix


def test_open_modules(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    closed = replace(
        target, stack=_set(target.stack, driver=_set(target.stack.driver, flavour="proprietary"))
    )
    [finding] = _errors(closed, "open-modules")
    assert "open kernel modules" in finding.message
    assert "flavour to open" in finding.fix


def test_open_modules_profile_flavour_follows_the_gpu(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.driver.flavour == "profile"
    assert target.driver_flavour() == "open"
    no_open = replace(
        target,
        profile=_set(
            target.profile, driver=_set(target.profile.driver, open_modules="unsupported")
        ),
    )
    assert no_open.driver_flavour() == "proprietary"
    assert _errors(no_open, "open-modules") == []


def test_cuda_driver(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    old_driver = replace(
        target,
        stack=_set(target.stack, driver=_set(target.stack.driver, branch=575, version="575.57.08")),
    )
    [finding] = _errors(old_driver, "cuda-driver")
    assert "CUDA toolkit 13.2.2 is newer than driver branch 575 runs (at most CUDA 12.9)" in (
        finding.message
    )


def test_cuda_sm(shipped: Catalog) -> None:
    target = target_for(shipped, *B300)
    old_cuda = replace(
        target,
        stack=_set(
            target.stack, cuda=_set(target.stack.cuda, toolkits=["12.8.1"], default="12.8.1")
        ),
    )
    [finding] = _errors(old_cuda, "cuda-sm")
    assert "sm_103" in finding.message and "needs CUDA 12.9" in finding.message
    assert "12.9 or newer" in finding.fix


def test_cuda_sm_dropped_architecture(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    volta = replace(
        target,
        profile=_set(target.profile, gpu=_set(target.profile.gpu, compute_capability="7.0")),
        compat=shipped.compat.model_copy(
            update={
                "sm_min_cuda": [
                    *shipped.compat.sm_min_cuda,
                    shipped.compat.sm_min_cuda[0].model_copy(
                        update={"sm": "7.0", "min_cuda": "9.0"}
                    ),
                ]
            }
        ),
    )
    [finding] = _errors(volta, "cuda-sm")
    assert "CUDA 13 no longer compiles for sm_70" in finding.message


def test_torch_driver(shipped: Catalog) -> None:
    """Each torch the stack installs, once per variant: training's cu132 and vLLM's and SGLang's
    cu130."""
    target = target_for(shipped, *B200)
    old_driver = replace(
        target,
        stack=_set(
            target.stack,
            driver=_set(target.stack.driver, branch=570, version="570.211.01"),
            cuda=_set(target.stack.cuda, toolkits=["12.8.1"], default="12.8.1"),
        ),
    )
    cu132, cu130 = _errors(old_driver, "torch-driver")
    assert "cu132" in cu132.message and "driver branch 570" in cu132.message
    assert "cu130" in cu130.message and "needs driver 580" in cu130.message


def test_torch_driver_minor_version_compatibility_warns(shipped: Catalog) -> None:
    """The R580 long-term branch runs CUDA 13.0 natively, torch 2.15's CUDA 13.2 only through
    minor-version compatibility."""
    target = target_for(shipped, *HOPPER)
    on_580 = replace(
        target,
        stack=_set(
            target.stack,
            driver=_set(target.stack.driver, branch=580, version="580.159.03"),
            cuda=_set(target.stack.cuda, toolkits=["13.0.2"], default="13.0.2"),
        ),
    )
    [finding] = _findings(on_580, "torch-driver")
    assert finding.severity == "warning"
    assert "PyTorch cu132 (CUDA 13.2) runs on driver 580" in finding.message
    assert "minor-version compatibility" in finding.message


def test_torch_sm_cu126_has_no_blackwell(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    assert target.stack.frameworks is not None
    cu126 = replace(
        target,
        stack=_set(
            target.stack,
            frameworks=_set(
                target.stack.frameworks,
                pytorch=_set(target.stack.frameworks.pytorch, variant="cu126"),
            ),
        ),
    )
    [finding] = _errors(cu126, "torch-sm")
    assert "cu126" in finding.message and "sm_100" in finding.message
    assert "cu130" in finding.fix


def test_torch_sm_binary_compatibility_covers_b300(shipped: Catalog) -> None:
    # cu130 carries sm_100 cubins, which run on sm_103 (same major, higher minor)
    assert _errors(target_for(shipped, *B300), "torch-sm") == []


def test_nccl_ofi_bundled_version_mismatch(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.aws_ofi_nccl is not None
    wrong = replace(
        target,
        stack=_set(target.stack, aws_ofi_nccl=_set(target.stack.aws_ofi_nccl, version="1.21.1")),
    )
    [finding] = _errors(wrong, "nccl-ofi")
    assert "bundles aws-ofi-nccl 1.22.0" in finding.message


def test_nccl_ofi_floor(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.nccl is not None
    old_nccl = replace(
        target, stack=_set(target.stack, nccl=_set(target.stack.nccl, version="2.16.5-1"))
    )
    [finding] = _errors(old_nccl, "nccl-ofi")
    assert "NCCL 2.17.1 or newer" in finding.message


def test_nccl_ofi_new_nccl_needs_new_plugin(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.efa is not None and target.stack.aws_ofi_nccl is not None
    assert target.stack.nccl is not None
    old_plugin = replace(
        target,
        stack=_set(
            target.stack,
            nccl=_set(target.stack.nccl, version="2.30.4-1"),
            efa=_set(target.stack.efa, installer_version="1.43.2"),
            aws_ofi_nccl=_set(target.stack.aws_ofi_nccl, version="1.16.3"),
        ),
    )
    [finding] = _findings(old_plugin, "nccl-ofi")
    assert finding.severity == "warning"
    assert "1.20.0 or newer" in finding.message


def test_efa_os(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.efa is not None
    old_installer = replace(
        target, stack=_set(target.stack, efa=_set(target.stack.efa, installer_version="1.31.0"))
    )
    [finding] = _errors(old_installer, "efa-os")
    assert "does not support ubuntu24.04" in finding.message
    focal = replace(target, os=_set(target.os, name="focal", version="20.04"))
    [finding] = _errors(focal, "efa-os")
    assert "1.9.0 to 1.42.0" in finding.message


def test_efa_os_unlisted(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    [finding] = _errors(replace(target, os=_set(target.os, version="26.04")), "efa-os")
    assert "does not support ubuntu 26.04" in finding.message
    assert "ubuntu 24.04" in finding.fix


def test_arch(shipped: Catalog) -> None:
    target = target_for(shipped, *GB200)
    x86 = replace(target, image=_set(target.image, arch="x86_64"))
    [finding] = _errors(x86, "arch")
    assert "p6e-gb200.36xlarge is arm64" in finding.message
    hopper = target_for(shipped, *HOPPER)
    on_arm = replace(
        target,
        stack=_set(target.stack, architectures=["x86_64"]),
        profile=hopper.profile.model_copy(update={"arch": "arm64"}),
    )
    assert any("not built for arm64" in f.message for f in _errors(on_arm, "arch"))


def test_nvidia_repo(shipped: Catalog) -> None:
    target = target_for(shipped, *GB200)
    debian_arm = replace(target, os=shipped.os["debian12"])
    [finding] = _errors(debian_arm, "nvidia-repo")
    assert "debian12 arm64" in finding.message


def test_fabric_naming(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    stale = replace(
        target,
        stack=_set(
            target.stack,
            driver=_set(target.stack.driver, fabric_manager_package="nvidia-fabric-manager-580"),
        ),
    )
    [finding] = _errors(stale, "fabric-naming")
    assert "renamed at 580" in finding.message
    assert "nvidia-fabricmanager" in finding.fix


def test_fabric_names_by_branch_and_family(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.fabric_packages() == {
        "fabric_manager": "nvidia-fabricmanager",
        "imex": "nvidia-imex",
    }
    on_570 = replace(
        target,
        os=shipped.os["al2023"],
        stack=_set(
            target.stack, driver=_set(target.stack.driver, branch=570, version="570.211.01")
        ),
    )
    assert on_570.fabric_packages() == {
        "fabric_manager": "nvidia-fabric-manager",
        "imex": "nvidia-imex-570",
    }


def test_fabric_layer(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    without = replace(
        target,
        image=_set(target.image, layers=[x for x in target.image.layers if x != "nvidia_fabric"]),
    )
    [finding] = _errors(without, "fabric-layer")
    assert "fabric manager and NVLSM" in finding.message


def test_container_runtime_layer_needs_the_stack_section(shipped: Catalog) -> None:
    target = target_for(shipped, *B200)
    assert _errors(target, "layer-section") == []
    without = replace(target, stack=_set(target.stack, container_runtime=None))
    [finding] = _errors(without, "layer-section")
    assert "no container_runtime section" in finding.message


@pytest.mark.parametrize("layer", sorted(LAYER_SECTIONS))
def test_every_layer_with_a_stack_section_needs_it(shipped: Catalog, layer: str) -> None:
    target = with_enroot(target_for(shipped, *HOPPER))
    section = LAYER_SECTIONS[layer][0]
    without = replace(target, stack=_set(target.stack, **{section: None}))
    [finding] = _errors(without, "layer-section")
    assert f"enables the {layer} layer" in finding.message and f"no {section} section" in (
        finding.message
    )


def test_enroot_layer_needs_packages_for_the_image(shipped: Catalog) -> None:
    target = with_enroot(target_for(shipped, *HOPPER))
    assert _errors(target, "enroot") == []
    without = replace(target, stack=_set(target.stack, enroot=None))
    [finding] = _errors(without, "layer-section")
    assert "no enroot section" in finding.message
    arm = with_enroot(target_for(shipped, *GB200))  # the stack names x86_64 packages only
    [finding] = _errors(arm, "enroot")
    assert finding.message == f"stack {arm.stack.name} names no enroot packages for arm64"


def test_dnf_os_takes_only_the_layers_with_a_dnf_path(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert _errors(target, "dnf-layers") == []
    al2023 = replace(target, os=shipped.os["al2023"])
    [finding] = _errors(al2023, "dnf-layers")
    assert finding.message.startswith("al2023 uses dnf, and the layers efa, aws_ofi_nccl, ")
    assert "nvidia_driver" not in finding.message.split("(")[0]
    driver_only = replace(
        al2023,
        image=_set(
            al2023.image, layers=["base", "nvidia_driver", "nvidia_fabric", "image_cleanup"]
        ),
    )
    assert _errors(driver_only, "dnf-layers") == []


def test_known_bad_driver_595_efa_gb200(shipped: Catalog) -> None:
    target = target_for(shipped, *GB200)
    assert target.stack.driver.branch == 595 and target.stack.efa is not None
    # the shipped GB200 stack: 595 with EFA 1.51, as AWS's own GB200 AMIs pair them
    assert _errors(target, "known-bad") == []
    old_efa = replace(
        target,
        stack=_set(target.stack, efa=_set(target.stack.efa, installer_version="1.47.0")),
    )
    [finding] = _errors(old_efa, "known-bad")
    assert "driver-595-efa-gb200" in finding.message
    assert "1.50.0 or newer" in finding.fix and "580" in finding.fix
    no_efa = replace(
        old_efa, image=_set(old_efa.image, layers=[x for x in old_efa.image.layers if x != "efa"])
    )
    assert _errors(no_efa, "known-bad") == []


def test_known_bad_needs_a_condition() -> None:
    with pytest.raises(ValueError, match="at least one condition"):
        KnownBad(id="x", when=KnownBadWhen(), message="m", fix="f", source="s")


def test_artifact_unverified(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    bare = Artifact(url="https://example.com/x.tar.gz", sha256="unknown", source="nowhere")
    unverified = replace(
        target, stack=_set(target.stack, artifacts={**target.stack.artifacts, "extra": bare})
    )
    [finding] = _errors(unverified, "artifact-unverified")
    assert "'extra'" in finding.message
    assert "--allow-unverified" in finding.fix
    [allowed] = _findings(unverified, "artifact-unverified", allow_unverified=True)
    assert allowed.severity == "warning"


def test_layer_gating(shipped: Catalog) -> None:
    target = target_for(shipped, *B300)
    no_driver = replace(
        target,
        image=_set(target.image, layers=["base", "image_cleanup"]),
        stack=_set(target.stack, driver=_set(target.stack.driver, branch=550, version="550.1")),
    )
    assert _errors(no_driver, "driver-floor") == []


def _lock_target(shipped: Catalog, tmp_path: Path, **header: str) -> Target:
    """HOPPER with its catalog at tmp_path: the shipped locks copied there, the train lock's
    header changed as given."""
    target = replace(target_for(shipped, *HOPPER), catalog_root=tmp_path)
    assert target.stack.frameworks is not None
    for name, environment in target.stack.frameworks.environments.items():
        relative = environment.locks["x86_64"]
        lock = read_lock(shipped.root / relative)
        if name == "train":
            lock = Lock(lock.header.model_copy(update=header), lock.requirements)
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(render_lock(lock), encoding="utf-8")
    return target


def _train_lock(target: Target) -> Path:
    assert target.stack.frameworks is not None
    return target.catalog_root / target.stack.frameworks.environments["train"].locks["x86_64"]


def test_locks_copied_catalog_passes(shipped: Catalog, tmp_path: Path) -> None:
    assert _findings(_lock_target(shipped, tmp_path), "locks") == []


def test_locks_missing_names_the_command(shipped: Catalog, tmp_path: Path) -> None:
    target = replace(target_for(shipped, *HOPPER), catalog_root=tmp_path)
    errors = _errors(target, "locks")
    assert target.stack.frameworks is not None
    assert len(errors) == len(target.stack.frameworks.environments)
    assert f"{tmp_path}/locks/" in errors[0].message and "does not exist" in errors[0].message
    assert f"nodeforge lock {target.stack.name} --environment " in errors[0].fix


def test_locks_none_for_the_arch(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert target.stack.frameworks is not None
    train = target.stack.frameworks.environments["train"]
    environments = {**target.stack.frameworks.environments, "train": _set(train, locks={})}
    no_lock = replace(
        target,
        stack=_set(
            target.stack, frameworks=_set(target.stack.frameworks, environments=environments)
        ),
    )
    [finding] = _errors(no_lock, "locks")
    assert (
        "environment train of stack" in finding.message and "no lock for x86_64" in finding.message
    )
    assert "locks.x86_64: locks/" in finding.fix


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"torch_variant": "cu130"}, "lock is for torch variant cu130, the stack wants cu132"),
        ({"python": "3.11"}, "lock is for Python 3.11, the stack wants 3.12"),
        ({"platform": "manylinux_2_34_aarch64"}, "platform manylinux_2_34_aarch64, not x86_64"),
    ],
)
def test_locks_made_for_something_else(
    shipped: Catalog, tmp_path: Path, header: dict[str, str], message: str
) -> None:
    target = _lock_target(shipped, tmp_path, **header)
    [finding] = _errors(target, "locks")
    assert message in finding.message
    assert str(_train_lock(target)) in finding.message
    assert "nodeforge lock hopper-" in finding.fix and "--environment train" in finding.fix


@pytest.mark.parametrize(
    ("name", "version", "message"),
    [
        ("torch", "2.15.0+cu132", "the locked torch is 2.15.0+cu132, the stack wants 2.15.0"),
        ("megatron-core", "0.1.0", "pins megatron-core 0.1.0, the stack 0."),
    ],
)
def test_locks_pin_other_versions(
    shipped: Catalog, tmp_path: Path, name: str, version: str, message: str
) -> None:
    target = _lock_target(shipped, tmp_path)
    path = _train_lock(target)
    lock = read_lock(path)
    changed = tuple(
        r.model_copy(update={"version": version}) if r.name == name else r
        for r in lock.requirements
    )
    path.write_text(render_lock(Lock(lock.header, changed)), encoding="utf-8")
    [finding] = _errors(target, "locks")
    assert message in finding.message


def test_locks_not_a_lock(shipped: Catalog, tmp_path: Path) -> None:
    target = _lock_target(shipped, tmp_path)
    _train_lock(target).write_text("torch==2.15.0\n", encoding="utf-8")
    [finding] = _errors(target, "locks")
    assert "not a nodeforge lock" in finding.message


def test_an_environment_s_own_torch_is_judged(shipped: Catalog) -> None:
    """vLLM's torch is not the stack's: its variant must cover the GPU too."""
    target = target_for(shipped, *B200)
    assert target.stack.frameworks is not None
    serve = target.stack.frameworks.environments["serve"]
    assert serve.pytorch is not None
    environments = {
        **target.stack.frameworks.environments,
        "serve": _set(serve, pytorch=_set(serve.pytorch, variant="cu126")),
    }
    cu126 = replace(
        target,
        stack=_set(
            target.stack, frameworks=_set(target.stack.frameworks, environments=environments)
        ),
    )
    [finding] = _errors(cu126, "torch-sm")
    assert "cu126" in finding.message and "sm_100" in finding.message


def _tools_lock(target: Target) -> Path:
    return target.catalog_root / "locks" / "nodeforge-tools" / "py3.12-x86_64.txt"


def test_node_tools_lock(shipped: Catalog, tmp_path: Path) -> None:
    target = target_for(shipped, *HOPPER)
    assert _findings(target, "node-tools-lock") == []
    elsewhere = replace(target, catalog_root=tmp_path)
    [missing] = _errors(elsewhere, "node-tools-lock")
    assert f"{_tools_lock(elsewhere)} of the node tools" in missing.message
    assert "python -m nodeforge.node_tools lock --python 3.12 --arch x86_64" in missing.fix
    lock = read_lock(_tools_lock(target))
    _tools_lock(elsewhere).parent.mkdir(parents=True)
    _tools_lock(elsewhere).write_text(
        render_lock(Lock(lock.header.model_copy(update={"python": "3.11"}), lock.requirements)),
        encoding="utf-8",
    )
    [other] = _errors(elsewhere, "node-tools-lock")
    assert "was made for Python 3.11, the image's tools run on 3.12" in other.message
    _tools_lock(elsewhere).write_text("pydantic==2.14.4\n", encoding="utf-8")
    [broken] = _errors(elsewhere, "node-tools-lock")
    assert f"the node tools' lock {_tools_lock(elsewhere)}: " in broken.message
    off = replace(elsewhere, image=_set(target.image, layers=["base", "image_cleanup"]))
    assert _findings(off, "node-tools-lock") == []


def test_dcgm_missing_is_a_warning(shipped: Catalog) -> None:
    target = target_for(shipped, *HOPPER)
    assert _findings(target, "dcgm") == []
    without = replace(target, stack=_set(target.stack, dcgm=None))
    [finding] = _findings(without, "dcgm")
    assert finding.severity == "warning"
    assert "no dcgm section" in finding.message and "dcgmi diag" in finding.message
    assert "dcgm.version" in finding.fix
