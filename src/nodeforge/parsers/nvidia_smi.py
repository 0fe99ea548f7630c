"""`nvidia-smi --query-gpu=... --format=csv,noheader[,nounits]` output and its failure texts.

nvidia-smi prints one line per GPU, the fields in the order they were asked for, separated by
", ". A field the GPU cannot report reads `[N/A]` (`[Not Supported]` on older drivers); modes read
`Enabled`/`Disabled`; bitmasks such as `clocks_throttle_reasons.active` (renamed
`clocks_event_reasons.active` in newer drivers) read as hex. Without `nounits` numbers carry a
unit (`52 %`, `81559 MiB`), which is dropped here.

When there is nothing to query nvidia-smi prints one of two texts instead, each raised here as
its own exception: `No devices were found` (driver loaded, no GPU bound) and
`NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver...` (no driver).
"""

from __future__ import annotations

import re
from typing import Literal

from nodeforge.parsers.record import Record

DEFAULT_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "memory.total",
    "driver_version",
    "ecc.mode.current",
    "retired_pages.pending",
    "clocks_throttle_reasons.active",
    "pci.device_id",
)
"""The query the validation suite runs (use `clocks_event_reasons.active` on driver >= 535)."""


class ParseError(ValueError):
    """Text that is neither nvidia-smi CSV for the given fields nor a known failure text."""


class NvidiaSmiFailureError(Exception):
    """nvidia-smi ran but reported that it could not query any GPU."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


class NoDevicesFoundError(NvidiaSmiFailureError):
    """`No devices were found`: the driver answered but no GPU is bound to it."""


class DriverUnreachableError(NvidiaSmiFailureError):
    """`NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver`."""


Scalar = bool | int | float | str


class FieldValue(Record):
    raw: str
    status: Literal["ok", "not_available", "not_supported"]
    value: Scalar | None


class GpuRecord(Record):
    """One GPU line, its values keyed by the query field names."""

    fields: tuple[tuple[str, FieldValue], ...]

    def field(self, name: str) -> FieldValue:
        for key, value in self.fields:
            if key == name:
                return value
        known = ", ".join(key for key, _ in self.fields)
        raise ParseError(f"field '{name}' was not queried; fields: {known}")

    def value(self, name: str) -> Scalar | None:
        return self.field(name).value


_NO_DEVICES = "No devices were found"
_NO_DRIVER = "couldn't communicate with the NVIDIA driver"
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+\.\d+$")
_HEX = re.compile(r"^0x[0-9A-Fa-f]+$")
_WITH_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:%|MiB|W|MHz|C|KiB|GiB)$")
_BOOL = {"enabled": True, "disabled": False, "yes": True, "no": False}


def parse_value(raw: str) -> FieldValue:
    """Type one CSV cell: `[N/A]`, `[Not Supported]`, modes, hex, numbers (units dropped)."""
    text = raw.strip()
    bare = text.strip("[]").lower()
    if bare in ("n/a", "unknown error"):
        return FieldValue(raw=text, status="not_available", value=None)
    if bare == "not supported":
        return FieldValue(raw=text, status="not_supported", value=None)
    value: Scalar
    if text.lower() in _BOOL:
        value = _BOOL[text.lower()]
    elif _HEX.match(text):
        value = int(text, 16)
    elif _INT.match(text):
        value = int(text)
    elif _FLOAT.match(text):
        value = float(text)
    elif m := _WITH_UNIT.match(text):
        number = m.group(1)
        value = float(number) if "." in number else int(number)
    else:
        value = text
    return FieldValue(raw=text, status="ok", value=value)


def check_failure(output: str) -> None:
    """Raise `NoDevicesFoundError` or `DriverUnreachableError` for those two texts."""
    if _NO_DRIVER in output:
        raise DriverUnreachableError(
            "nvidia-smi could not communicate with the NVIDIA driver (driver not loaded)", output
        )
    if _NO_DEVICES in output:
        raise NoDevicesFoundError("nvidia-smi found no GPU devices", output)


def parse_query_gpu(output: str, fields: tuple[str, ...] = DEFAULT_FIELDS) -> tuple[GpuRecord, ...]:
    """Parse `--query-gpu=<fields> --format=csv,noheader[,nounits]` into one record per GPU."""
    check_failure(output)
    records: list[GpuRecord] = []
    for number, line in enumerate(output.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ParseError(
                f"line {number}: {len(cells)} values for {len(fields)} queried fields "
                f"({', '.join(fields)}): {line!r}"
            )
        pairs = zip(fields, cells, strict=True)
        records.append(GpuRecord(fields=tuple((name, parse_value(cell)) for name, cell in pairs)))
    if not records:
        raise ParseError("nvidia-smi printed no GPU lines and no known failure text")
    return tuple(records)
