"""`fi_info` (libfabric) output: provider blocks, verbose blocks, provider lists, failures.

Formats read, as libfabric's `util/info.c` and `src/fi_tostr.c` print them (libfabric 1.x and 2.x)
and as public captures show them (tests/fixtures/outputs/efa/SOURCES.md):

- the default listing (`fi_info`, `fi_info -p efa`, `fi_info -p efa -t FI_EP_RDM`), one block
  per fabric/domain/endpoint type:

      provider: efa
          fabric: efa                     (EFA-fe80::... before libfabric 1.18, efa-direct in 2.x)
          domain: rdmap16s27-rdm          (efa_0-rdm on early kernels, -dgrm for FI_EP_DGRAM)
          version: 111.20
          type: FI_EP_RDM
          protocol: FI_PROTO_EFA

- the verbose listing (`fi_info -v`): `---`, `fi_info:` and nested `fi_*_attr:` sections, read
  for the same six facts plus the NIC name (`nic: fi_device_attr: name:`);
- the provider list (`fi_info -l`): `efa:` followed by `    version: 120.10`;
- `fi_info --version`: `fi_info: 1.22.0amzn5.0`, `libfabric: ...`, `libfabric api: 1.22`;
- failures: `fi_getinfo: -61 (No data available)` (libfabric >= 1.18 adds the strerror text),
  `fi_getinfo: -61`, `fi_getinfo: -2`, or the bare code line.

Output gathered from several hosts keeps its devices per host. A host is told by a launcher
prefix (pdsh/clush `host: `, `srun --label` `0: `, Open MPI `[1,0]<stdout>:`; task and rank
labels read as `task 0` and `rank 0`), by a shell prompt `user@host ...$ fi_info ...`, or by a
host header between runs (dshbak's dashed box, `==> host <==`, `=== host ===`, or a bare
`host:` line). Anything else (ssh warnings, MOTD, prompts, libfabric log lines, `...` elisions)
is kept in `ignored` rather than aborting the parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """Text that holds no fi_info provider block, provider list, version or fi_getinfo error."""


class NoFabricDataError(Exception):
    """`fi_getinfo: -61 (No data available)` (or another code): no provider matched anywhere."""

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
    host: str | None = None
    nic: str | None = None

    @property
    def device(self) -> str:
        """The NIC (verbose output) or the domain less its endpoint suffix: `rdmap16s27-rdm`."""
        return self.nic or re.sub(r"-(?:rdm|dgrm|dgram|xrc)$", "", self.domain)


class ProviderVersion(Record):
    """One provider of `fi_info -l`."""

    name: str
    version: str


class GetinfoFailure(Record):
    """`fi_getinfo: <code> (<strerror>)`; `message` is absent before libfabric 1.18."""

    code: int
    message: str | None = None


def _distinct(entries: tuple[FiInfoEntry, ...], provider: str, attr: str) -> tuple[str, ...]:
    # Keyed by host too: the same device name on two hosts is two devices.
    pairs = ((e.host, getattr(e, attr)) for e in entries if e.provider == provider)
    return tuple(value for _, value in dict.fromkeys(pairs))


class FiInfoHost(Record):
    """What one host (or rank/task) printed; `name` is None where no host was named."""

    name: str | None
    entries: tuple[FiInfoEntry, ...] = ()
    providers: tuple[ProviderVersion, ...] = ()
    failure: GetinfoFailure | None = None
    fi_info_version: str | None = None
    libfabric_version: str | None = None
    api_version: str | None = None

    def domains(self, provider: str = "efa") -> tuple[str, ...]:
        return _distinct(self.entries, provider, "domain")

    def devices(self, provider: str = "efa") -> tuple[str, ...]:
        return _distinct(self.entries, provider, "device")

    def endpoint_types(self, provider: str = "efa") -> tuple[str, ...]:
        return _distinct(self.entries, provider, "type")

    def fabrics(self, provider: str = "efa") -> tuple[str, ...]:
        return _distinct(self.entries, provider, "fabric")


class FiInfoResult(Record):
    entries: tuple[FiInfoEntry, ...]
    hosts: tuple[FiInfoHost, ...] = ()
    ignored: tuple[str, ...] = ()

    def domains(self, provider: str = "efa") -> tuple[str, ...]:
        """Distinct domains of one provider per host, in the order printed."""
        return _distinct(self.entries, provider, "domain")

    def devices(self, provider: str = "efa") -> tuple[str, ...]:
        """Distinct devices of one provider per host (two hosts' `rdmap79s0` count twice)."""
        return _distinct(self.entries, provider, "device")

    def host(self, name: str | None) -> FiInfoHost:
        for host in self.hosts:
            if host.name == name:
                return host
        known = ", ".join(str(h.name) for h in self.hosts)
        raise KeyError(f"no fi_info output from host {name!r}; hosts: {known}")

    def failed_hosts(self) -> tuple[FiInfoHost, ...]:
        return tuple(h for h in self.hosts if h.failure is not None)


SHORT_KEYS = ("provider", "fabric", "domain", "version", "type", "protocol")
_SHORT = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(.*?)\s*$")
_GETINFO = re.compile(r"^fi_getinfo:\s*(-?\d+)(?:\s*\((.*)\))?\s*$")
_BARE_CODE = re.compile(r"^(-\d+)$")
_TOOL_VERSION = re.compile(r"^(?:\S*/)?fi_info: (\S+)$")
_LIB_VERSION = re.compile(r"^libfabric: (\S+)$")
_API_VERSION = re.compile(r"^libfabric api: (\S+)$")
_LABEL = re.compile(r"^([\w;.-]+):$")
_NESTED = re.compile(r"^(\s*)(\w+):(?:\s+(.*?))?\s*$")

_MPIRUN = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:\s?(.*)$")
_SRUN = re.compile(r"^\s*(\d+): (.*)$")
_PDSH = re.compile(r"^([A-Za-z0-9][\w.-]*): (.*)$")
_PROMPT = re.compile(r"^\[?[\w.-]+@([\w.-]+)[:\s][^$#]*[$#]\s*(.*)$")
# Words that start fi_info's own `word: ` lines, never a pdsh host.
_NOT_HOSTS = frozenset((*SHORT_KEYS, "fi_getinfo", "fi_info", "libfabric"))
# `ssh [options] [user@]host command`; options named here take an argument.
_SSH = re.compile(
    r"\bssh\s+(?:-[bcDEeFIiJLlmOopQRSWw]\s*\S+\s+|-\S+\s+)*(?:[\w.-]+@)?([A-Za-z0-9][\w.-]*)\s"
)
_DASHES = re.compile(r"^-{4,}$")
_BOXED_HOST = re.compile(r"^([\w.\-\[\],]+)(?: \(\d+\))?$")
_DECORATED_HOST = re.compile(r"^(?:==>\s*(\S+)\s*<==|[=#*]{2,}\s*([\w.-]+)\s*[=#*]{2,})$")

# Verbose paths (below `fi_info:`) that make an entry, and the entry field each fills.
_VERBOSE_FIELDS = {
    "fi_fabric_attr/prov_name": "provider",
    "fi_fabric_attr/name": "fabric",
    "fi_domain_attr/name": "domain",
    "fi_fabric_attr/prov_version": "version",
    "fi_ep_attr/type": "type",
    "fi_ep_attr/protocol": "protocol",
    "nic/fi_device_attr/name": "nic",
}


def _is_payload(rest: str) -> bool:
    """Whether the text after a `host: ` candidate is fi_info output, so the prefix is a host."""
    stripped = rest.strip()
    return bool(
        _SHORT.match(rest)
        or stripped in ("---", "fi_info:")
        or _GETINFO.match(stripped)
        or _BARE_CODE.match(stripped)
        or _LABEL.match(rest)
        or (rest[:1].isspace() and _NESTED.match(rest))
        or _TOOL_VERSION.match(stripped)
        or _LIB_VERSION.match(stripped)
        or _API_VERSION.match(stripped)
    )


def split_launcher_prefix(line: str) -> tuple[str | None, str]:
    """(`rank N`, `task N` or host; rest) of mpirun, srun --label, pdsh lines; else (None, line)."""
    if m := _MPIRUN.match(line):
        return f"rank {m.group(1)}", m.group(2)
    if (m := _SRUN.match(line)) and _is_payload(m.group(2)):
        return f"task {m.group(1)}", m.group(2)
    if (m := _PDSH.match(line)) and m.group(1) not in _NOT_HOSTS and _is_payload(m.group(2)):
        return m.group(1), m.group(2)
    return None, line


def _box_headers(lines: list[str]) -> dict[int, str | None]:
    """dshbak/clush `-b` headers: a host line between two dashed lines (1-based numbers)."""
    headers: dict[int, str | None] = {}
    for i in range(len(lines) - 2):
        top, middle, bottom = (line.strip() for line in lines[i : i + 3])
        if _DASHES.match(top) and _DASHES.match(bottom) and (m := _BOXED_HOST.match(middle)):
            headers.update({i + 1: None, i + 2: m.group(1), i + 3: None})
    return headers


@dataclass
class _Verbose:
    start: int
    sections: list[tuple[int, str]] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)

    def feed(self, indent: int, key: str, value: str | None) -> None:
        while self.sections and self.sections[-1][0] >= indent:
            self.sections.pop()
        if value is None:
            self.sections.append((indent, key))
            return
        path = "/".join([name for _, name in self.sections if name != "fi_info"] + [key])
        if path in _VERBOSE_FIELDS:
            self.values[_VERBOSE_FIELDS[path]] = value


@dataclass
class _Source:
    """The parse state of one host's (rank's, task's) stream of lines."""

    name: str | None
    block: dict[str, str] = field(default_factory=dict)
    block_start: int = 0
    verbose: _Verbose | None = None
    label: tuple[int, str, str] | None = None
    providers: list[ProviderVersion] = field(default_factory=list)
    failure: GetinfoFailure | None = None
    versions: dict[str, str] = field(default_factory=dict)
    has_entries: bool = False

    def said_something(self) -> bool:
        return bool(self.has_entries or self.providers or self.failure or self.versions)


class _Reader:
    def __init__(self, headers: dict[int, str | None]) -> None:
        self.headers = headers
        self.sources: dict[str | None, _Source] = {}
        self.current: str | None = None
        self.entries: list[tuple[int, FiInfoEntry]] = []
        self.ignored: list[tuple[int, str]] = []
        self.incomplete: list[str] = []

    def source(self, name: str | None) -> _Source:
        if name not in self.sources:
            self.sources[name] = _Source(name)
        return self.sources[name]

    def feed(self, number: int, raw: str) -> None:
        if number in self.headers:
            if (host := self.headers[number]) is not None:
                self._switch(host)
            return
        line = raw.rstrip()
        if not line.strip():
            return
        host, text = split_launcher_prefix(line)
        if host is None and self._host_marker(text):
            return
        self._content(self.source(self.current if host is None else host), number, raw, text)

    def _host_marker(self, text: str) -> bool:
        """Prompts running fi_info (on the host, or `ssh host fi_info`) and `==> host <==` headers
        switch the current host."""
        if m := _PROMPT.match(text):
            if "fi_info" in m.group(2):
                remote = _SSH.search(m.group(2))
                self._switch(remote.group(1) if remote else m.group(1))
            return True
        if m := _DECORATED_HOST.match(text):
            self._switch(m.group(1) or m.group(2))
            return True
        return False

    def _switch(self, host: str) -> None:
        self._close(self.source(self.current))
        self.current = host

    def _content(self, src: _Source, number: int, raw: str, text: str) -> None:
        if (label := src.label) is not None:
            src.label = None
            self._after_label(src, label, number, raw, text)
            return
        stripped = text.strip()
        if m := _GETINFO.match(stripped) or _BARE_CODE.match(stripped):
            self._close(src)
            message = m.group(2) if m.re is _GETINFO else None
            src.failure = src.failure or GetinfoFailure(code=int(m.group(1)), message=message)
        elif self._version(src, stripped):
            pass
        elif stripped in ("---", "fi_info:"):
            # `fi_info:` right after `---` belongs to the block that `---` opened.
            fresh = src.verbose is not None and not (src.verbose.sections or src.verbose.values)
            if stripped == "---" or not fresh:
                self._close(src)
                src.verbose = _Verbose(number)
        elif src.verbose is not None and not text.startswith("provider:"):
            self._verbose_line(src.verbose, number, raw, text)
        elif m := _SHORT.match(text):
            self._short(src, number, raw, m.group(1), m.group(2))
        elif m := _LABEL.match(text):
            self._close(src)
            src.label = (number, raw, m.group(1))
        else:
            self.ignored.append((number, raw))

    def _after_label(
        self, src: _Source, label: tuple[int, str, str], number: int, raw: str, text: str
    ) -> None:
        """`efa:` + `    version: 1.0` is a provider of `fi_info -l`; else `name:` heads a host."""
        label_number, label_raw, name = label
        m = _SHORT.match(text)
        if m and m.group(1) == "version" and text[:1].isspace():
            src.providers.append(ProviderVersion(name=name, version=m.group(2)))
            return
        if src.name == self.current:
            self._switch(name)
            src = self.source(self.current)
        else:
            self.ignored.append((label_number, label_raw))
        self._content(src, number, raw, text)

    @staticmethod
    def _version(src: _Source, stripped: str) -> bool:
        for key, pattern in (
            ("fi_info", _TOOL_VERSION),
            ("libfabric", _LIB_VERSION),
            ("api", _API_VERSION),
        ):
            if m := pattern.match(stripped):
                src.versions[key] = m.group(1)
                return True
        return False

    def _verbose_line(self, verbose: _Verbose, number: int, raw: str, text: str) -> None:
        if m := _NESTED.match(text):
            verbose.feed(len(m.group(1)), m.group(2), m.group(3))
        else:
            self.ignored.append((number, raw))

    def _short(self, src: _Source, number: int, raw: str, key: str, value: str) -> None:
        if key == "provider":
            self._close(src)
            src.block, src.block_start = {"provider": value}, number
        elif src.block and key not in src.block:
            src.block[key] = value
        else:
            self.ignored.append((number, raw))

    def _close(self, src: _Source) -> None:
        if src.block:
            self._add(src, src.block, src.block_start, "provider block")
            src.block = {}
        if src.verbose is not None:
            if src.verbose.values:
                self._add(src, src.verbose.values, src.verbose.start, "verbose fi_info block")
            src.verbose = None

    def _add(self, src: _Source, values: dict[str, str], start: int, what: str) -> None:
        missing = [key for key in SHORT_KEYS if key not in values]
        if missing:
            self.incomplete.append(f"{what} starting at line {start} lacks {', '.join(missing)}")
            return
        known = {key: values[key] for key in (*SHORT_KEYS, "nic") if key in values}
        self.entries.append((start, FiInfoEntry(**known, host=src.name)))
        src.has_entries = True

    def result(self, output: str) -> FiInfoResult:
        for src in list(self.sources.values()):
            self._close(src)
            if src.label is not None:
                self.ignored.append(src.label[:2])
        entries = tuple(entry for _, entry in sorted(self.entries, key=lambda pair: pair[0]))
        hosts = tuple(_host(src, entries) for src in self.sources.values() if src.said_something())
        if not any(
            h.entries or h.providers or h.libfabric_version or h.fi_info_version for h in hosts
        ):
            self._nothing(hosts, output)
        ignored = [f"line {number}: {raw!r}" for number, raw in sorted(self.ignored)]
        return FiInfoResult(entries=entries, hosts=hosts, ignored=tuple(ignored + self.incomplete))

    def _nothing(self, hosts: tuple[FiInfoHost, ...], output: str) -> None:
        for host in hosts:
            if host.failure is not None:
                raise NoFabricDataError(host.failure.code, output)
        if self.incomplete:
            raise ParseError(self.incomplete[0])
        if self.ignored:
            number, raw = min(self.ignored)
            raise ParseError(
                f"line {number} is not a 'key: value' line of fi_info: {raw!r} (and no provider"
                " block, provider list, version or fi_getinfo error was found)"
            )
        raise ParseError("fi_info printed nothing: no provider block and no fi_getinfo error")


def _host(src: _Source, entries: tuple[FiInfoEntry, ...]) -> FiInfoHost:
    return FiInfoHost(
        name=src.name,
        entries=tuple(e for e in entries if e.host == src.name),
        providers=tuple(src.providers),
        failure=src.failure,
        fi_info_version=src.versions.get("fi_info"),
        libfabric_version=src.versions.get("libfabric"),
        api_version=src.versions.get("api"),
    )


def parse_fi_info(output: str) -> FiInfoResult:
    """Parse fi_info's listings from one or several hosts, noise lines tolerated.

    Raises `NoFabricDataError` when all that was printed is an `fi_getinfo` failure (on one host
    or on all); a failure on some hosts while others list providers is left in
    `FiInfoHost.failure` (see `FiInfoResult.failed_hosts`).
    """
    lines = output.splitlines()
    reader = _Reader(_box_headers(lines))
    for number, raw in enumerate(lines, start=1):
        reader.feed(number, raw)
    return reader.result(output)
