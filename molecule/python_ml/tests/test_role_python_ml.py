"""The training environment the role leaves: the lock's versions, a CPU torch, gloo collectives;
and locks that must not install (refused by the rules, wrong hash) failing before anything is
left."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.models import Framework
from nodeforge.local.playbook import expect_failure
from nodeforge.lock import FRAMEWORK_DISTRIBUTIONS, canonical, read_lock, render_lock
from nodeforge.probes import framework_report, run_python

REPO = Path(__file__).resolve().parents[3]
LOCK = REPO / "images" / "locks" / "ci" / "train.txt"
PYTHON = "/opt/nodeforge/envs/train/bin/python"
FRAMEWORKS: tuple[Framework, ...] = ("pytorch", "megatron_core", "transformers", "accelerate")

ALL_REDUCE = """
import os, sys, tempfile
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    if value.item() != world * (world + 1) / 2:
        sys.exit(f"rank {rank}: all_reduce gave {value.item()}")

if __name__ == "__main__":
    init = tempfile.mkdtemp() + "/init"
    mp.spawn(rank_main, args=(2, init), nprocs=2, join=True)
    print("all_reduce ok: 3.0")
"""


def test_frameworks_import_at_the_locked_versions(host: Any) -> None:
    pairs = [FRAMEWORK_DISTRIBUTIONS[f][::-1] for f in FRAMEWORKS]
    found = framework_report(host, PYTHON, pairs)
    locked = read_lock(LOCK).versions()
    for _module, dist in pairs:
        assert found[dist] == locked[canonical(dist)], dist
    # the CPU build: no CUDA runtime, as the lock's variant says
    assert read_lock(LOCK).header.torch_variant == "cpu"
    assert found["torch.version.cuda"] is None


def test_installed_set_is_the_lock(host: Any) -> None:
    listed = json.loads(host.run(f"{PYTHON} -m pip list --format=json").stdout)
    installed = {canonical(p["name"]): p["version"] for p in listed}
    locked = read_lock(LOCK).versions()
    assert {n: installed.get(n) for n in locked} == locked
    assert set(installed) - set(locked) <= {"pip", "setuptools", "wheel"}


def test_gloo_all_reduce_two_processes(host: Any) -> None:
    run = run_python(host, PYTHON, ALL_REDUCE)
    assert run.rc == 0, run.stdout + run.stderr
    assert "all_reduce ok: 3.0" in run.stdout


def _negative(host: Any, lock: Path, **role_vars: Any) -> str:
    """Run negative.yml against the scenario's container; the role must fail. Its output."""
    name = host.backend.name
    extra = {
        "python_ml_python": "3.11",
        "python_ml_prefix": "/opt/nodeforge/negative",
        "python_ml_environments": [
            {"name": "train", "lock": str(lock), "index_urls": [os.environ["NODEFORGE_TEST_PYPI"]]}
        ],
        "python_ml_compile_bytecode": False,
        **role_vars,
    }
    playbook = Path(__file__).resolve().parents[1] / "negative.yml"
    output = expect_failure(playbook, name, extra, repo_root=REPO)
    assert not host.file("/opt/nodeforge/negative/train").exists
    return output


def test_a_refused_lock_stops_it_in_preflight(host: Any) -> None:
    """Rule `locks` judges the lock (tests/test_rules.py); its error, as render hands it over,
    stops the role before pip."""
    refusal = f"the lock {LOCK} of environment train: lock is for torch variant cpu, not cu130"
    output = _negative(host, LOCK, python_ml_refusals=[refusal])
    assert f"{refusal} Nothing was installed." in output
    assert "install the lock" not in output  # never reached pip


@pytest.mark.skipif("NODEFORGE_TEST_PYPI" not in os.environ, reason="needs the loopback index")
def test_hash_mismatch_installs_nothing(host: Any, tmp_path: Path) -> None:
    lock = read_lock(LOCK)
    # torch as locked (preflight wants it), one small wheel whose hash the index cannot match
    torch = next(r for r in lock.requirements if r.name == "torch")
    small = next(r for r in lock.requirements if r.name == "mdurl")
    forged = small.model_copy(update={"hashes": ["0" * 64]})
    path = tmp_path / "forged.txt"
    path.write_text(render_lock(type(lock)(lock.header, (torch, forged))), encoding="utf-8")
    output = _negative(host, path)
    assert f"does not match its hash in {path}; pip installed nothing" in output
    assert f"Expected sha256 {'0' * 64}" in output
    assert f"Got {small.hashes[0]}" in output
    assert "The new environment was removed." in output
