"""GPU acceptance at target stage: nvidia-smi against the profile and stack, then throughput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeforge.acceptance import nvidia_smi_problems
from nodeforge.parsers.dcgmi import DcgmiFailureError, parse_dcgmi_json
from nodeforge.parsers.nvidia_smi import DEFAULT_FIELDS, parse_query_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.layer("nvidia_driver"), pytest.mark.stage("target")]
BENCH = Path(__file__).parent / "scripts" / "gpu_bench.py"


def test_nvidia_smi_matches_profile_and_stack(host: Any, nodeforge: dict[str, Any]) -> None:
    query = host.run(
        "nvidia-smi --query-gpu=%s --format=csv,noheader,nounits", ",".join(DEFAULT_FIELDS)
    )
    records = parse_query_gpu(query.stdout + query.stderr)
    problems = nvidia_smi_problems(
        records, nodeforge["profile"], nodeforge["stack"]["driver"]["version"]
    )
    assert problems == []


def test_persistence_mode_on(host: Any) -> None:
    modes = host.run("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").stdout
    assert modes.split() and set(modes.split()) == {"Enabled"}


# Function scope on purpose: a module-scoped fixture would be set up before the autouse
# fixture that skips the check when the layer, stage or hardware is missing.
@pytest.fixture
def bench(host: Any) -> list[dict[str, Any]]:
    python = "/opt/nodeforge/envs/train/bin/python"
    interpreter = python if host.file(python).exists else "python3"
    run = host.run(f"{interpreter} - <<'NODEFORGE_BENCH'\n{BENCH.read_text()}\nNODEFORGE_BENCH")
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.rc == 0 and lines, f"gpu_bench failed: {run.stdout} {run.stderr}"
    return lines


@pytest.mark.parametrize(
    ("field", "baseline"),
    [("bf16_tflops", "bf16_matmul_tflops_per_gpu"), ("memcpy_gbps", "device_memcpy_gbps_per_gpu")],
)
def test_throughput_per_gpu(
    bench: list[dict[str, Any]], judge: Any, record_property: Any, field: str, baseline: str
) -> None:
    verdicts = judge(baseline, [float(gpu[field]) for gpu in bench])
    record_property("per_gpu", [v.properties() for v in verdicts])
    slow = [
        f"GPU {gpu['gpu']}: {v.note}" for gpu, v in zip(bench, verdicts, strict=True) if not v.ok
    ]
    assert slow == []


def test_dcgm_diagnostics(host: Any, pytestconfig: pytest.Config) -> None:
    if not host.exists("dcgmi"):
        # not run, not passed: the GPUs' health is unknown (nodeforge.report)
        pytest.skip("dcgmi is not installed on this node")
    level = pytestconfig.getoption("--dcgm-level")
    run = host.run("dcgmi diag -r %s --json", str(level))
    try:
        diag = parse_dcgmi_json(run.stdout)
    except DcgmiFailureError as exc:
        pytest.fail(f"dcgmi diag -r {level} did not complete: {exc}")
    failed = [
        f"{name}: {'; '.join(note.text for note in diag.test(name).all_notes)}"
        for name in diag.failed_tests
    ]
    assert failed == [], failed
    # every test skipped is not a pass: the GPUs' health is unknown
    assert diag.passed, f"dcgmi diag -r {level} ran no test ({diag.verdict})"
