"""Per-GPU bf16 matmul TFLOP/s and device-to-device copy GB/s, measured with PyTorch.

Runs on the node (python - < gpu_bench.py) and prints one JSON line per GPU. Sizes match the
profile baselines' message_size: 8192^3 matmul, 1 GiB copies.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch

N = 8192
COPY_BYTES = 1 << 30
WARMUP, ITERS = 5, 20


def timed(work: Callable[[], object], device: torch.device) -> float:
    """Seconds per call, by CUDA events after a warmup."""
    for _ in range(WARMUP):
        work()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        work()
    end.record()
    torch.cuda.synchronize(device)
    return float(start.elapsed_time(end)) / 1000 / ITERS


def measure(index: int) -> dict[str, float]:
    device = torch.device("cuda", index)
    a = torch.randn(N, N, dtype=torch.bfloat16, device=device)
    b = torch.randn(N, N, dtype=torch.bfloat16, device=device)
    tflops = 2 * N**3 / timed(lambda: torch.matmul(a, b), device) / 1e12
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    # a copy reads and writes every byte
    gbps = 2 * COPY_BYTES / timed(lambda: dst.copy_(src), device) / 1e9
    return {"gpu": index, "bf16_tflops": tflops, "memcpy_gbps": gbps}


def main() -> int:
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch.cuda.is_available() is False"}))
        return 1
    for index in range(torch.cuda.device_count()):
        print(json.dumps(measure(index)), flush=True)
    return 0


sys.exit(main())
