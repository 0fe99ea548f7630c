"""nccl-tests `*_perf` stdout and NCCL_DEBUG=INFO/WARN logs.

`parse_nccl_tests` reads the result table of every nccl-tests collective (all_reduce, all_gather,
reduce_scatter, alltoall, alltoallv, broadcast, reduce, sendrecv, gather, scatter, hypercube) in
the layouts nccl-tests printed since v2.0.0 (read from its `src/common.cu` and `src/util.cu`
history, NVIDIA/nccl-tests):

- v2.0-v2.12: columns chosen per collective (`redop` and/or `root`, or neither), an `error`
  column holding the largest absolute error as `%5.0le` (`0e+00`, `1e-06`), `N/A` with `-c 0`,
  device lines `#   Rank  0 Pid  1234 on host device  0 [0x1a] NAME`;
- v2.13 on: always `size count type redop root`, an integer `#wrong` count (`%g`, so large
  counts print as `1.04858e+06`), `N/A` for in-place alltoall, `#  Rank  0 Group  0 Pid ...`
  device lines, later with `[0000:04:00]` bus ids; `# nccl-tests version ... nccl-library=N`,
  `# Collective test starting/concluded:`, `cputime` columns (`-C 1`), a timestamp after each
  row (`-S 1`), per-iteration `i_min i_max i_p99 i_cv%` columns (`-I 1`), the
  `# GPU memory usage` and `# Bitwise mismatches` footers and `# error:` lines;
- `Test NCCL failure` / `Test CUDA failure` / `Test failure` lines of an aborted run.

`parse_nccl_debug` reads the `NCCL INFO` / `NCCL WARN` lines (format of NVIDIA/nccl
`src/debug.cc` since 2.4: `host:pid:tid [dev] NCCL INFO ...`, `host:pid:tid [dev] file:line
NCCL WARN ...`, since 2.26 with a `[YYYY-MM-DD HH:MM:SS]` stamp on WARN lines) and says which
network NCCL used, whether the aws-ofi-nccl (Libfabric) plugin initialised or refused (its
messages from aws/aws-ofi-nccl v1.0-v1.21), the provider, NIC count, GPUDirect RDMA, channels
and transports, and every WARN sorted into a category.

Both accept output behind launcher prefixes (`srun --label` `0: `, Open MPI `--tag-output`
`[1,0]<stdout>:`, MPICH/Intel MPI `[0] `, pdsh/mpirun `host: `, torchrun `[default0]:`,
`kubectl logs --timestamps`), with NCCL log lines interleaved with, or glued into, table rows.
The real samples they were checked against are listed in tests/fixtures/outputs/nccl/SOURCES.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """Text that is not nccl-tests output or an NCCL debug log."""


# --- lines, launcher prefixes and NCCL log headers ----------------------------------------------

# kubectl logs --timestamps / CloudWatch put an RFC 3339 time before the launcher's own prefix
_STAMP_PREFIX = re.compile(r"^\s*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s")
_LABEL_PREFIX = re.compile(
    r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:"  # Open MPI --tag-output
    r"|\[[\w.,-]+\]:"  # torchrun / PRRTE [default0]:
    r"|\[\d+\]\s"  # MPICH / Intel MPI -prepend-rank
    r"|\d+:\s"  # srun --label
    r"|[A-Za-z0-9][\w.-]*:\s)"  # pdsh, mpirun host: (also eats `Warning: `, which is harmless)
)
# host:pid:tid [dev] ... NCCL INFO|WARN|TRACE|CALL, with the optional NCCL >= 2.26 time stamp
_LOG_LINE = re.compile(
    r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d[ T][\d:.]+)\]\s*)?"
    r"(?P<host>[^\s:\[\]]+):\d+:\d+\s+(?:\[\d+\]\s+)?.*?\bNCCL (?:INFO|WARN|TRACE|CALL)\b"
)


def _split_prefix(raw: str) -> tuple[str, str]:
    """(launcher label, line without launcher prefixes); stdout and stderr share a label."""
    line, label = raw.rstrip("\r\n"), ""
    for _ in range(4):
        if stamp := _STAMP_PREFIX.match(line):
            line = line[stamp.end() :]
        elif prefix := _LABEL_PREFIX.match(line):
            label += re.sub(r"<std(?:out|err)>|\s", "", prefix.group(0))
            line = line[prefix.end() :]
        else:
            break
    return label, line


def _lines(text: str) -> list[tuple[str, str]]:
    return [_split_prefix(raw) for raw in text.splitlines()]


def _hosts(lines: list[tuple[str, str]]) -> tuple[str, ...]:
    """Host names of the NCCL log lines that start a line, in order of appearance."""
    found = (m.group("host") for _, line in lines if (m := _LOG_LINE.match(line)))
    return tuple(dict.fromkeys(found))


def _log_start(line: str, hosts: tuple[str, ...]) -> int | None:
    """Where an NCCL log line starts inside `line` (None: there is none).

    A log line can be glued to a table row that was still being printed (`-1ip-10-0-0-1:12:34
    [0] NCCL INFO ...`); the host names seen at line starts tell the row's digits from the host's.
    """
    m = _LOG_LINE.search(line)
    if m is None:
        return None
    start, host = m.start("host"), m.group("host")
    if m.group("stamp") is not None or start == 0:
        return m.start()
    for cut in range(len(host)):
        if host[cut:] in hosts:
            return start + cut
    letter = re.search(r"[A-Za-z]", host)
    return start + (letter.start() if letter else 0)


# --- nccl-tests tables ---------------------------------------------------------------------------


class NcclTestsDevice(Record):
    """One `#  Rank  N Group  G Pid P on HOST device D [BUS] NAME` line.

    `group` is None before nccl-tests 2.13 (no `Group` column), `pid` None in the v1 layout.
    """

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str


class NcclIterStats(Record):
    """The `-I 1` per-iteration columns of one half-row: `i_min i_max i_p99 i_cv%`."""

    min_us: float
    max_us: float
    p99_us: float
    cv_pct: float


class NcclPerfPoint(Record):
    """One half (out-of-place or in-place) of a result row.

    `wrong` is the `#wrong` count; `None` where nccl-tests printed `N/A` (in-place alltoall, or
    `-c 0`). Before nccl-tests 2.13 the column is `error`, the largest absolute error as a float
    (`1e-06`), and `legacy_error` is True: a small non-zero value there is normal rounding, only
    the `Out of bounds values` footer says whether it was too large.
    """

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None
    legacy_error: bool = False
    per_iteration: NcclIterStats | None = None


class NcclPerfRow(Record):
    """One result row. `time_us` is CPU time when `cpu_time` (`-C 1`, header `cputime`)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: NcclPerfPoint
    in_place: NcclPerfPoint
    collective: str | None = None
    timestamp: str | None = None
    cpu_time: bool = False


class NcclTestsConfig(Record):
    """The `# nThread 1 nGpus 8 minBytes 8 maxBytes ... step: 2(factor) ...` header."""

    n_threads: int | None
    n_gpus: int | None
    min_bytes: int | None
    max_bytes: int | None
    step: str | None
    warmup_iters: int | None
    iters: int | None
    agg_iters: int | None
    validation: int | None
    graph: int | None


class NcclTestsResult(Record):
    version: str | None
    collective: str | None
    devices: tuple[NcclTestsDevice, ...]
    rows: tuple[NcclPerfRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None
    avg_busbw_ok: bool | None = None
    bitwise_mismatches: int | None = None
    config: NcclTestsConfig | None = None
    nccl_version: str | None = None
    failures: tuple[str, ...] = ()
    last_error: str | None = None

    @property
    def wrong_total(self) -> float:
        """Sum of every `#wrong` count (legacy `error` magnitudes are not counts)."""
        return sum(
            point.wrong or 0.0
            for row in self.rows
            for point in (row.out_of_place, row.in_place)
            if not point.legacy_error
        )

    @property
    def collectives(self) -> tuple[str, ...]:
        """Every collective a row was measured for (nccl-tests >= 2.17.4 names them)."""
        return tuple(dict.fromkeys(row.collective for row in self.rows if row.collective))

    @property
    def passed(self) -> bool:
        """Rows, no wrong count, `Out of bounds values : 0 OK`, no failure or FAILED footer."""
        return (
            bool(self.rows)
            and self.wrong_total == 0
            and self.out_of_bounds_ok is True
            and self.avg_busbw_ok is not False
            and not self.bitwise_mismatches
            and not self.failures
        )


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
_NUM = re.compile(rf"(?:{_NUMBER})$", re.IGNORECASE)
_INT = re.compile(r"-?\d+$")
_WORD = re.compile(r"[A-Za-z_]\w*$")
_DATE, _TIME = re.compile(r"\d{4}-\d\d-\d\d$"), re.compile(r"\d\d:\d\d:\d\d$")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z_]\w*(?:\s|$)")
_CONTINUATION = re.compile(
    rf"^\s*(?:(?:{_NUMBER}|N/A)\s*)+(?:\d{{4}}-\d\d-\d\d\s+\d\d:\d\d:\d\d\s*)?$", re.IGNORECASE
)
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:.*?nccl-library=(\d+))?")
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONFIG = re.compile(r"^#?\s*nThread:?\s+\d+")
_CONFIG_ITEM = re.compile(
    r"(?:^|\s)(warmup iters|warmupIters|agg iters|nThread|nGpus|minBytes|maxBytes|step|iters"
    r"|validation|graph)\s*:?\s+(\S+)"
)
_DEVICE = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_COLUMNS = re.compile(r"^#?\s*(?:size|bytes)\s+(?:count|N)\s+type\b")
_AVG = re.compile(rf"^#?\s*Avg bus bandwidth\s*:\s*({_NUMBER})(?:\s+(OK|FAILED))?", re.IGNORECASE)
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_BITWISE = re.compile(r"^#?\s*Bitwise mismatches\s*:\s*(\d+)")
_ERROR = re.compile(r"^#\s*error:\s*(.+?)\s*$")
# nccl-tests >= 2.0 prints `host: Test NCCL failure file:line 'msg'`, v1 `NCCL failure file:line`
_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|^(?:NCCL|Cuda) failure \S+:\d+ '")
_NCCL_VERSION = re.compile(r"\bNCCL version\s+(\d[\w.+-]*)")
_HEADER = re.compile(
    r"^#?\s*(?:Using devices|NCCL Tests compiled with|Blocking Enabled|GPU memory usage\s*:"
    r"|Collective test concluded)"
)


@dataclass(frozen=True)
class _Columns:
    """What the last column header said about the rows under it (None: not said)."""

    legacy_error: bool | None = None
    per_iteration: bool = False
    cpu_time: bool = False


def _columns(line: str) -> _Columns:
    names = set(line.lstrip("#").split())
    legacy = True if names & {"error", "res"} else (False if "#wrong" in names else None)
    return _Columns(legacy, "i_min" in names, "cputime" in names)


def _is_legacy_cell(cell: str) -> bool:
    """`%5.0le` max-error cells (`0e+00`, `2e-07`); counts print in `e` form only from 1e6 on."""
    return "e" in cell.lower() and _NUM.match(cell) is not None and abs(float(cell)) < 1e6


def _point(cells: list[str], legacy: bool) -> NcclPerfPoint | None:
    if not all(_NUM.match(c) for c in cells[:3]) or not (cells[3] == "N/A" or _NUM.match(cells[3])):
        return None
    stats = None
    if len(cells) == 8:
        if not all(_NUM.match(c) for c in cells[4:]):
            return None
        stats = NcclIterStats(
            min_us=float(cells[4]),
            max_us=float(cells[5]),
            p99_us=float(cells[6]),
            cv_pct=float(cells[7]),
        )
    return NcclPerfPoint(
        time_us=float(cells[0]),
        algbw_gbps=float(cells[1]),
        busbw_gbps=float(cells[2]),
        wrong=None if cells[3] == "N/A" else float(cells[3]),
        legacy_error=legacy,
        per_iteration=stats,
    )


def _row(text: str, columns: _Columns, collective: str | None) -> NcclPerfRow | None:
    """A whole result row, in any layout; None where `text` is not (yet) one."""
    tokens = text.split()
    if len(tokens) < 11 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    rest, timestamp = tokens[3:], None
    if len(rest) > 2 and _DATE.match(rest[-2]) and _TIME.match(rest[-1]):
        rest, timestamp = rest[:-2], f"{rest[-2]} {rest[-1]}"
    redop = rest.pop(0) if _WORD.match(rest[0]) and not _NUM.match(rest[0]) else None
    root = int(rest.pop(0)) if len(rest) % 4 == 1 and _INT.match(rest[0]) else None
    width = 8 if columns.per_iteration or len(rest) == 16 else 4
    if len(rest) != 2 * width:
        return None
    if columns.legacy_error is not None:
        legacy = columns.legacy_error
    else:
        legacy = any(_is_legacy_cell(rest[i]) for i in (3, width + 3))
    out_of_place, in_place = _point(rest[:width], legacy), _point(rest[width:], legacy)
    if out_of_place is None or in_place is None:
        return None
    return NcclPerfRow(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        dtype=tokens[2],
        redop=redop,
        root=root,
        out_of_place=out_of_place,
        in_place=in_place,
        collective=collective,
        timestamp=timestamp,
        cpu_time=columns.cpu_time,
    )


def _device(m: re.Match[str]) -> NcclTestsDevice:
    rank, group, pid, host, device, bus_id, name = m.groups()
    return NcclTestsDevice(
        rank=int(rank),
        group=int(group) if group is not None else None,
        pid=int(pid) if pid is not None else None,
        host=host,
        device=int(device),
        bus_id=bus_id,
        name=name,
    )


def _config(line: str) -> NcclTestsConfig:
    items = {key.replace(" ", "").lower(): value for key, value in _CONFIG_ITEM.findall(line)}

    def number(key: str) -> int | None:
        value = items.get(key)
        return int(value) if value is not None and value.isdigit() else None

    return NcclTestsConfig(
        n_threads=number("nthread"),
        n_gpus=number("ngpus"),
        min_bytes=number("minbytes"),
        max_bytes=number("maxbytes"),
        step=items.get("step"),
        warmup_iters=number("warmupiters"),
        iters=number("iters"),
        agg_iters=number("aggiters"),
        validation=number("validation"),
        graph=number("graph"),
    )


def _library_version(code: str) -> str:
    """`nccl-library=22703` -> `2.27.3` (NCCL_VERSION_CODE; before 2.9 it was 2708 -> 2.7.8)."""
    value = int(code)
    if value >= 20900:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


@dataclass
class _Table:
    """What parse_nccl_tests has read so far."""

    columns: _Columns = field(default_factory=_Columns)
    collective: str | None = None
    first_collective: str | None = None
    version: str | None = None
    nccl_version: str | None = None
    config: NcclTestsConfig | None = None
    devices: list[NcclTestsDevice] = field(default_factory=list)
    rows: list[NcclPerfRow] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)
    avg: float | None = None
    avg_ok: bool | None = None
    oob: list[tuple[int, bool]] = field(default_factory=list)
    bitwise: int | None = None
    failures: list[str] = field(default_factory=list)
    last_error: str | None = None
    recognised: bool = False

    def header(self, line: str) -> bool:
        """Read a `#` header/footer line (or its `#`-less form); False if it is none."""
        if m := _VERSION.match(line):
            self.version = self.version or m.group(1)
            if m.group(2) and self.nccl_version is None:
                self.nccl_version = _library_version(m.group(2))
        elif m := _COLLECTIVE.match(line):
            self.collective = m.group(1)
            self.first_collective = self.first_collective or self.collective
        elif _CONFIG.match(line):
            self.config = self.config or _config(line)
        elif m := _DEVICE.match(line):
            self.devices.append(_device(m))
        elif _COLUMNS.match(line):
            self.columns = _columns(line)
        elif m := _OOB.match(line):
            self.oob.append((int(m.group(1)), m.group(2) == "OK"))
        elif m := _AVG.match(line):
            if self.avg is None:
                self.avg = float(m.group(1))
            if m.group(2):
                self.avg_ok = m.group(2) == "OK" and self.avg_ok is not False
        elif m := _BITWISE.match(line):
            self.bitwise = (self.bitwise or 0) + int(m.group(1))
        elif m := _ERROR.match(line):
            self.last_error = m.group(1)
        elif not _HEADER.match(line):
            return False
        self.recognised = True
        return True

    def nccl_log(self, text: str) -> None:
        """An NCCL log line (or a bare `NCCL version`): only its version matters here."""
        if self.nccl_version is None and (m := _NCCL_VERSION.search(text)):
            self.nccl_version = m.group(1)

    def feed(self, label: str, part: str, *, line_ended: bool) -> None:
        """Read what a line holds besides NCCL log output."""
        text = part.strip()
        if not text:
            return
        if _FAILURE.search(text):
            self.failures.append(text)
        elif _NCCL_VERSION.match(text):
            self.nccl_log(text)
        elif not self.header(text):
            self.table_text(label, part, line_ended=line_ended)

    def table_text(self, label: str, text: str, *, line_ended: bool) -> None:
        """A row may arrive in pieces, cut by NCCL log lines (kept per launcher label)."""
        if _ROW_START.match(text):
            self.pending[label] = text
        elif label in self.pending and _CONTINUATION.match(text):
            self.pending[label] += " " + text
        else:
            return
        if not line_ended:
            return
        row = _row(self.pending[label], self.columns, self.collective)
        if row is not None:
            self.rows.append(row)
            del self.pending[label]

    def result(self) -> NcclTestsResult:
        return NcclTestsResult(
            version=self.version,
            collective=self.first_collective,
            devices=tuple(self.devices),
            rows=tuple(self.rows),
            avg_busbw_gbps=self.avg,
            out_of_bounds=sum(n for n, _ in self.oob) if self.oob else None,
            out_of_bounds_ok=all(ok for _, ok in self.oob) if self.oob else None,
            avg_busbw_ok=self.avg_ok,
            bitwise_mismatches=self.bitwise,
            config=self.config,
            nccl_version=self.nccl_version,
            failures=tuple(self.failures),
            last_error=self.last_error,
        )


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the stdout of an nccl-tests `*_perf` binary (launcher prefixes, NCCL logs tolerated).

    Output of several runs (one binary after another) gives one result: rows keep their
    collective, `Out of bounds values` are summed, the first `Avg bus bandwidth` is kept.
    """
    lines = _lines(text)
    hosts = _hosts(lines)
    table = _Table()
    for label, line in lines:
        start = _log_start(line, hosts)
        if start is None:
            table.feed(label, line, line_ended=True)
        else:
            table.nccl_log(line[start:])
            table.feed(label, line[:start], line_ended=False)
    if not (table.recognised or table.rows or table.failures):
        raise ParseError(
            "no nccl-tests output found: expected '# Using devices', a result table or "
            "'# nccl-tests version' lines"
        )
    return table.result()


def busbw_at(
    result: NcclTestsResult,
    size_bytes: int,
    *,
    in_place: bool = False,
    collective: str | None = None,
) -> float:
    """The bus bandwidth (GB/s) nccl-tests reported for one message size.

    Where a run repeats a size (several redops, types or collectives), the first row counts;
    `collective` (`all_reduce_perf`) picks the rows of one binary where the output names it.
    """
    rows = [r for r in result.rows if collective is None or r.collective == collective]
    for row in rows:
        if row.size_bytes == size_bytes:
            return (row.in_place if in_place else row.out_of_place).busbw_gbps
    sizes = ", ".join(str(row.size_bytes) for row in rows) or "none"
    raise ParseError(f"no row for size {size_bytes} bytes; sizes measured: {sizes}")


# --- NCCL_DEBUG logs -----------------------------------------------------------------------------

WarningCategory = Literal[
    "cuda",
    "ofi_completion",
    "ofi_init",
    "ofi",
    "ib_completion",
    "ib_verbs",
    "timeout",
    "remote_error",
    "memory",
    "system_error",
    "socket",
    "bootstrap",
    "version_mismatch",
    "topology",
    "plugin",
    "other",
]

# First match wins: the more specific failure before the subsystem it happened in.
_CATEGORIES: tuple[tuple[WarningCategory, re.Pattern[str]], ...] = (
    ("cuda", re.compile(r"\bCuda failure\b|\bCUDA (?:error|failure)\b|unhandled cuda error", re.I)),
    (
        "ofi_completion",
        re.compile(r"NET/OFI.*(?:completed with error|completion error|cq_readerr)", re.I),
    ),
    (
        "ofi_init",
        re.compile(
            r"NET/OFI.*(?:No eligible providers|initiali[sz]ation failed|Initializing .*failed"
            r"|Failing initialization|fi_getinfo|Couldn't find any optimal provider"
            r"|Unable to find)|OFI plugin initNet\(\) failed",
            re.I,
        ),
    ),
    ("ofi", re.compile(r"NET/OFI|aws-ofi-nccl|libfabric", re.I)),
    ("ib_completion", re.compile(r"NET/IB\w*\s*:?\s*Got completion", re.I)),
    ("ib_verbs", re.compile(r"\bibv_\w+|libibverbs|NET/IB|\bmlx5_?\w*|\bRoCE\b|\bGID\b")),
    ("timeout", re.compile(r"\btime(?:d)?[ -]?out\b|\btimeout\b", re.I)),
    (
        "remote_error",
        re.compile(r"remote process exited|closed by remote peer|remote (?:peer|rank)", re.I),
    ),
    (
        "memory",
        re.compile(
            r"out of memory|Failed to (?:c?alloc|malloc|CUDA calloc)|Allocation failed", re.I
        ),
    ),
    (
        "system_error",
        re.compile(r"unhandled system error|system call|Call to \w+ failed|errno", re.I),
    ),
    ("socket", re.compile(r"socket|connection (?:refused|reset)|connect to|\bNet :", re.I)),
    ("bootstrap", re.compile(r"bootstrap|Message truncated|NCCL_COMM_ID|unique ?id", re.I)),
    (
        "version_mismatch",
        re.compile(r"Mismatched NCCL version|version mismatch|compiled with too old", re.I),
    ),
    ("topology", re.compile(r"TOPO|topology|XML|Could not find a path|\bNVML\b|nvml", re.I)),
    ("plugin", re.compile(r"plugin", re.I)),
)


class NcclWarning(Record):
    """One `NCCL WARN` line, or one `Test NCCL failure` line of nccl-tests (`kind`)."""

    kind: Literal["nccl_warn", "test_failure"]
    category: WarningCategory
    message: str
    source: str | None
    host: str | None
    pid: int | None
    device: int | None
    timestamp: str | None


class NcclPath(Record):
    """The network path an NCCL_DEBUG=INFO log shows NCCL taking, and what went wrong.

    `ofi_plugin_loaded` is True only where aws-ofi-nccl initialised and was usable (a provider
    selected, or Libfabric named as the network or on a channel); `ofi_plugin_refused` where its
    NET/OFI lines refused to initialise (no eligible provider, fi_getinfo failed...), after
    which NCCL falls back to its own IB or socket transport.
    """

    nccl_version: str | None
    ofi_plugin_loaded: bool
    ofi_plugin_version: str | None
    network: str | None
    provider: str | None
    fabric: str | None
    nic_count: int | None
    gpudirect_rdma: bool | None
    socket_fallback: bool
    net_transports: tuple[str, ...]
    ofi_plugin_refused: bool = False
    net_plugin: str | None = None
    net_plugin_missing: bool = False
    networks: tuple[str, ...] = ()
    transports: tuple[str, ...] = ()
    channels: int | None = None
    coll_channels: int | None = None
    p2p_channels: int | None = None
    rings_connected: bool = False
    trees_connected: bool = False
    hosts: tuple[str, ...] = ()
    warnings: tuple[NcclWarning, ...] = ()

    @property
    def warning_categories(self) -> tuple[WarningCategory, ...]:
        return tuple(dict.fromkeys(w.category for w in self.warnings))


_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN|TRACE|CALL)\b|NCCL version\s")
_OFI_VERSION = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl\s+(\S+)")
_NETWORK = re.compile(r"NCCL INFO Using network\s+(.+?)\s*$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is\s+([^\s,]+)")
_FABRIC = re.compile(r"\bfabric is\s+([^\s(]+)")
_NICS = re.compile(r"\(found (\d+) nics\)")
_VIA = re.compile(r"(?:->|\[(?:send|receive)\]).*?\bvia (\S.*?)\s*$")
_VIA_NET = re.compile(r"\bvia NET/([^/\n]+?)/\d+(?:\(\d+\))?(/GDRDMA)?")
_NET_PLUGIN = re.compile(r"Loaded net plugin (.+?) \(v\d+\)")
_PLUGIN_MISSING = re.compile(
    r"NET/Plugin\s*:.*(?:No plugin found|Could not find|Using internal|[Pp]lugin load.*returned)"
)
_OFI_USED = re.compile(
    r"Using network (?:AWS )?Libfabric|via NET/(?:AWS )?Libfabric/"
    r"|(?:Initialized|Assigned) NET plugin (?:AWS )?Libfabric|NET/OFI Selected [Pp]rovider"
)
_OFI_REFUSED = re.compile(
    r"NET/OFI.*(?:No eligible providers|initiali[sz]ation failed|Initializing plugin failed"
    r"|Failing initialization|fi_getinfo\(\) call failed|Couldn't find any optimal provider)"
    r"|Failed to initialize NET plugin (?:AWS )?Libfabric|OFI plugin initNet\(\) failed"
)
_OFI_MARK = re.compile(r"NET/OFI\b|aws-ofi-nccl")
_RING_LIST = re.compile(r"\b(?:Channel|Ring) (\d+)(?:/(\d+))? :(?:\s+\d+)+\s*$")
_COLL_CHANNELS = re.compile(r"\b(\d+) coll channels")
_P2P_CHANNELS = re.compile(r"\b(\d+) p2p channels(?! per peer)")
_WARN = re.compile(
    r"^(?:\[(?P<stamp>\d{4}-[^\]]+)\]\s*)?"
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+\s+)?(?:\[(?P<dev>\d+)\]\s*)?"
    r"(?P<source>.*?)\s*NCCL WARN\s?(?P<message>.*?)\s*$"
)
_TEST_FAILURE = re.compile(
    r"(?:Test (?:NCCL|CUDA) failure|^(?:NCCL|Cuda) failure)\s+(?P<source>\S+:\d+)"
    r"\s+'(?P<message>.*?)(?:\s*/\s*)?'\s*$"
)


def _category(message: str) -> WarningCategory:
    for name, pattern in _CATEGORIES:
        if pattern.search(message):
            return name
    return "other"


def _warning(line: str, hosts: tuple[str, ...]) -> NcclWarning | None:
    start = _log_start(line, hosts) or 0
    if "NCCL WARN" in line and (m := _WARN.match(line[start:])):
        return NcclWarning(
            kind="nccl_warn",
            category=_category(m.group("message")),
            message=m.group("message"),
            source=m.group("source") or None,
            host=m.group("host"),
            pid=int(m.group("pid")) if m.group("pid") else None,
            device=int(m.group("dev")) if m.group("dev") else None,
            timestamp=m.group("stamp"),
        )
    if m := _TEST_FAILURE.search(line):
        return NcclWarning(
            kind="test_failure",
            category=_category(m.group("message")),
            message=m.group("message"),
            source=m.group("source"),
            host=None,
            pid=None,
            device=None,
            timestamp=None,
        )
    return None


def _transport(target: str) -> str:
    """`NET/IB/0(1)/GDRDMA` -> `NET/IB`, `P2P/IPC/read` -> `P2P/IPC`, `SHM/direct/x` -> `SHM`."""
    parts = target.split("/")
    if parts[0] in ("NET", "COLLNET", "P2P") and len(parts) > 1:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def _first_int(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return int(m.group(1)) if m else None


def _channel_count(lines: list[str]) -> int | None:
    counts = [
        int(m.group(2)) if m.group(2) else int(m.group(1)) + 1
        for line in lines
        if (m := _RING_LIST.search(line))
    ]
    return max(counts) if counts else None


def _unique(values: Iterator[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _gdr(text: str, net_channels: list[re.Match[str]]) -> bool | None:
    """Net channels decide (`/GDRDMA` on any); else NCCL's GPU Direct RDMA lines; else unknown."""
    if net_channels:
        return any(m.group(2) for m in net_channels)
    if "GPU Direct RDMA Enabled" in text:
        return True
    if "GPU Direct RDMA Disabled" in text or "GDR disabled" in text:
        return False
    return None


def _ofi_loaded(text: str, networks: tuple[str, ...]) -> bool:
    if _OFI_USED.search(text):
        return True
    if _OFI_REFUSED.search(text) or networks:
        return False
    return _OFI_MARK.search(text) is not None


def parse_nccl_debug(log: str) -> NcclPath:
    """Read the network path and the warnings out of an NCCL_DEBUG=INFO (or WARN) log."""
    split = _lines(log)
    lines = [line for _, line in split]
    if not any(_NCCL_LINE.search(line) for line in lines):
        raise ParseError("no 'NCCL INFO', 'NCCL WARN' or 'NCCL version' line: not an NCCL log")
    hosts = _hosts(split)
    text = "\n".join(lines)
    version = _NCCL_VERSION.search(text)
    ofi_version = _OFI_VERSION.search(text)
    provider_line = next((line for line in lines if _PROVIDER.search(line)), "")
    provider, fabric = _PROVIDER.search(provider_line), _FABRIC.search(provider_line)
    net_plugin = _NET_PLUGIN.search(text)
    networks = _unique(m.group(1) for line in lines if (m := _NETWORK.search(line)))
    net_channels = list(_VIA_NET.finditer(text))
    net_transports = _unique(m.group(1) for m in net_channels)
    ofi_loaded = _ofi_loaded(text, networks)
    socket = "Socket" in networks or "Socket" in net_transports
    if not (networks or net_transports):
        socket = "NET/Socket" in text and not ofi_loaded and "NET/IB : Using [" not in text
    return NcclPath(
        nccl_version=version.group(1) if version else None,
        ofi_plugin_loaded=ofi_loaded,
        ofi_plugin_version=ofi_version.group(1) if ofi_version else None,
        network=networks[-1] if networks else None,
        provider=provider.group(1) if provider else None,
        fabric=fabric.group(1) if fabric else None,
        nic_count=_first_int(_NICS, text),
        gpudirect_rdma=_gdr(text, net_channels),
        socket_fallback=socket,
        net_transports=net_transports,
        ofi_plugin_refused=_OFI_REFUSED.search(text) is not None,
        net_plugin=net_plugin.group(1) if net_plugin else None,
        net_plugin_missing=_PLUGIN_MISSING.search(text) is not None,
        networks=networks,
        transports=_unique(_transport(m.group(1)) for line in lines if (m := _VIA.search(line))),
        channels=_channel_count(lines),
        coll_channels=_first_int(_COLL_CHANNELS, text),
        p2p_channels=_first_int(_P2P_CHANNELS, text),
        rings_connected="Connected all rings" in text,
        trees_connected="Connected all trees" in text,
        hosts=hosts,
        warnings=tuple(w for line in lines if (w := _warning(line, hosts)) is not None),
    )
