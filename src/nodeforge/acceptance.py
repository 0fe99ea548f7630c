"""GPU and NCCL acceptance verdicts: parsed measurements against the profile and the stack.

Pure functions from parsed outputs (nodeforge.parsers) and catalog data to a list of problems,
so that the target-stage checks in validation/ are thin and the logic is tested without GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nodeforge.parsers.nccl_tests import NcclPath
from nodeforge.parsers.nvidia_smi import GpuRecord

# clocks_throttle_reasons.active bits that say nothing is wrong: GPU idle (0x1). Every other
# bit (power cap, thermal slowdown, hardware slowdown...) under a validation load is a finding.
_HARMLESS_THROTTLE = 0x1
# nvidia-smi reports usable memory a little under the EC2 figure (reserved for the driver).
_MEMORY_SLACK = 0.05


_SIZE = re.compile(r"^(\d+)\s*([KMG]?)(?:i?B)?$")
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def message_bytes(text: str) -> int:
    """A baseline's message size ('16GiB', '1GiB', '8M', '512') in bytes, as nccl-tests reads it."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"message size '{text}' is not a number of bytes such as 1GiB or 8M")
    return int(match.group(1)) * _SCALE[match.group(2)]


@dataclass(frozen=True)
class Verdict:
    """A measured value against a baseline. `threshold` is None when no baseline is known."""

    measured: float
    threshold: float | None
    unit: str
    ok: bool
    note: str

    def properties(self) -> dict[str, Any]:
        return {
            "measured": self.measured,
            "threshold": self.threshold,
            "unit": self.unit,
            "note": self.note,
        }


def baseline_verdict(measured: float, baseline: dict[str, Any]) -> Verdict:
    """Pass when `measured` reaches the baseline value less its tolerance.

    A baseline of status `unknown` has no value: the measurement is recorded, nothing is
    asserted, and the note says so, so that the first run on a new instance type sets it.
    """
    unit = str(baseline["unit"])
    if baseline.get("value") is None:
        return Verdict(measured, None, unit, True, "no baseline yet: record this measurement")
    threshold = float(baseline["value"]) * (1 - float(baseline.get("tolerance", 0.1)))
    ok = measured >= threshold
    note = (
        f"{measured:.1f} {unit} {'>=' if ok else '<'} {threshold:.1f} "
        f"({baseline['value']} less {float(baseline.get('tolerance', 0.1)):.0%}; "
        f"{baseline.get('source', 'no source')})"
    )
    return Verdict(measured, round(threshold, 3), unit, ok, note)


def nvidia_smi_problems(
    records: tuple[GpuRecord, ...], profile: dict[str, Any], driver_version: str
) -> list[str]:
    """What `nvidia-smi --query-gpu` shows that the profile and the stack say should not be."""
    gpu = profile["gpu"]
    problems = []
    if len(records) != gpu["count"]:
        problems.append(f"{len(records)} GPUs visible, the profile has {gpu['count']}")
    expected_mib = float(gpu["memory_gib"]) * 1024
    for record in records:
        index = record.value("index")
        name = str(record.value("name") or "")
        if gpu["model"].lower() not in name.lower():
            problems.append(f"GPU {index} is '{name}', not a {gpu['model']}")
        memory = record.value("memory.total")
        if (
            isinstance(memory, int | float)
            and abs(memory - expected_mib) > expected_mib * _MEMORY_SLACK
        ):
            problems.append(
                f"GPU {index} has {memory} MiB, the profile says {expected_mib:.0f} MiB"
            )
        if str(record.value("driver_version")) != driver_version:
            problems.append(
                f"GPU {index} runs driver {record.value('driver_version')}, "
                f"the stack pins {driver_version}"
            )
        if record.value("ecc.mode.current") is not True:
            problems.append(f"GPU {index}: ECC is not enabled")
        if record.value("retired_pages.pending") is True:
            problems.append(f"GPU {index}: retired pages pending (reboot or replace)")
        throttle = record.value("clocks_throttle_reasons.active")
        if isinstance(throttle, int) and throttle & ~_HARMLESS_THROTTLE:
            problems.append(f"GPU {index}: throttled (reasons {throttle:#x})")
        device = record.value("pci.device_id")
        if isinstance(device, int):
            device_id = f"{device >> 16:#06x}"
            if device_id not in gpu["pci_device_ids"]:
                problems.append(f"GPU {index}: PCI device {device_id} is not the profile's")
    return problems


def nccl_path_problems(path: NcclPath, *, expect_efa: bool, require_gdr: bool) -> list[str]:
    """The path NCCL took: plugin loaded, provider efa, GPUDirect RDMA, no socket fallback."""
    problems = []
    if path.socket_fallback:
        problems.append("NCCL fell back to TCP sockets (Using network Socket)")
    if expect_efa:
        if not path.ofi_plugin_loaded:
            problems.append("the aws-ofi-nccl plugin was not loaded (no NET/OFI lines)")
        if path.provider != "efa":
            problems.append(f"libfabric provider is {path.provider or 'unknown'}, not efa")
        if require_gdr and path.gpudirect_rdma is not True:
            problems.append("GPUDirect RDMA is not in use (no /GDRDMA on the net channels)")
    return problems
