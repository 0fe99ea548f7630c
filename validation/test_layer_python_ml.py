"""python_ml layer: each environment against its lock in the catalog, then torch on GPUs.

The expected versions are the catalog's lock files, where the resolved vars say the build took
them from (`python_ml_environments`: the catalog in use, a `--catalog` copy included), never
the copy the role leaves beside an environment.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.models import Framework
from nodeforge.lock import FRAMEWORK_DISTRIBUTIONS, Lock, canonical, read_lock, variant_cuda
from nodeforge.probes import framework_report, run_python
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("python_ml")
DEFAULT_PREFIX = "/opt/nodeforge/envs"

GPUS = """
import json, torch
print(json.dumps({"available": torch.cuda.is_available(), "count": torch.cuda.device_count()}))
"""

ALL_REDUCE = """
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    value = torch.ones(1 << 20, device="cuda") * (rank + 1)
    dist.all_reduce(value)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    expected = world * (world + 1) / 2
    if not bool((value == expected).all()):
        sys.exit(f"rank {rank}: all_reduce gave {value[0].item()}, expected {expected}")

if __name__ == "__main__":
    world = torch.cuda.device_count()
    mp.spawn(rank_main, args=(world, 29533), nprocs=world, join=True)
    print("all_reduce ok", world)
"""


def _environments(nodeforge: dict[str, Any]) -> dict[str, dict[str, Any]]:
    frameworks = nodeforge["stack"]["frameworks"] or {}
    environments: dict[str, dict[str, Any]] = frameworks.get("environments", {})
    return environments


def _prefix(resolved: dict[str, Any]) -> str:
    prefix: str = resolved.get("python_ml_prefix", DEFAULT_PREFIX)
    return prefix


def _lock(resolved: dict[str, Any], name: str) -> Lock:
    locks = {e["name"]: e["lock"] for e in resolved.get("python_ml_environments", [])}
    assert name in locks, f"environment {name} has no lock for this architecture in the stack"
    return read_lock(Path(locks[name]))


def _report(host: Any, python: str, frameworks: list[Framework]) -> dict[str, Any]:
    pairs = [FRAMEWORK_DISTRIBUTIONS[f][::-1] for f in frameworks]
    return framework_report(host, python, pairs)


@pytest.fixture
def reports(host: Any, resolved: dict[str, Any], nodeforge: dict[str, Any]) -> dict[str, Any]:
    """Per environment: what imports report (versions, torch's CUDA and NCCL), and the lock."""
    environments = _environments(nodeforge)
    assert environments, "the python_ml layer is on but the stack names no environments"
    return {
        name: (
            _report(host, f"{_prefix(resolved)}/{name}/bin/python", environment["frameworks"]),
            _lock(resolved, name),
        )
        for name, environment in environments.items()
    }


def test_frameworks_import_at_the_locked_versions(
    reports: dict[str, tuple[dict[str, Any], Lock]], record_property: Any
) -> None:
    declared: dict[str, dict[str, str]] = {}
    actual: dict[str, dict[str, str]] = {}
    for name, (found, lock) in reports.items():
        locked = lock.versions()
        dists = [d for d in found if not d.startswith("torch.")]
        declared[name] = {d: locked.get(canonical(d), "not locked") for d in dists}
        actual[name] = {d: found[d] for d in dists}
    record_property("declared", declared)
    record_property("actual", actual)
    assert actual == declared


def test_torch_variant_is_the_stack_s(
    reports: dict[str, tuple[dict[str, Any], Lock]], nodeforge: dict[str, Any], record_property: Any
) -> None:
    """Each environment's torch is its lock's (rule `locks` held the lock to the catalog's
    torch, PyPI's unlabelled build or a variant index's labelled one) and runs the CUDA of the
    catalog's variant for that environment."""
    frameworks = nodeforge["stack"]["frameworks"]
    environments = _environments(nodeforge)
    variants = {
        name: (environments[name].get("pytorch") or frameworks["pytorch"])["variant"]
        for name in reports
    }
    record_property(
        "declared",
        {n: {"variant": v, "cuda": variant_cuda(v)} for n, v in variants.items()},
    )
    record_property("actual", {n: found["torch.version.cuda"] for n, (found, _) in reports.items()})
    for name, (found, lock) in reports.items():
        assert lock.header.torch_variant == variants[name], f"{name}: {lock.header.torch_variant}"
        assert found["torch"] == lock.versions()["torch"], f"{name}: torch {found['torch']}"
        assert found["torch.version.cuda"] == variant_cuda(variants[name]), name


def _locked_nccl(name: str, lock: Lock) -> str | None:
    """The NCCL torch loads: its wheel's nvidia-nccl-cuXX from the lock, at the CUDA major of the
    lock's torch variant (x.y.z, as torch.cuda.nccl.version() gives it); None for a CPU torch."""
    variant = lock.header.torch_variant
    assert variant is not None, f"{name}: the lock names no torch variant"
    cuda = variant_cuda(variant)
    if cuda is None:
        return None
    distribution = f"nvidia-nccl-cu{cuda.split('.')[0]}"
    version = lock.versions().get(distribution, "")
    release = re.match(r"\d+\.\d+\.\d+", version)
    assert release, f"{name}: the lock has no {distribution} for torch {lock.header.torch_variant}"
    return release.group(0)


def test_torch_carries_the_locked_nccl(
    reports: dict[str, tuple[dict[str, Any], Lock]], record_property: Any
) -> None:
    # torch loads its wheel's NCCL, which may differ from the system's libnccl2 (the one
    # nccl-tests and the EFA plugin use, judged by test_layer_nccl.py against the stack).
    declared = {name: _locked_nccl(name, lock) for name, (_, lock) in reports.items()}
    actual = {name: found["torch.cuda.nccl"] for name, (found, _) in reports.items()}
    record_property("declared", declared)
    record_property("actual", actual)
    assert actual == declared


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_torch_sees_the_profile_gpus(
    host: Any, resolved: dict[str, Any], nodeforge: dict[str, Any], record_property: Any
) -> None:
    expected = nodeforge["profile"]["gpu"]["count"]
    seen = {}
    for name in _environments(nodeforge):
        run = run_python(host, f"{_prefix(resolved)}/{name}/bin/python", GPUS)
        assert run.rc == 0, f"{name}: {run.stderr.strip()[-800:]}"
        seen[name] = json.loads(run.stdout.splitlines()[-1])
    record_property("declared", expected)
    record_property("actual", seen)
    assert seen == {n: {"available": True, "count": expected} for n in seen}


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_nccl_all_reduce_over_all_local_gpus(
    host: Any, resolved: dict[str, Any], nodeforge: dict[str, Any]
) -> None:
    name = next(iter(_environments(nodeforge)))
    run = run_python(host, f"{_prefix(resolved)}/{name}/bin/python", ALL_REDUCE)
    assert run.rc == 0, f"all_reduce failed: {(run.stdout + run.stderr).strip()[-1500:]}"
    assert f"all_reduce ok {nodeforge['profile']['gpu']['count']}" in run.stdout


@pytest.mark.gpu
@pytest.mark.stage("target")
def test_vllm_runs_in_the_serving_environment(
    host: Any, resolved: dict[str, Any], nodeforge: dict[str, Any], record_property: Any
) -> None:
    serving = [n for n, e in _environments(nodeforge).items() if "vllm" in e["frameworks"]]
    if not serving:
        not_applicable("the stack has no environment with vLLM")
    for name in serving:
        run = host.run(f"{_prefix(resolved)}/{name}/bin/vllm --version")
        declared = nodeforge["stack"]["frameworks"]["vllm"]["version"]
        record_property(f"{name}_vllm", {"declared": declared, "actual": run.stdout.strip()})
        assert run.rc == 0, f"{name}: vllm --version: {run.stderr.strip()[-800:]}"
        assert run.stdout.strip().splitlines()[-1] == declared
