"""NVIDIA driver (NVRM) Xid events, and GPU-fell-off-the-bus reports, from a kernel log.

Learned from the driver's own printers in NVIDIA/open-gpu-kernel-modules (595.45.04:
`krcReportXid_IMPL` in `src/nvidia/src/kernel/gpu/rc/kernel_rc.c`, `osinit.c`, `osapi.c`,
`_gpuRecoveryActionName` in `gpu.c`, the error-containment examples in
`kern_gpu_error_cont_ga100.c`), NVIDIA's Xid documentation, DCGM's `/dev/kmsg` reader and the
real logs listed in tests/fixtures/outputs/kernel_log/SOURCES.md.

Event lines, as the driver prints them (newest form first):

* `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`
  (`pid='<unknown>', name=<unknown>` on older drivers; no pid/name when no process is known;
  `PCI:0000:01:00 GPU-I:05 GPU-CI:01` inside the brackets for MIG instances;
  `NVRM: Xid (0000:03:00): 14, ...` without `PCI:` on old drivers). Xid 45 may end in
  `caused by previous Xid 149`; Xid 154 reads `GPU recovery action changed from 0x0 (None) to
  0x1 (GPU Reset Required)`; the NVLink5 codes 144-150 carry `NETIR_LINK_EVT Fatal XC0 i0 Link
  08 (0x004505c6 0x00000000 ...)`.
* `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.` (also after an Xid 79), and the
  three-line probe message `NVRM: The NVIDIA GPU 0000:b3:00.0` / `NVRM: (PCI ID: 10de:26b5)
  installed in this system has` / `NVRM: fallen off the bus and is not responding to
  commands.`, which comes without any Xid: both become `fallen_off_bus` events with no code.
* `NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-...`, printed once before a GPU's first Xid,
  gives the UUID of the events on that bus.

Everything else (GSP RPC history tables, RISC-V register dumps, crash-dump notices, stack
traces, other drivers) is context and produces no event. The `NVRM:` text may follow any of
these line prefixes, whose timestamp is kept as printed and read where it can be:

* `dmesg` `[ 1843.308145]` (seconds since boot), `dmesg -T` `[Fri Apr  5 21:29:39 2024]`,
  `dmesg --time-format iso` `2024-11-15T12:02:03,470068+00:00`, `dmesg -x`
  `kern  :warn  : ...`, `dmesg -r` `<4>[...]`; continuation lines indented with spaces;
* `journalctl -k` `Mar 15 14:53:00 host kernel:` (`-o short-precise` adds microseconds,
  `short-iso`/`short-iso-precise` `2026-03-15T14:53:00+0100`, `short-full`
  `Sun 2026-03-15 14:53:09 CET`, `short-unix` `1773582780.412093`, `short-monotonic`
  `[ 7286.412093]`), and bare `kernel: NVRM: ...` lines;
* syslog files (`/var/log/messages`, `/var/log/syslog`, `kern.log`): `Dec  2 10:43:35 host
  kernel: [240314.528856] NVRM: ...` or RFC 3339 rsyslog stamps;
* raw `/dev/kmsg` records `4,2392,98379181630,-;NVRM: ...` (microseconds since boot;
  `\\x0a` escapes for embedded newlines; ` KEY=value` dictionary lines);
* `talosctl dmesg` `192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: NVRM: ...`.

A syslog or journal stamp without a year stays a raw string. Lines without `NVRM:` are ignored,
so a clean log, an empty one, or text that is not a kernel log at all gives `[]`: a healthy
node's log has no NVRM line to recognise it by. A line that starts an Xid but carries no
readable code (`NVRM: Xid (PCI:0000:3b:00): INVALID`) raises `ParseError`, because a check that
skipped it would pass a node whose fault it could not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """An `NVRM: Xid` line whose Xid code cannot be read."""


class KernelTimestamp(Record):
    """The line's timestamp as printed, and what it means where that can be read."""

    raw: str | None
    uptime_s: float | None = None
    """Seconds since boot (dmesg, `/dev/kmsg`, a syslog line's `[...]` kernel stamp)."""
    wall: datetime | None = None
    """Wall-clock time; timezone-aware when the stamp names its offset."""


class NvlinkError(Record):
    """The NVLink5 detail of Xids 144-150: `<unit> Fatal|Nonfatal XC0 i0 Link NN (0x...)`."""

    unit: str
    fatal: bool
    link: int
    values: tuple[int, ...]
    """The hex words in brackets: intrinfo, error status, then more registers."""


class XidEvent(Record):
    kind: Literal["xid", "fallen_off_bus"]
    xid: int | None
    """None for a fell-off-the-bus report printed without an Xid."""
    bus_id: str | None
    """`0000:3b:00` (domain:bus:device, lower case); None when the log hides it."""
    bus_id_raw: str | None
    """As printed: `PCI:0000:01:00 GPU-I:05`, `0000:b3:00.0`, ..."""
    gpu_instance: int | None = None
    compute_instance: int | None = None
    pid: int | None = None
    process: str | None = None
    message: str
    """The text after the code (and after pid/name)."""
    timestamp: KernelTimestamp
    line: int
    """1-based line of the event in the text."""
    host: str | None = None
    gpu_uuid: str | None = None
    recovery_action: str | None = None
    """Xid 154: the recovery action the driver changed to (`GPU Reset Required`, ...)."""
    caused_by_xid: int | None = None
    """Xid 45: the Xid whose cleanup this is."""
    nvlink: NvlinkError | None = None


_NVRM = re.compile(r"(?<![\w-])NVRM:")
_XID_START = re.compile(r"^NVRM:\s*Xid\s*\(")
_XID = re.compile(r"^NVRM:\s*Xid\s*\((?P<dev>[^)]*)\)\s*:?\s*(?P<code>\d+)\b,?\s*(?P<rest>.*)$")
_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_DEVICE = re.compile(
    rf"^(?:PCI:)?(?P<bdf>{_BDF})(?:\s+GPU-I:(?P<gi>\d+))?(?:\s+GPU-CI:(?P<ci>\d+))?$"
)
_PID = re.compile(r"^pid=(?P<pid>[^,]*)(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*)(?:,\s*|$)")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<xid>\d+)\s*$")
_RECOVERY = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x[0-9a-fA-F]+ \((?P<to>[^)]*)\)"
)
_NVLINK = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*(?:/[A-Z0-9_]+)*)\s+(?P<severity>Fatal|Nonfatal)\s+XC\d+\s+i\d+\s+"
    r"Link\s+(?P<link>-?\d+)\s*\((?P<values>[^)]*)\)"
)
_UUID = re.compile(rf"^NVRM:\s*GPU at (?:PCI:)?(?P<bdf>{_BDF}):\s*(?P<uuid>GPU-[0-9a-fA-F-]+)\s*$")
_FELL_OFF = re.compile(
    rf"^NVRM:\s*GPU (?:at )?(?:PCI:)?(?P<bdf>{_BDF}):\s*(?P<text>GPU has fallen off the bus.*)$"
)
_THE_GPU = re.compile(rf"^NVRM:\s*The NVIDIA GPU (?P<bdf>{_BDF})\b")
_FALLEN = "fallen off the bus"
_PROBE_CONTINUATIONS = 2
_HEX_WORD = re.compile(r"0x[0-9a-fA-F]+")
_UNKNOWN = {"", "<unknown>", "'<unknown>'", "<n/a>"}

_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
_KMSG_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_CTIME = re.compile(r"\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]")
_ISO = re.compile(
    r"(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?P<frac>[.,]\d+)?"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2}|\s+(?:UTC|GMT)\b)?)"
)
_UNIX = re.compile(r"^(?P<ts>\d{9,11}\.\d+)\s")
_SYSLOG = re.compile(r"^(?P<ts>[^\W\d_]{3,}\.?\s+\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s")
_UPTIME = re.compile(r"\[\s*(?P<ts>\d+\.\d+)\]")
_HOST = re.compile(r"(?:^|\s)(?P<host>[^\s\[\]]+)\s+kernel(?:\[\d+\])?:")


def parse_kernel_log(text: str) -> list[XidEvent]:
    """Every Xid and fell-off-the-bus event in `text`, in log order (see the module doc)."""
    lines = list(_expand_kmsg(text))
    uuids: dict[str, str] = {}
    events: list[XidEvent] = []
    for index, (number, line) in enumerate(lines):
        found = _NVRM.search(line)
        if found is None:
            continue
        payload = line[found.start() :].rstrip()
        if uuid := _UUID.match(payload):
            uuids[_normalise(uuid["bdf"])] = uuid["uuid"]
            continue
        event = _event(payload, lines[index + 1 : index + 1 + _PROBE_CONTINUATIONS], number)
        if event is None:
            continue
        timestamp, host = _prefix(line[: found.start()])
        uuid_of = uuids.get(event.bus_id) if event.bus_id is not None else None
        events.append(
            event.model_copy(update={"timestamp": timestamp, "host": host, "gpu_uuid": uuid_of})
        )
    return events


def _expand_kmsg(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) pairs; a `/dev/kmsg` record's escaped newlines become indented
    continuation lines of the same number, as dmesg prints them."""
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        header = _KMSG.match(line)
        if header is None or "\\x" not in line:
            yield number, line
            continue
        first, *more = _KMSG_ESCAPE.sub(lambda m: chr(int(m[1], 16)), line).split("\n")
        yield number, first
        for piece in more:
            yield number, " " + piece


def _event(payload: str, following: list[tuple[int, str]], number: int) -> XidEvent | None:
    """The event a line's `NVRM:` text starts, or None; `following` lines complete the
    three-line probe message."""
    if _XID_START.match(payload):
        return _xid_event(payload, number)
    if fell := _FELL_OFF.match(payload):
        return _fallen_event(fell["bdf"], fell["text"], number)
    if the_gpu := _THE_GPU.match(payload):
        pieces = [payload]
        for _, line in following:
            if _FALLEN in pieces[-1]:
                break
            found = _NVRM.search(line)
            pieces.append(line[found.start() :] if found else line.strip())
        if _FALLEN in pieces[-1]:
            text = " ".join(p.removeprefix("NVRM:").strip() for p in pieces)
            return _fallen_event(the_gpu["bdf"], text, number)
    return None


def _xid_event(payload: str, number: int) -> XidEvent:
    match = _XID.match(payload)
    if match is None:
        raise ParseError(f"line {number}: NVRM Xid line without a readable Xid code: {payload!r}")
    device = match["dev"].strip()
    place = _DEVICE.match(device)
    rest = match["rest"]
    pid: int | None = None
    process: str | None = None
    if pid_match := _PID.match(rest):
        value = pid_match["pid"].strip()
        pid = int(value) if value.isdecimal() else None
        rest = rest[pid_match.end() :]
    if name_match := _NAME.match(rest):
        value = name_match["name"].strip()
        process = None if value in _UNKNOWN else value
        rest = rest[name_match.end() :]
    caused_by = _CAUSED_BY.search(rest)
    recovery = _RECOVERY.search(rest)
    return XidEvent(
        kind="xid",
        xid=int(match["code"]),
        bus_id=_normalise(place["bdf"]) if place else None,
        bus_id_raw=device,
        gpu_instance=int(place["gi"]) if place and place["gi"] else None,
        compute_instance=int(place["ci"]) if place and place["ci"] else None,
        pid=pid,
        process=process,
        message=rest.strip(),
        timestamp=KernelTimestamp(raw=None),
        line=number,
        recovery_action=recovery["to"] if recovery else None,
        caused_by_xid=int(caused_by["xid"]) if caused_by else None,
        nvlink=_nvlink(rest),
    )


def _fallen_event(bdf: str, text: str, number: int) -> XidEvent:
    return XidEvent(
        kind="fallen_off_bus",
        xid=None,
        bus_id=_normalise(bdf),
        bus_id_raw=bdf,
        message=text.strip(),
        timestamp=KernelTimestamp(raw=None),
        line=number,
    )


def _nvlink(message: str) -> NvlinkError | None:
    match = _NVLINK.match(message)
    if match is None:
        return None
    return NvlinkError(
        unit=match["unit"],
        fatal=match["severity"] == "Fatal",
        link=int(match["link"]),
        values=tuple(int(word, 16) for word in _HEX_WORD.findall(match["values"])),
    )


def _normalise(bdf: str) -> str:
    """`0000:3b:00` from `0000:3B:00.0`, `3b:00.0` (domain 0) or an 8-digit domain."""
    parts = bdf.split(".", maxsplit=1)[0].split(":")
    domain = parts[0] if len(parts) == 3 else "0"
    return f"{int(domain, 16):04x}:{parts[-2].lower()}:{parts[-1].lower()}"


def _prefix(prefix: str) -> tuple[KernelTimestamp, str | None]:
    """The timestamp and host name in what precedes `NVRM:` on a line."""
    text = prefix.strip()
    host = _HOST.search(text)
    return _timestamp(text), host["host"] if host else None


def _timestamp(text: str) -> KernelTimestamp:
    uptime_match = _UPTIME.search(text)
    uptime = float(uptime_match["ts"]) if uptime_match else None
    if kmsg := _KMSG.match(text):
        return KernelTimestamp(raw=kmsg["usec"], uptime_s=int(kmsg["usec"]) / 1_000_000)
    if ctime := _CTIME.search(text):
        return KernelTimestamp(raw=ctime["ts"], uptime_s=uptime, wall=_ctime(ctime["ts"]))
    if iso := _ISO.search(text):
        return KernelTimestamp(raw=iso["ts"].strip(), uptime_s=uptime, wall=_iso_time(iso))
    if unix := _UNIX.match(text):
        wall = datetime.fromtimestamp(float(unix["ts"]), tz=UTC)
        return KernelTimestamp(raw=unix["ts"], uptime_s=uptime, wall=wall)
    if syslog := _SYSLOG.match(text):
        return KernelTimestamp(raw=syslog["ts"], uptime_s=uptime)
    if uptime_match:
        return KernelTimestamp(raw=uptime_match["ts"], uptime_s=uptime)
    return KernelTimestamp(raw=None)


def _ctime(raw: str) -> datetime | None:
    """`dmesg -T` time (local, naive); None for a stamp with no such date."""
    try:
        return datetime.strptime(raw, "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None


def _iso_time(match: re.Match[str]) -> datetime | None:
    """An ISO 8601 stamp as dmesg, journalctl, rsyslog and Talos print it: `,` or `.` before
    up to nine fraction digits, `Z`, `+0100`, `+01:00` or a trailing ` UTC`; None for a stamp
    with no such date."""
    day_time = match["ts"][:19].replace(" ", "T")
    fraction = (match["frac"] or "")[1:7]
    zone = (match["zone"] or "").strip()
    if zone in ("Z", "UTC", "GMT"):
        zone = "+00:00"
    elif zone and ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    try:
        return datetime.fromisoformat(f"{day_time}{'.' + fraction if fraction else ''}{zone}")
    except ValueError:
        return None
