"""Acceptance verdicts from parsed outputs: the target-stage logic, exercised without GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.acceptance import (
    baseline_verdict,
    message_bytes,
    nccl_path_problems,
    nvidia_smi_problems,
)
from nodeforge.catalog.loader import Catalog
from nodeforge.parsers.nccl_tests import parse_nccl_debug
from nodeforge.parsers.nvidia_smi import parse_query_gpu
from tests.conftest import REPO

OUTPUTS = REPO / "tests" / "fixtures" / "outputs"
# Constructed in nvidia-smi's --format=csv,noheader,nounits layout for DEFAULT_FIELDS: a
# healthy p5 GPU (idle bit 0x1 set) on the hopper stack's driver.
H100 = "{i}, NVIDIA H100 80GB HBM3, 81559, 580.95.05, Enabled, No, 0x0000000000000001, 0x233010DE"


def _p5(shipped: Catalog) -> dict[str, Any]:
    profile: dict[str, Any] = shipped.profiles["p5.48xlarge"].model_dump(mode="json")
    return profile


def _smi(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def test_healthy_p5_has_no_problems(shipped: Catalog) -> None:
    records = parse_query_gpu(_smi([H100.format(i=i) for i in range(8)]))
    assert nvidia_smi_problems(records, _p5(shipped), "580.95.05") == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (H100.replace("81559", "40960"), "has 40960 MiB"),
        (H100.replace("580.95.05", "570.211.01"), "runs driver 570.211.01"),
        (H100.replace("Enabled", "Disabled"), "ECC is not enabled"),
        (H100.replace(", No,", ", Yes,"), "retired pages pending"),
        (H100.replace("0x0000000000000001", "0x0000000000000040"), "throttled (reasons 0x40)"),
        (H100.replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), "not a H100"),
        (H100.replace("0x233010DE", "0x20B210DE"), "PCI device 0x20b2"),
    ],
)
def test_each_finding(shipped: Catalog, line: str, problem: str) -> None:
    records = parse_query_gpu(_smi([line.format(i=0)] + [H100.format(i=i) for i in range(1, 8)]))
    problems = nvidia_smi_problems(records, _p5(shipped), "580.95.05")
    assert len(problems) == 1
    assert problem in problems[0]


def test_missing_gpus(shipped: Catalog) -> None:
    records = parse_query_gpu(_smi([H100.format(i=i) for i in range(7)]))
    assert nvidia_smi_problems(records, _p5(shipped), "580.95.05") == [
        "7 GPUs visible, the profile has 8"
    ]


def test_baseline_with_provenance(shipped: Catalog) -> None:
    baseline = shipped.profiles["p5.48xlarge"].baselines.nccl_all_reduce_multi_node
    verdict = baseline_verdict(450.0, baseline.model_dump())
    assert verdict.ok
    assert verdict.threshold == pytest.approx(487.1 * 0.85)
    low = baseline_verdict(300.0, baseline.model_dump())
    assert not low.ok
    assert "awsome-distributed-training" in low.note


def test_unknown_baseline_records_without_judging(shipped: Catalog) -> None:
    baseline = shipped.profiles["p6-b300.48xlarge"].baselines.bf16_matmul_tflops_per_gpu
    verdict = baseline_verdict(1234.5, baseline.model_dump())
    assert verdict.ok
    assert verdict.threshold is None
    assert verdict.properties()["measured"] == 1234.5
    assert "no baseline yet" in verdict.note


def test_efa_path_with_gpudirect() -> None:
    path = parse_nccl_debug((OUTPUTS / "nccl_debug_efa_libfabric_gdrdma.log").read_text())
    assert nccl_path_problems(path, expect_efa=True, require_gdr=True) == []


def test_socket_fallback_is_found() -> None:
    path = parse_nccl_debug((OUTPUTS / "nccl_debug_socket_fallback.log").read_text())
    problems = nccl_path_problems(path, expect_efa=True, require_gdr=True)
    assert problems[0] == "NCCL fell back to TCP sockets (Using network Socket)"
    assert "the aws-ofi-nccl plugin was not loaded (no NET/OFI lines)" in problems


def test_no_gdr_on_an_old_plugin_log() -> None:
    path = parse_nccl_debug((OUTPUTS / "nccl_debug_aws_libfabric_mpirun_prefix.log").read_text())
    problems = nccl_path_problems(path, expect_efa=True, require_gdr=True)
    assert any("GPUDirect RDMA is not in use" in p for p in problems)


@pytest.mark.parametrize(
    ("text", "size"), [("16GiB", 16 << 30), ("1GiB", 1 << 30), ("8M", 8 << 20), ("512", 512)]
)
def test_message_bytes(text: str, size: int) -> None:
    assert message_bytes(text) == size


def test_every_shipped_message_size_parses(shipped: Catalog) -> None:
    for profile in shipped.profiles.values():
        for baseline in profile.baselines.model_dump().values():
            if baseline["message_size"] and "x" not in baseline["message_size"]:
                assert message_bytes(baseline["message_size"]) > 0
