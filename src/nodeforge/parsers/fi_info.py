"""`fi_info -p efa` (and `fi_info -p efa -t FI_EP_RDM`) output.

fi_info prints one block per fabric/domain/endpoint-type combination:

    provider: efa
        fabric: efa
        domain: rdmap16s27-rdm
        version: 111.20
        type: FI_EP_RDM
        protocol: FI_PROTO_EFA

Each EFA device shows up once per endpoint type (`-rdm`, `-dgrm` domain suffixes) and, with
libfabric >= 2.x, once per fabric (`efa`, `efa-direct`), so devices are counted by domain name
without its suffix. When the provider finds nothing fi_info prints `fi_getinfo: -61` (newer
builds add `(No data available)`), raised here as `NoFabricDataError`.
"""

from __future__ import annotations

import re

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """Text that is neither fi_info provider blocks nor an `fi_getinfo` error."""


class NoFabricDataError(Exception):
    """`fi_getinfo: -61 (No data available)`: the provider found no usable device."""

    def __init__(self, code: int, output: str) -> None:
        super().__init__(f"fi_getinfo returned {code}: no fabric matched (no EFA device usable)")
        self.code = code
        self.output = output


class FiInfoEntry(Record):
    provider: str
    fabric: str
    domain: str
    version: str
    type: str
    protocol: str

    @property
    def device(self) -> str:
        """The domain without its endpoint-type suffix: `rdmap16s27-rdm` -> `rdmap16s27`."""
        return re.sub(r"-(?:rdm|dgrm)$", "", self.domain)


class FiInfoResult(Record):
    entries: tuple[FiInfoEntry, ...]

    def domains(self, provider: str = "efa") -> tuple[str, ...]:
        """Distinct domains of one provider, in the order printed."""
        return tuple(dict.fromkeys(e.domain for e in self.entries if e.provider == provider))

    def devices(self, provider: str = "efa") -> tuple[str, ...]:
        """Distinct devices of one provider (domains less their `-rdm`/`-dgrm` suffix)."""
        return tuple(dict.fromkeys(e.device for e in self.entries if e.provider == provider))


_PREFIX = re.compile(r"^(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:)")
_GETINFO = re.compile(r"fi_getinfo:\s*(-?\d+)")
_KEY = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(.*?)\s*$")
_KEYS = ("provider", "fabric", "domain", "version", "type", "protocol")


def _entry(block: dict[str, str], number: int) -> FiInfoEntry:
    missing = [key for key in _KEYS if key not in block]
    if missing:
        raise ParseError(f"provider block ending before line {number} lacks {', '.join(missing)}")
    return FiInfoEntry(**block)


def parse_fi_info(output: str) -> FiInfoResult:
    """Parse fi_info's default (non-verbose) listing; launcher prefixes tolerated.

    Several ranks' output interleaved by mpirun is read block by block: a `provider:` line
    starts a new block.
    """
    if m := _GETINFO.search(output):
        raise NoFabricDataError(int(m.group(1)), output)
    entries: list[FiInfoEntry] = []
    block: dict[str, str] = {}
    number = 0
    for number, raw in enumerate(output.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        if not line.strip():
            continue
        m = _KEY.match(line)
        if m is None:
            raise ParseError(f"line {number} is not a 'key: value' line of fi_info: {raw!r}")
        key, value = m.groups()
        if key == "provider" and block:
            entries.append(_entry(block, number))
            block = {}
        elif key != "provider" and not block:
            raise ParseError(f"line {number}: '{key}' before any 'provider:' line")
        block[key] = value
    if block:
        entries.append(_entry(block, number + 1))
    if not entries:
        raise ParseError("fi_info printed nothing: no provider block and no fi_getinfo error")
    return FiInfoResult(entries=tuple(entries))
