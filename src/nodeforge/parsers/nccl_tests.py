"""nccl-tests `*_perf` stdout and NCCL_DEBUG=INFO logs.

`parse_nccl_tests` reads the table nccl-tests prints (the current layout with `redop`/`root`
columns and `#wrong` counts, and the pre-2.x layout without them whose error column is a float)
plus its `#` header and footer lines. `parse_nccl_debug` reads the `NCCL INFO` lines of an
NCCL_DEBUG=INFO log and says which network path NCCL took: the aws-ofi-nccl (Libfabric) plugin,
its provider, GPUDirect RDMA, or a fallback to TCP sockets.
"""

from __future__ import annotations

import re

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """Text that is not nccl-tests output or an NCCL debug log."""


class NcclTestsDevice(Record):
    """One `#  Rank  N Group  G Pid P on HOST device D [BUS] NAME` line."""

    rank: int
    group: int
    pid: int
    host: str
    device: int
    bus_id: str
    name: str


class NcclPerfPoint(Record):
    """One half (out-of-place or in-place) of a result row.

    `wrong` is the `#wrong` count; `None` where nccl-tests printed `N/A` (in-place alltoall, or
    `-c 0`). In the legacy layout the column is the maximum error as a float (`1e+00`).
    """

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None


class NcclPerfRow(Record):
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: NcclPerfPoint
    in_place: NcclPerfPoint


class NcclTestsResult(Record):
    version: str | None
    collective: str | None
    devices: tuple[NcclTestsDevice, ...]
    rows: tuple[NcclPerfRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None

    @property
    def wrong_total(self) -> float:
        """Sum of every `#wrong` cell that held a number."""
        return sum(
            point.wrong or 0.0 for row in self.rows for point in (row.out_of_place, row.in_place)
        )

    @property
    def passed(self) -> bool:
        """Rows were printed, no cell counted a wrong value and the bounds check said OK."""
        return bool(self.rows) and self.wrong_total == 0 and self.out_of_bounds_ok is not False


_PREFIX = re.compile(r"^(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:|\d{1,3}(?:\.\d{1,3}){3}:\s)")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_CELL = rf"(?:{_NUM}|N/A)"
_POINT = rf"({_NUM})\s+({_NUM})\s+({_NUM})\s+({_CELL})"
_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+([A-Za-z_][\w]*)\s+([A-Za-z_]\w*)\s+(-?\d+)\s+{_POINT}\s+{_POINT}\s*$"
)
_LEGACY_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+([A-Za-z_]\w*)\s+{_POINT}\s+{_POINT}\s*$")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[([^\]]+)\]\s+(.+?)\s*$"
)
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_AVG = re.compile(rf"^#?\s*Avg bus bandwidth\s*:\s*({_NUM})")
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_HEADER = re.compile(r"^#?\s*(?:nThread\s|Using devices|size\s+count)")


def _strip(line: str) -> str:
    return _PREFIX.sub("", line, count=1).rstrip("\r\n")


def _cell(raw: str) -> float | None:
    return None if raw == "N/A" else float(raw)


def _point(groups: tuple[str, ...]) -> NcclPerfPoint:
    return NcclPerfPoint(
        time_us=float(groups[0]),
        algbw_gbps=float(groups[1]),
        busbw_gbps=float(groups[2]),
        wrong=_cell(groups[3]),
    )


def _row(line: str) -> NcclPerfRow | None:
    match = _ROW.match(line)
    if match:
        g = match.groups()
        return NcclPerfRow(
            size_bytes=int(g[0]),
            count=int(g[1]),
            dtype=g[2],
            redop=g[3],
            root=int(g[4]),
            out_of_place=_point(g[5:9]),
            in_place=_point(g[9:13]),
        )
    match = _LEGACY_ROW.match(line)
    if match:
        g = match.groups()
        return NcclPerfRow(
            size_bytes=int(g[0]),
            count=int(g[1]),
            dtype=g[2],
            redop=None,
            root=None,
            out_of_place=_point(g[3:7]),
            in_place=_point(g[7:11]),
        )
    return None


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the stdout of an nccl-tests `*_perf` binary (srun/mpirun prefixes tolerated)."""
    version: str | None = None
    collective: str | None = None
    devices: list[NcclTestsDevice] = []
    rows: list[NcclPerfRow] = []
    avg: float | None = None
    oob: int | None = None
    oob_ok: bool | None = None
    recognised = False
    for raw in text.splitlines():
        line = _strip(raw)
        if m := _VERSION.match(line):
            version, recognised = m.group(1), True
        elif m := _COLLECTIVE.match(line):
            collective = m.group(1)
        elif m := _DEVICE.match(line):
            g = m.groups()
            devices.append(
                NcclTestsDevice(
                    rank=int(g[0]),
                    group=int(g[1]),
                    pid=int(g[2]),
                    host=g[3],
                    device=int(g[4]),
                    bus_id=g[5],
                    name=g[6],
                )
            )
            recognised = True
        elif m := _AVG.match(line):
            avg = float(m.group(1))
        elif m := _OOB.match(line):
            oob, oob_ok = int(m.group(1)), m.group(2) == "OK"
        elif (row := _row(line)) is not None:
            rows.append(row)
        elif _HEADER.match(line):
            recognised = True
    if not (recognised or rows):
        raise ParseError(
            "no nccl-tests output found: expected '# Using devices', a result table or "
            "'# nccl-tests version' lines"
        )
    return NcclTestsResult(
        version=version,
        collective=collective,
        devices=tuple(devices),
        rows=tuple(rows),
        avg_busbw_gbps=avg,
        out_of_bounds=oob,
        out_of_bounds_ok=oob_ok,
    )


def busbw_at(result: NcclTestsResult, size_bytes: int, *, in_place: bool = False) -> float:
    """The bus bandwidth (GB/s) nccl-tests reported for one message size.

    Where a run repeats a size (several redops or types), the first row counts.
    """
    for row in result.rows:
        if row.size_bytes == size_bytes:
            return (row.in_place if in_place else row.out_of_place).busbw_gbps
    sizes = ", ".join(str(row.size_bytes) for row in result.rows) or "none"
    raise ParseError(f"no row for size {size_bytes} bytes; sizes measured: {sizes}")


class NcclPath(Record):
    """The network path an NCCL_DEBUG=INFO log shows NCCL taking."""

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


_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN)\b|NCCL version\s")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\S+)")
_OFI_VERSION = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl\s+(\S+)")
_NETWORK = re.compile(r"NCCL INFO Using network\s+(.+?)\s*$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is\s+([\w;-]+)")
_FABRIC = re.compile(r"\bfabric is\s+([\w-]+)")
_NICS = re.compile(r"\(found (\d+) nics\)")
_VIA_NET = re.compile(r"\bvia NET/([^/\s]+(?: [^/\s]+)?)/\d+(/GDRDMA)?")
_OFI_MARK = re.compile(r"NET/OFI\b|Using network (?:AWS )?Libfabric|via NET/(?:AWS )?Libfabric/")


def parse_nccl_debug(log: str) -> NcclPath:
    """Read the network path out of an NCCL_DEBUG=INFO log (launcher prefixes tolerated)."""
    lines = [_strip(raw) for raw in log.splitlines()]
    if not any(_NCCL_LINE.search(line) for line in lines):
        raise ParseError("no 'NCCL INFO', 'NCCL WARN' or 'NCCL version' line: not an NCCL log")
    text = "\n".join(lines)
    version = _NCCL_VERSION.search(text)
    ofi_version = _OFI_VERSION.search(text)
    networks = [m.group(1) for line in lines if (m := _NETWORK.search(line))]
    provider = _PROVIDER.search(text)
    fabric = _FABRIC.search(text) if provider else None
    nics = _NICS.search(text)
    transports: list[str] = []
    gdr_channel = False
    for m in _VIA_NET.finditer(text):
        if m.group(1) not in transports:
            transports.append(m.group(1))
        gdr_channel = gdr_channel or m.group(2) is not None
    if gdr_channel or "GPU Direct RDMA Enabled" in text:
        gdr: bool | None = True
    elif "GPU Direct RDMA Disabled" in text or transports:
        gdr = False
    else:
        gdr = None
    ofi_loaded = ofi_version is not None or _OFI_MARK.search(text) is not None
    socket = (
        "Socket" in networks or "Socket" in transports or ("NET/Socket" in text and not ofi_loaded)
    )
    return NcclPath(
        nccl_version=version.group(1) if version else None,
        ofi_plugin_loaded=ofi_loaded,
        ofi_plugin_version=ofi_version.group(1) if ofi_version else None,
        network=networks[-1] if networks else None,
        provider=provider.group(1) if provider else None,
        fabric=fabric.group(1) if fabric else None,
        nic_count=int(nics.group(1)) if nics else None,
        gpudirect_rdma=gdr,
        socket_fallback=socket,
        net_transports=tuple(transports),
    )
