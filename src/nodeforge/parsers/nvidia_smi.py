"""nvidia-smi output: `--query-*` CSV, the default table, `-q`, `topo -m` and its failure texts.

Learned from NVIDIA's nvidia-smi(1) man page and `--help-query-gpu` text, and from the real
outputs listed in tests/fixtures/outputs/nvidia_smi/SOURCES.md (drivers 331 to 610, Linux and
Windows, Kepler to Blackwell, MIG and GPUs that fell off the bus). Formats read:

- `--query-gpu=... --format=csv[,noheader][,nounits]` (and any other `--query-*=...` CSV such as
  `--query-remapped-rows`): one line per GPU, fields in the asked order, separated by ", ".
  Without `noheader` the first line names the fields, with units in brackets
  (`memory.total [MiB]`); without `nounits` numbers carry a unit (`52 %`, `81559 MiB`, `0 us`),
  which is dropped here. A field the GPU cannot report reads `[N/A]`, `[Not Supported]`,
  `[Unknown Error]` or another bracketed reason; modes read `Enabled`/`Disabled`, `Yes`/`No`,
  `Active`/`Not Active`; bitmasks such as `clocks_throttle_reasons.active` (renamed
  `clocks_event_reasons.active` in driver 535) read as hex. Both names answer for each other.
- The default table (`nvidia-smi` without arguments): the header line (`NVIDIA-SMI`, `Driver
  Version`, `CUDA Version`; `KMD Version` and `CUDA UMD Version` from driver 610), one block of
  two or three rows per GPU (`Persistence-M`, or `TCC/WDDM` / `Driver-Model` on Windows), with
  `ERR!` in the cells the driver could not read and `N/A` in those the GPU does not have; the
  narrow pre-2023 layout, the wider 535/545+ ones and the `+---+` separator of 580+; the
  `MIG devices:` table and the `Processes:` table (with or without the GI/CI columns).
- `nvidia-smi -q` (and `-q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,...`): the indented `key : value`
  tree under `==============NVSMI LOG==============`, one `GPU 00000000:3B:00.0` section per GPU,
  read into a generic tree with typed accessors for the health-relevant values, whichever
  generation of names the driver uses (`SRAM/DRAM Uncorrectable` or `Single/Double Bit`,
  `Power Draw` or `Average/Instantaneous Power Draw`, `Clocks Throttle/Event Reasons`).
- `nvidia-smi topo -m` (`-mp`): the device matrix (`GPU0`.., `NIC0`.. or `mlx5_0` columns, then
  `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID`), tab-separated as printed or space-aligned as
  pasted, with the ANSI underline of the header removed, the `Legend:` and the `NIC Legend:`.
- The texts nvidia-smi prints instead of output, each raised as its own `NvidiaSmiFailureError`
  subclass: no devices, no driver, libnvidia-ml.so missing, `Failed to initialize NVML: ...`
  (driver/library version mismatch, Unknown Error, Insufficient Permissions, access blocked by
  the operating system) and `Unable to determine the device handle for GPU ...: ...` (GPU is
  lost, Unknown Error, Not Found, requires reset, insufficient power). Printed beside output for
  the other GPUs, they are kept in the result's `failures` instead of raised.

`parse_nvidia_smi(text)` tells these apart and returns the matching record, tagged by `kind`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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

REMAPPED_ROWS_FIELDS: tuple[str, ...] = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
"""`--query-remapped-rows=...`: row remapping replaces retired pages on Ampere and later."""


class ParseError(ValueError):
    """Text that is not nvidia-smi output of the expected format nor a known failure text."""


# --- failure texts --------------------------------------------------------------------------

FailureKind = Literal[
    "no_devices",
    "driver_unreachable",
    "library_not_found",
    "version_mismatch",
    "nvml_unknown_error",
    "insufficient_permissions",
    "gpu_access_blocked",
    "nvml_init",
    "gpu_lost",
    "gpu_requires_reset",
    "gpu_insufficient_power",
    "gpu_not_found",
    "gpu_unknown_error",
    "device_handle",
]


class FailureNotice(Record):
    """One failure text nvidia-smi printed; `bus_id` is set for the per-GPU handle errors."""

    kind: FailureKind
    text: str
    bus_id: str | None = None
    reason: str | None = None
    library_version: str | None = None


class NvidiaSmiFailureError(Exception):
    """nvidia-smi ran but reported that it could not query the GPUs (or one of them)."""

    def __init__(self, message: str, output: str, notice: FailureNotice | None = None) -> None:
        super().__init__(message)
        self.output = output
        self.notice = notice


class NoDevicesFoundError(NvidiaSmiFailureError):
    """`No devices were found`: the driver answered but no GPU is bound to it."""


class DriverUnreachableError(NvidiaSmiFailureError):
    """`NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver`."""


class NvmlLibraryNotFoundError(NvidiaSmiFailureError):
    """`NVIDIA-SMI couldn't find libnvidia-ml.so library in your system`."""


class NvmlInitError(NvidiaSmiFailureError):
    """`Failed to initialize NVML: <reason>`, for a reason without a class of its own."""


class DriverLibraryMismatchError(NvmlInitError):
    """`Failed to initialize NVML: Driver/library version mismatch` (kernel module != libs)."""

    @property
    def nvml_library_version(self) -> str | None:
        """`NVML library version: 570.124`, printed on the next line by newer drivers."""
        return self.notice.library_version if self.notice else None


class NvmlUnknownError(NvmlInitError):
    """`Failed to initialize NVML: Unknown Error` (in containers: device access was lost)."""


class InsufficientPermissionsError(NvmlInitError):
    """`Failed to initialize NVML: Insufficient Permissions` (no access to /dev/nvidia*)."""


class GpuAccessBlockedError(NvmlInitError):
    """`Failed to initialize NVML: GPU access blocked by the operating system` (WSL, VMs)."""


class DeviceHandleError(NvidiaSmiFailureError):
    """`Unable to determine the device handle for GPU <bus id>: <reason>`: one GPU unusable."""

    @property
    def bus_id(self) -> str | None:
        return self.notice.bus_id if self.notice else None


class GpuLostError(DeviceHandleError):
    """`... GPU is lost. Reboot the system to recover this GPU` (fell off the bus, Xid 79)."""


class GpuUnknownError(DeviceHandleError):
    """`... : Unknown Error` (typically a GPU that stopped answering)."""


class GpuNotFoundError(DeviceHandleError):
    """`... : Not Found` (the driver did not initialise the GPU, e.g. GSP firmware failure)."""


class GpuRequiresResetError(DeviceHandleError):
    """`... : GPU requires reset`."""


class GpuInsufficientPowerError(DeviceHandleError):
    """`... : Unable to communicate with GPU because it is insufficiently powered ...`."""


_FAILURE_ERRORS: dict[FailureKind, type[NvidiaSmiFailureError]] = {
    "no_devices": NoDevicesFoundError,
    "driver_unreachable": DriverUnreachableError,
    "library_not_found": NvmlLibraryNotFoundError,
    "version_mismatch": DriverLibraryMismatchError,
    "nvml_unknown_error": NvmlUnknownError,
    "insufficient_permissions": InsufficientPermissionsError,
    "gpu_access_blocked": GpuAccessBlockedError,
    "nvml_init": NvmlInitError,
    "gpu_lost": GpuLostError,
    "gpu_requires_reset": GpuRequiresResetError,
    "gpu_insufficient_power": GpuInsufficientPowerError,
    "gpu_not_found": GpuNotFoundError,
    "gpu_unknown_error": GpuUnknownError,
    "device_handle": DeviceHandleError,
}
_NO_DEVICES = "No devices were found"
_NO_DRIVER = "couldn't communicate with the NVIDIA driver"
_NO_LIBRARY = "couldn't find libnvidia-ml.so"
_BUS_ID = r"[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]"
# "detect" appears in a Windows guest's output; "GPU" is lower case in some releases.
_HANDLE = re.compile(
    rf"Unable to (?:determine|detect) the device handle for gpu\s*(?P<bus>{_BUS_ID})\s*:\s*"
    r"(?P<reason>.*)",
    re.IGNORECASE,
)
_NVML_INIT = re.compile(r"Failed to initialize NVML:\s*(?P<reason>.*)", re.IGNORECASE)
_NVML_VERSION = re.compile(r"NVML library version:\s*(?P<version>\S+)", re.IGNORECASE)
_HANDLE_REASONS: tuple[tuple[str, FailureKind], ...] = (
    ("gpu is lost", "gpu_lost"),
    ("requires reset", "gpu_requires_reset"),
    ("insufficiently powered", "gpu_insufficient_power"),
    ("insufficient external power", "gpu_insufficient_power"),
    ("not found", "gpu_not_found"),
    ("unknown error", "gpu_unknown_error"),
)
_NVML_REASONS: tuple[tuple[str, FailureKind], ...] = (
    ("version mismatch", "version_mismatch"),
    ("unknown error", "nvml_unknown_error"),
    ("insufficient permissions", "insufficient_permissions"),
    ("blocked by the operating system", "gpu_access_blocked"),
)


def _classify(
    reason: str, table: tuple[tuple[str, FailureKind], ...], default: FailureKind
) -> FailureKind:
    lowered = reason.lower()
    return next((kind for needle, kind in table if needle in lowered), default)


def _line_failure(line: str, output: str) -> FailureNotice | None:
    text = line.strip()
    if _NO_DRIVER in text:
        return FailureNotice(kind="driver_unreachable", text=text)
    if _NO_LIBRARY in text:
        return FailureNotice(kind="library_not_found", text=text)
    if text.startswith(_NO_DEVICES):
        return FailureNotice(kind="no_devices", text=text)
    if match := _HANDLE.search(text):
        reason = match.group("reason").strip()
        kind = _classify(reason, _HANDLE_REASONS, "device_handle")
        return FailureNotice(kind=kind, text=text, bus_id=match.group("bus"), reason=reason)
    if match := _NVML_INIT.search(text):
        reason = match.group("reason").strip()
        kind = _classify(reason, _NVML_REASONS, "nvml_init")
        version = _NVML_VERSION.search(output) if kind == "version_mismatch" else None
        return FailureNotice(
            kind=kind,
            text=text,
            reason=reason,
            library_version=version.group("version") if version else None,
        )
    return None


def find_failures(output: str) -> tuple[FailureNotice, ...]:
    """Every failure text in the output, in order (empty when there is none)."""
    notices = (_line_failure(line, output) for line in output.splitlines())
    return tuple(notice for notice in notices if notice is not None)


def _describe(notice: FailureNotice) -> str:
    gpu = f"GPU {notice.bus_id}"
    messages: dict[FailureKind, str] = {
        "no_devices": "nvidia-smi found no GPU devices",
        "driver_unreachable": (
            "nvidia-smi could not communicate with the NVIDIA driver (driver not loaded)"
        ),
        "library_not_found": "nvidia-smi could not load libnvidia-ml.so (driver libraries missing)",
        "version_mismatch": (
            "NVML and the loaded kernel module are different driver versions "
            f"(NVML library {notice.library_version or 'unknown'}): reload the modules or reboot"
        ),
        "nvml_unknown_error": "NVML failed to initialize: Unknown Error (device access lost?)",
        "insufficient_permissions": "NVML failed to initialize: insufficient permissions",
        "gpu_access_blocked": "NVML failed to initialize: GPU access blocked by the OS",
        "nvml_init": f"NVML failed to initialize: {notice.reason}",
        "gpu_lost": f"{gpu} is lost (fell off the bus): reboot to recover it",
        "gpu_requires_reset": f"{gpu} requires a reset",
        "gpu_insufficient_power": f"{gpu} is insufficiently powered (check its power cables)",
        "gpu_not_found": f"{gpu} was not initialised by the driver (Not Found)",
        "gpu_unknown_error": f"{gpu} does not answer (Unknown Error)",
        "device_handle": f"{gpu} could not be opened: {notice.reason}",
    }
    return messages[notice.kind]


def failure_error(notice: FailureNotice, output: str) -> NvidiaSmiFailureError:
    """The exception for a failure notice, carrying the notice and the whole output."""
    return _FAILURE_ERRORS[notice.kind](_describe(notice), output, notice)


def check_failure(output: str) -> None:
    """Raise the exception for the first failure text in the output, if there is one."""
    notices = find_failures(output)
    if notices:
        raise failure_error(notices[0], output)


def _no_data(output: str, what: str) -> ParseError:
    """Raise the failure the output reports, else return the ParseError to raise."""
    check_failure(output)
    first = next((line.strip() for line in output.splitlines() if line.strip()), "")
    return ParseError(f"no {what} in the output (first line: {first[:120]!r})")


# --- --query-* CSV --------------------------------------------------------------------------

Scalar = bool | int | float | str


class FieldValue(Record):
    raw: str
    status: Literal["ok", "not_available", "not_supported"]
    value: Scalar | None


# Two names for one field: `--help-query-gpu` lists `"name" or "gpu_name"` and the like, the
# header may print the other one, and driver 535 renamed the throttle reasons.
_ALIASES: tuple[tuple[str, str], ...] = (
    ("name", "gpu_name"),
    ("serial", "gpu_serial"),
    ("uuid", "gpu_uuid"),
    ("pci.bus_id", "gpu_bus_id"),
)
_PREFIX_ALIASES: tuple[tuple[str, str], ...] = (
    ("clocks_throttle_reasons.", "clocks_event_reasons."),
)


def _alias_names(name: str) -> tuple[str, ...]:
    names = [name]
    for one, other in _ALIASES:
        if name in (one, other):
            names.append(other if name == one else one)
    for one, other in _PREFIX_ALIASES:
        if name.startswith(one):
            names.append(other + name[len(one) :])
        elif name.startswith(other):
            names.append(one + name[len(other) :])
    return tuple(names)


class GpuRecord(Record):
    """One CSV line, its values keyed by the query field names."""

    fields: tuple[tuple[str, FieldValue], ...]

    def field(self, name: str) -> FieldValue:
        for candidate in _alias_names(name):
            for key, value in self.fields:
                if key == candidate:
                    return value
        known = ", ".join(key for key, _ in self.fields)
        raise ParseError(f"field '{name}' was not queried; fields: {known}")

    def value(self, name: str) -> Scalar | None:
        return self.field(name).value

    def has(self, name: str) -> bool:
        names = _alias_names(name)
        return any(key in names for key, _ in self.fields)


class QueryCsv(Record):
    """`--query-*=... --format=csv` output: the field names (units apart) and one row per line."""

    kind: Literal["csv"] = "csv"
    fields: tuple[str, ...]
    units: tuple[str | None, ...]
    rows: tuple[GpuRecord, ...]
    failures: tuple[FailureNotice, ...] = ()


_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+\.\d+$")
_HEX = re.compile(r"^0x[0-9A-Fa-f]+$")
_WITH_UNIT = re.compile(
    r"^(-?\d+(?:\.\d+)?)\s*(?:%|MiB|GiB|KiB|MB|W|MHz|C|us|ms|mV|KB/s|bank\(s\))$"
)
_BOOL = {
    "enabled": True,
    "disabled": False,
    "yes": True,
    "no": False,
    "active": True,
    "not active": False,
}
_HEADER_CELL = re.compile(r"^(?P<name>[a-z][A-Za-z0-9_.]*)(?:\s+\[(?P<unit>[^\]]+)\])?$")


def parse_value(raw: str) -> FieldValue:
    """Type one CSV cell: `[N/A]`, `[Not Supported]`, modes, hex, numbers (units dropped)."""
    text = raw.strip()
    bare = text.strip("[]").lower()
    if bare == "not supported":
        return FieldValue(raw=text, status="not_supported", value=None)
    # [N/A], [Unknown Error], [GPU requires reset], [Requested functionality has been
    # deprecated]...: the value could not be read, whatever the reason the brackets give.
    if bare in ("n/a", "unknown error") or (text.startswith("[") and text.endswith("]")):
        return FieldValue(raw=text, status="not_available", value=None)
    value: Scalar
    if bare in _BOOL:
        value = _BOOL[bare]
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


def _csv_header(line: str) -> tuple[tuple[str, ...], tuple[str | None, ...]] | None:
    matches = [_HEADER_CELL.match(cell.strip()) for cell in line.split(",")]
    if not all(matches):
        return None
    names = tuple(m.group("name") for m in matches if m)
    units = tuple(m.group("unit") for m in matches if m)
    return names, units


def parse_query_csv(output: str, fields: tuple[str, ...] | None = None) -> QueryCsv:
    """Parse any `--query-*=<fields> --format=csv[,noheader][,nounits]` output.

    With a header line its field names are used; without one (`noheader`) `fields` names the
    columns. Failure texts printed between the lines are kept in `failures`; when the rest is
    not CSV either (a failure text's second line), the failure is raised.
    """
    try:
        return _query_csv(output, fields)
    except ParseError:
        check_failure(output)
        raise


def _query_csv(output: str, fields: tuple[str, ...] | None) -> QueryCsv:
    failures = find_failures(output)
    numbered = [
        (number, line)
        for number, line in enumerate(output.splitlines(), start=1)
        if line.strip() and _line_failure(line, output) is None
    ]
    if not numbered:
        raise _no_data(output, "CSV lines")
    header = _csv_header(numbered[0][1])
    if header is not None:
        names, units = header
        numbered = numbered[1:]
    elif fields is None:
        raise ParseError(
            f"line {numbered[0][0]}: no CSV header line and no field list given: {numbered[0][1]!r}"
        )
    else:
        names, units = fields, tuple(None for _ in fields)
    rows: list[GpuRecord] = []
    for number, line in numbered:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(names):
            raise ParseError(
                f"line {number}: {len(cells)} values for {len(names)} queried fields "
                f"({', '.join(names)}): {line!r}"
            )
        pairs = zip(names, cells, strict=True)
        rows.append(GpuRecord(fields=tuple((name, parse_value(cell)) for name, cell in pairs)))
    if not rows and not failures:
        raise ParseError("nvidia-smi printed no GPU lines and no known failure text")
    return QueryCsv(fields=names, units=units, rows=tuple(rows), failures=failures)


def parse_query_gpu(output: str, fields: tuple[str, ...] = DEFAULT_FIELDS) -> tuple[GpuRecord, ...]:
    """Parse `--query-gpu=<fields> --format=csv[,noheader][,nounits]` into one record per GPU.

    Any failure text in the output is raised, even beside GPU lines: a GPU the query could not
    reach must fail the check, not go missing from it.
    """
    check_failure(output)
    return parse_query_csv(output, fields).rows


# --- row remapping ---------------------------------------------------------------------------


class RemappedRows(Record):
    """Row remapping state of one GPU (Ampere and later; retired pages read N/A there)."""

    gpu: str | None
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None

    @property
    def unhealthy(self) -> bool:
        """A remap waits for a GPU reset, or remapping failed (replace the GPU)."""
        return self.pending is True or self.failure is True


def _as_int(value: Scalar | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_bool(value: Scalar | None) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    return None


def _record_value(record: GpuRecord, name: str) -> Scalar | None:
    return record.value(name) if record.has(name) else None


def _remapped_from_record(record: GpuRecord) -> RemappedRows:
    gpu = next(
        (str(record.value(name)) for name in ("pci.bus_id", "uuid") if record.has(name)), None
    )
    return RemappedRows(
        gpu=gpu,
        correctable=_as_int(_record_value(record, "remapped_rows.correctable")),
        uncorrectable=_as_int(_record_value(record, "remapped_rows.uncorrectable")),
        pending=_as_bool(_record_value(record, "remapped_rows.pending")),
        failure=_as_bool(_record_value(record, "remapped_rows.failure")),
    )


def parse_remapped_rows(
    output: str, fields: tuple[str, ...] = REMAPPED_ROWS_FIELDS
) -> tuple[RemappedRows, ...]:
    """Parse `--query-remapped-rows=...` (or `--query-gpu` with `remapped_rows.*`) CSV."""
    check_failure(output)
    table = parse_query_csv(output, fields)
    if not any(name.startswith("remapped_rows.") for name in table.fields):
        raise ParseError(f"no remapped_rows.* field in the query ({', '.join(table.fields)})")
    return tuple(_remapped_from_record(row) for row in table.rows)


# --- the default table -------------------------------------------------------------------------


class TableGpu(Record):
    """One GPU block of the default table. `errors` names the cells that read `ERR!`."""

    index: int
    name: str
    bus_id: str | None
    persistence_mode: bool | None
    driver_model: str | None
    display_active: bool | None
    fan_percent: int | None
    temperature_c: int | None
    performance_state: str | None
    power_draw_w: float | None
    power_cap_w: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_percent: int | None
    compute_mode: str | None
    ecc: str
    ecc_uncorrectable: int | None
    mig_mode: str | None
    errors: tuple[str, ...]


class MigDevice(Record):
    gpu: int
    gpu_instance: int
    compute_instance: int
    mig_device: int
    memory_used_mib: int | None
    memory_total_mib: int | None


class TableProcess(Record):
    gpu: int
    gpu_instance: str | None
    compute_instance: str | None
    pid: int
    type: str
    name: str
    memory_mib: int | None


class SmiTable(Record):
    """The default `nvidia-smi` table."""

    kind: Literal["table"] = "table"
    timestamp: str | None
    smi_version: str | None
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[TableGpu, ...]
    mig_devices: tuple[MigDevice, ...] = ()
    processes: tuple[TableProcess, ...] = ()
    failures: tuple[FailureNotice, ...] = ()


_TABLE_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s*(?P<cuda>\S+))?"
)
_TIMESTAMP = re.compile(r"^\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4}\b")
_GPU_NAME_CELL = re.compile(r"^\s*(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC|MCDM|N/A|ERR!)\s*$")
_BUS_CELL = re.compile(r"^\s*(\S+)\s+(On|Off|N/A|ERR!)\s*$")
_PAIR_CELL = re.compile(r"^\s*(\S+)\s*/\s*(\S+)\s*$")
_NUMBER_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)(?:%|C|W|MiB)?$")
_PROCESS = re.compile(
    r"^\s*(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.*?)\s+(?P<memory>\S+)\s*$"
)
_ERR = "ERR!"


def _cells(line: str) -> list[str]:
    body = line.rstrip()
    body = body[1:-1] if body.endswith("|") else body[1:]
    return body.split("|")


def _is_rule(line: str) -> bool:
    """The `|===+===|` line under a table's column titles."""
    return line.startswith("|=")


def _reading(raw: str, column: str, errors: list[str]) -> float | None:
    text = raw.strip()
    if text == _ERR:
        errors.append(column)
        return None
    match = _NUMBER_UNIT.match(text)
    return float(match.group(1)) if match else None


def _int_reading(raw: str, column: str, errors: list[str]) -> int | None:
    number = _reading(raw, column, errors)
    return None if number is None else int(number)


def _mode(raw: str, column: str, errors: list[str]) -> bool | None:
    if raw == _ERR:
        errors.append(column)
    return {"On": True, "Off": False}.get(raw)


def _first_row(cells: list[str], errors: list[str], where: str) -> dict[str, object]:
    name_cell = _GPU_NAME_CELL.match(cells[0])
    bus_cell = _BUS_CELL.match(cells[1])
    if name_cell is None or bus_cell is None:
        raise ParseError(f"{where}: not a GPU row (index, name, mode | bus id, display)")
    name, mode = name_cell.group(2), name_cell.group(3)
    if name == _ERR:
        errors.append("name")
    bus_id = bus_cell.group(1)
    if bus_id == _ERR:
        errors.append("bus_id")
    ecc = cells[2].strip()
    if ecc == _ERR:
        errors.append("ecc")
    return {
        "index": int(name_cell.group(1)),
        "name": name,
        "persistence_mode": _mode(mode, "persistence_mode", errors),
        "driver_model": mode if mode in ("WDDM", "TCC", "MCDM") else None,
        "bus_id": None if bus_id == _ERR else bus_id,
        "display_active": _mode(bus_cell.group(2), "display_active", errors),
        "ecc": ecc,
        "ecc_uncorrectable": int(ecc) if _INT.match(ecc) else None,
    }


def _second_row(cells: list[str], errors: list[str], where: str) -> dict[str, object]:
    tokens = cells[0].split()
    memory = _PAIR_CELL.match(cells[1])
    if len(tokens) != 6 or tokens[4] != "/" or memory is None:
        raise ParseError(f"{where}: not a GPU reading row (fan temp perf draw / cap | memory)")
    fan, temp, perf, draw, _, cap = tokens
    usage = cells[2].split()
    if perf == _ERR:
        errors.append("performance_state")
    return {
        "fan_percent": _int_reading(fan, "fan", errors),
        "temperature_c": _int_reading(temp, "temperature", errors),
        "performance_state": perf if perf.startswith("P") else None,
        "power_draw_w": _reading(draw, "power_draw", errors),
        "power_cap_w": _reading(cap, "power_cap", errors),
        "memory_used_mib": _int_reading(memory.group(1), "memory_used", errors),
        "memory_total_mib": _int_reading(memory.group(2), "memory_total", errors),
        "utilization_percent": _int_reading(usage[0], "utilization", errors) if usage else None,
        "compute_mode": " ".join(usage[1:]) or None,
    }


def _gpu_block(rows: list[tuple[int, str]]) -> TableGpu:
    where = f"line {rows[0][0]}"
    cells = [_cells(line) for _, line in rows]
    if len(cells) < 2 or any(len(row) != 3 for row in cells):
        raise ParseError(f"{where}: a GPU block has two or three rows of three cells: {rows!r}")
    errors: list[str] = []
    first = _first_row(cells[0], errors, where)
    second = _second_row(cells[1], errors, f"line {rows[1][0]}")
    mig = cells[2][2].strip() if len(cells) > 2 else ""
    if mig == _ERR:
        errors.append("mig_mode")
    return TableGpu.model_validate(
        {**first, **second, "mig_mode": mig or None, "errors": tuple(errors)}
    )


def _section_blocks(lines: list[str], rule: int) -> list[list[tuple[int, str]]]:
    """The `|...|` row groups between `+---+` lines after a table's `|===|` rule.

    The section ends at a line of another shape: blank, or a row with another number of
    columns (the next table's title when no blank line separates them).
    """
    columns = lines[rule].strip().count("+") + 1
    blocks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for number in range(rule + 1, len(lines)):
        line = lines[number].strip()
        if line.startswith("|") and not _is_rule(line) and len(_cells(line)) == columns:
            current.append((number + 1, line))
            continue
        if current:
            blocks.append(current)
            current = []
        if not line.startswith("+"):
            break
    if current:
        blocks.append(current)
    return blocks


def _rule_after(lines: list[str], title: int) -> int | None:
    return next((i for i in range(title, len(lines)) if _is_rule(lines[i].strip())), None)


def _mig_devices(lines: list[str]) -> tuple[MigDevice, ...]:
    title = next((i for i, line in enumerate(lines) if "MIG devices:" in line), None)
    rule = None if title is None else _rule_after(lines, title)
    if rule is None:
        return ()
    devices = []
    for block in _section_blocks(lines, rule):
        cells = _cells(block[0][1])
        ids = cells[0].split()
        if len(cells) < 2 or len(ids) != 4 or not all(_INT.match(i) for i in ids):
            continue  # "No MIG devices found"
        memory = _PAIR_CELL.match(cells[1])
        errors: list[str] = []
        used, total = (memory.group(1), memory.group(2)) if memory else ("", "")
        devices.append(
            MigDevice(
                gpu=int(ids[0]),
                gpu_instance=int(ids[1]),
                compute_instance=int(ids[2]),
                mig_device=int(ids[3]),
                memory_used_mib=_int_reading(used, "memory_used", errors),
                memory_total_mib=_int_reading(total, "memory_total", errors),
            )
        )
    return tuple(devices)


def _processes(lines: list[str]) -> tuple[TableProcess, ...]:
    title = next((i for i, line in enumerate(lines) if "| Processes:" in line), None)
    rule = None if title is None else _rule_after(lines, title)
    if rule is None:
        return ()
    processes = []
    for block in _section_blocks(lines, rule):
        for _, line in block:
            # "No running processes found" and other notes are not process rows
            match = _PROCESS.match(_cells(line)[0])
            if match is None:
                continue
            memory = _NUMBER_UNIT.match(match.group("memory"))
            processes.append(
                TableProcess(
                    gpu=int(match.group("gpu")),
                    gpu_instance=match.group("gi"),
                    compute_instance=match.group("ci"),
                    pid=int(match.group("pid")),
                    type=match.group("type"),
                    name=match.group("name"),
                    memory_mib=int(float(memory.group(1))) if memory else None,
                )
            )
    return tuple(processes)


def _gpu_rule(lines: list[str]) -> int | None:
    """The `|===+===+===|` rule (three columns) that starts the GPU blocks."""
    return next(
        (
            i
            for i, line in enumerate(lines)
            if _is_rule(line.strip()) and line.strip().count("+") == 2
        ),
        None,
    )


def parse_table(output: str) -> SmiTable:
    """Parse the default `nvidia-smi` table (any layout from driver 331 to 610)."""
    lines = _strip_ansi(output).splitlines()
    rule = _gpu_rule(lines)
    if rule is None:
        raise _no_data(output, "nvidia-smi table (no |===+===+===| line)")
    gpus = tuple(_gpu_block(block) for block in _section_blocks(lines, rule))
    if not gpus:
        raise _no_data(output, "GPU rows in the nvidia-smi table")
    header = next((m for line in lines if (m := _TABLE_HEADER.search(line))), None)
    stamp = next((line.strip() for line in lines if _TIMESTAMP.match(line.strip())), None)
    cuda = header.group("cuda") if header else None
    return SmiTable(
        timestamp=stamp,
        smi_version=header.group("smi") if header else None,
        driver_version=header.group("driver") if header else None,
        cuda_version=None if cuda in (None, "N/A") else cuda,
        gpus=gpus,
        mig_devices=_mig_devices(lines),
        processes=_processes(lines),
        failures=find_failures(output),
    )


# --- nvidia-smi -q --------------------------------------------------------------------------


class QueryNode(Record):
    """One `key : value` line of `nvidia-smi -q`; a section has children and no value."""

    key: str
    value: str | None
    children: tuple[QueryNode, ...] = ()

    def find(self, key: str) -> QueryNode | None:
        """The first direct child with this key."""
        return next((child for child in self.children if child.key == key), None)

    def get(self, *path: str) -> str | None:
        """The value at a path of keys below this node (None when absent or a section)."""
        node: QueryNode | None = self
        for key in path:
            node = node.find(key) if node else None
        return node.value if node else None

    def walk(self) -> tuple[QueryNode, ...]:
        """This node's descendants, depth first."""
        return tuple(n for child in self.children for n in (child, *child.walk()))


class EccErrors(Record):
    """ECC error counts summed over memories (SRAM + DRAM, or Single/Double Bit `Total`)."""

    volatile_correctable: int | None
    volatile_uncorrectable: int | None
    aggregate_correctable: int | None
    aggregate_uncorrectable: int | None
    sram_threshold_exceeded: bool | None


class RetiredPages(Record):
    single_bit: int | None
    double_bit: int | None
    pending: bool | None


class QueryGpu(Record):
    """One `GPU 00000000:3B:00.0` section of `-q`, the health values typed, `section` raw."""

    bus_id: str
    product_name: str | None
    serial: str | None
    uuid: str | None
    persistence_mode: bool | None
    mig_mode: str | None
    ecc_mode: bool | None
    ecc_errors: EccErrors
    retired_pages: RetiredPages
    remapped_rows: RemappedRows | None
    clocks_event_reasons: tuple[str, ...]
    temperature_c: int | None
    power_draw_w: float | None
    power_limit_w: float | None
    reset_required: bool | None
    recovery_action: str | None
    section: QueryNode


class QueryReport(Record):
    """`nvidia-smi -q` (any `-d` selection)."""

    kind: Literal["query"] = "query"
    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[QueryGpu, ...]
    nodes: tuple[QueryNode, ...]
    failures: tuple[FailureNotice, ...] = ()


@dataclass
class _Draft:
    key: str
    value: str | None
    indent: int
    children: list[_Draft] = field(default_factory=list)

    def freeze(self) -> QueryNode:
        return QueryNode(
            key=self.key,
            value=self.value,
            children=tuple(child.freeze() for child in self.children),
        )


_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_KEY_VALUE = re.compile(r"^(?P<key>.+?)\s+:(?:\s+(?P<value>.*?))?\s*$")
_GPU_SECTION = re.compile(rf"^GPU (?P<bus>{_BUS_ID})$")
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\b")
# Driver 610 keeps the old keys with "[Deprecated; ... Use KMD Version instead]" appended.
_DEPRECATION = re.compile(r"\s*\[Deprecated[^\]]*\]\s*$")


def _query_tree(lines: list[str]) -> list[_Draft]:
    root = _Draft(key="", value=None, indent=-1)
    stack = [root]
    for line in lines:
        content = line.strip()
        if not content or _BANNER.match(content):
            continue
        indent = len(line) - len(line.lstrip(" "))
        match = _KEY_VALUE.match(content)
        key, value = (match.group("key"), match.group("value") or "") if match else (content, None)
        while stack[-1].indent >= indent:
            stack.pop()
        draft = _Draft(key=key.strip(), value=value, indent=indent)
        stack[-1].children.append(draft)
        stack.append(draft)
    return root.children


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and _INT.match(value.strip()) else None


def _number(value: str | None) -> float | None:
    match = _NUMBER.match(value.strip()) if value else None
    return float(match.group(1)) if match else None


def _flag(value: str | None) -> bool | None:
    return _BOOL.get(value.strip().lower()) if value else None


def _counts(section: QueryNode | None, word: str, bits: str) -> int | None:
    """Sum of the `... Correctable`/`... Uncorrectable` counters, or `<bits> Bit` / `Total`.

    A split counter (`SRAM Uncorrectable Parity`) is skipped when its total is printed too.
    """
    if section is None:
        return None
    keys = [
        child.key
        for child in section.children
        if word in child.key.split() and child.value is not None
    ]
    kept = [k for k in keys if not any(k != o and k.startswith(o + " ") for o in keys)]
    if not kept:
        return _count(section.get(f"{bits} Bit", "Total"))
    values = [_count(section.get(k)) for k in kept]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc_errors(gpu: QueryNode) -> EccErrors:
    errors = gpu.find("ECC Errors")
    volatile = errors.find("Volatile") if errors else None
    aggregate = errors.find("Aggregate") if errors else None
    return EccErrors(
        volatile_correctable=_counts(volatile, "Correctable", "Single"),
        volatile_uncorrectable=_counts(volatile, "Uncorrectable", "Double"),
        aggregate_correctable=_counts(aggregate, "Correctable", "Single"),
        aggregate_uncorrectable=_counts(aggregate, "Uncorrectable", "Double"),
        sram_threshold_exceeded=_flag(aggregate.get("SRAM Threshold Exceeded"))
        if aggregate
        else None,
    )


def _retired_pages(gpu: QueryNode) -> RetiredPages:
    section = gpu.find("Retired Pages")
    children = section.children if section else ()
    pending = next((c.value for c in children if c.key.startswith("Pending")), None)
    return RetiredPages(
        single_bit=_count(section.get("Single Bit ECC")) if section else None,
        double_bit=_count(section.get("Double Bit ECC")) if section else None,
        pending=_flag(pending),
    )


def _query_remapped_rows(gpu: QueryNode, bus_id: str) -> RemappedRows | None:
    section = gpu.find("Remapped Rows")
    if section is None or not section.children:
        return None  # "Remapped Rows : N/A" before Ampere
    return RemappedRows(
        gpu=bus_id,
        correctable=_count(section.get("Correctable Error")),
        uncorrectable=_count(section.get("Uncorrectable Error")),
        pending=_flag(section.get("Pending")),
        failure=_flag(section.get("Remapping Failure Occurred")),
    )


def _active_reasons(gpu: QueryNode) -> tuple[str, ...]:
    section = gpu.find("Clocks Event Reasons") or gpu.find("Clocks Throttle Reasons")
    if section is None:
        return ()
    return tuple(node.key for node in section.walk() if node.value == "Active")


def _first_reading(section: QueryNode | None, keys: tuple[str, ...]) -> float | None:
    """The first of `keys`, searched at any depth, that holds a number."""
    nodes = section.walk() if section else ()
    for key in keys:
        for node in nodes:
            if node.key == key and (number := _number(node.value)) is not None:
                return number
    return None


def _query_gpu(section: QueryNode, bus_id: str) -> QueryGpu:
    power = section.find("GPU Power Readings") or section.find("Power Readings")
    temperature = _number(section.get("Temperature", "GPU Current Temp"))
    return QueryGpu(
        bus_id=bus_id,
        product_name=section.get("Product Name"),
        serial=section.get("Serial Number"),
        uuid=section.get("GPU UUID"),
        persistence_mode=_flag(section.get("Persistence Mode")),
        mig_mode=section.get("MIG Mode", "Current"),
        ecc_mode=_flag(section.get("ECC Mode", "Current")),
        ecc_errors=_ecc_errors(section),
        retired_pages=_retired_pages(section),
        remapped_rows=_query_remapped_rows(section, bus_id),
        clocks_event_reasons=_active_reasons(section),
        temperature_c=None if temperature is None else int(temperature),
        power_draw_w=_first_reading(
            power, ("Power Draw", "Average Power Draw", "Instantaneous Power Draw")
        ),
        power_limit_w=_first_reading(
            power, ("Current Power Limit", "Enforced Power Limit", "Power Limit")
        ),
        reset_required=_flag(section.get("GPU Reset Status", "Reset Required")),
        recovery_action=section.get("GPU Recovery Action"),
        section=section,
    )


def _top_value(nodes: tuple[QueryNode, ...], *keys: str) -> str | None:
    for key in keys:
        value = next((n.value for n in nodes if n.key == key and n.value), None)
        if value:
            return _DEPRECATION.sub("", value)
    return None


def parse_query(output: str) -> QueryReport:
    """Parse `nvidia-smi -q` into a generic tree plus typed values per GPU section."""
    lines = [
        line for line in _strip_ansi(output).splitlines() if _line_failure(line, output) is None
    ]
    nodes = tuple(draft.freeze() for draft in _query_tree(lines))
    sections = [(n, m.group("bus")) for n in nodes if (m := _GPU_SECTION.match(n.key))]
    banner = any(_BANNER.match(line.strip()) for line in lines)
    if not sections and not banner:
        raise _no_data(output, "nvidia-smi -q report (no NVSMI LOG banner, no GPU section)")
    attached = _top_value(nodes, "Attached GPUs")
    return QueryReport(
        timestamp=_top_value(nodes, "Timestamp"),
        driver_version=_top_value(nodes, "KMD Version", "Driver Version"),
        cuda_version=_top_value(nodes, "CUDA UMD Version", "CUDA Version"),
        attached_gpus=_count(attached),
        gpus=tuple(_query_gpu(section, bus) for section, bus in sections),
        nodes=nodes,
        failures=find_failures(output),
    )


# --- nvidia-smi topo -m -------------------------------------------------------------------


class TopoRow(Record):
    device: str
    links: tuple[str, ...]
    cpu_affinity: str | None
    numa_affinity: str | None
    gpu_numa_id: str | None


class TopoMatrix(Record):
    """`nvidia-smi topo -m`: link type between every pair of devices, legend, NIC names."""

    kind: Literal["topology"] = "topology"
    devices: tuple[str, ...]
    rows: tuple[TopoRow, ...]
    legend: tuple[tuple[str, str], ...]
    nic_names: tuple[tuple[str, str], ...] = ()

    def link(self, one: str, other: str) -> str:
        """The connection between two devices (`X`, `NV18`, `PIX`, `SYS`...)."""
        row = next((r for r in self.rows if r.device == one), None)
        if row is None or other not in self.devices:
            raise ParseError(f"no device '{one}' or '{other}' in {', '.join(self.devices)}")
        return row.links[self.devices.index(other)]

    def row(self, device: str) -> TopoRow:
        row = next((r for r in self.rows if r.device == device), None)
        if row is None:
            raise ParseError(f"no device '{device}' in {', '.join(self.devices)}")
        return row

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if re.fullmatch(r"GPU\d+", d))


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# X, SYS, NODE, PHB, PXB, PIX, NV12 (and SOC, NVB in older drivers): upper case codes, which an
# affinity such as 0-11 shifted into the links by a missing cell is not.
_LINK = re.compile(r"^(?:[A-Z][A-Z0-9#]*|N/A)$")
_LEGEND = re.compile(r"^\s*(?P<code>\S+)\s+=\s+(?P<meaning>.+?)\s*$")
_NIC_LEGEND = re.compile(r"^\s*(?P<nic>NIC\d+):\s*(?P<name>\S+)\s*$")


def _strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _topo_header(lines: list[str]) -> int | None:
    """The column titles: the first line that starts with GPU0 and is not GPU0's own row."""
    return next(
        (
            i
            for i, line in enumerate(lines)
            if line.split()[:1] == ["GPU0"] and "X" not in line.split()
        ),
        None,
    )


def _topo_columns(header: str) -> list[str]:
    cells = header.split("\t") if "\t" in header else re.split(r"\s{2,}", header.strip())
    return [cell.strip() for cell in cells if cell.strip()]


def _affinities(rest: list[str], tabbed: bool, columns: int) -> list[str | None]:
    """CPU, NUMA and GPU NUMA values; printed with tabs, NUMA Affinity spans two tab stops."""
    if tabbed and len(rest) > columns:
        rest = [*rest[:2], rest[-1]]
    padded = [*rest, *([""] * 3)]
    return [value or None for value in padded[:3]]


def _topo_row(line: str, devices: list[str], columns: int, number: int) -> TopoRow:
    tabbed = "\t" in line
    cells = [c.strip() for c in line.split("\t")] if tabbed else line.split()
    links, rest = cells[1 : len(devices) + 1], cells[len(devices) + 1 :]
    codes = [link for link in links if _LINK.match(link)]
    if len(codes) != len(devices):
        raise ParseError(
            f"line {number}: {cells[0]} has {len(codes)} links for {len(devices)} devices: {line!r}"
        )
    cpu, numa, gpu_numa = _affinities(rest, tabbed, columns)
    return TopoRow(
        device=cells[0],
        links=tuple(links),
        cpu_affinity=cpu,
        numa_affinity=numa,
        gpu_numa_id=gpu_numa,
    )


def parse_topology(output: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` (or `-mp`): matrix, `Legend:` and `NIC Legend:`."""
    lines = [line for line in _strip_ansi(output).splitlines() if line.strip()]
    start = _topo_header(lines)
    if start is None:
        raise _no_data(output, "topology matrix (no header line starting with GPU0)")
    columns = _topo_columns(lines[start])
    devices = [c for c in columns if c not in _AFFINITY_COLUMNS]
    affinity_columns = len(columns) - len(devices)
    rows = []
    for number in range(start + 1, len(lines)):
        first = lines[number].split()[0]
        if first not in devices:
            break
        rows.append(_topo_row(lines[number], devices, affinity_columns, number + 1))
    if not rows:
        raise ParseError(f"topology header without device rows: {lines[start].strip()!r}")
    legend = [m for line in lines if (m := _LEGEND.match(line))]
    nics = [m for line in lines if (m := _NIC_LEGEND.match(line))]
    return TopoMatrix(
        devices=tuple(devices),
        rows=tuple(rows),
        legend=tuple((m.group("code"), m.group("meaning")) for m in legend),
        nic_names=tuple((m.group("nic"), m.group("name")) for m in nics),
    )


# --- which format ---------------------------------------------------------------------------

NvidiaSmiOutput = SmiTable | QueryReport | QueryCsv | TopoMatrix


def parse_nvidia_smi(output: str) -> NvidiaSmiOutput:
    """Recognise the output (table, `-q`, `topo -m`, CSV with a header) and parse it.

    Raises the `NvidiaSmiFailureError` subclass for a failure text printed instead of output,
    and `ParseError` for anything else.
    """
    text = _strip_ansi(output)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("empty output: nvidia-smi printed nothing")
    if any(_BANNER.match(line.strip()) or _GPU_SECTION.match(line) for line in lines):
        return parse_query(output)
    if _gpu_rule(lines) is not None or any(_TABLE_HEADER.search(line) for line in lines):
        return parse_table(output)
    if _topo_header(lines) is not None:
        return parse_topology(output)
    data = [line for line in lines if _line_failure(line, output) is None]
    if data and _csv_header(data[0]) is not None:
        return parse_query_csv(output)
    raise _no_data(output, "nvidia-smi output (table, -q, topo -m or CSV with a header)")
