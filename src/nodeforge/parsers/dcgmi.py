"""`dcgmi diag` (table and `-j` JSON), `dcgmi discovery -l`, `dcgmi health -c` and the error
texts dcgmi prints instead of any of them.

Learned from NVIDIA/DCGM's own writers (`dcgmi/Diag.cpp`, `Query.cpp`, `Health.cpp`,
`DcgmiOutput.cpp`, `Command.cpp`, `nvvs/include/NvvsJsonStrings.h`,
`testing/python3/dcgm_diag_schema.json`, DCGM 2.2 to 4.6) and from the real outputs listed in
tests/fixtures/outputs/dcgmi/SOURCES.md.

Diag table (`dcgmi diag -r 1|2|3|4`): a boxed two-column table, `| Diagnostic | Result |`, cut
into sections by `|-----  Metadata  ---...|` / `+-----  Hardware  ---...+` rows (Metadata from
3.1, Deployment, Integration, Hardware, Stress; 2.x also Training). Values are 45-character
chunks, so long messages continue on rows with an empty name cell. Per version:

* 2.x/3.x deployment rows: `| Denylist | Pass |` (`Blacklist` before 3.0), a failing one
  followed by `| Error | <message> |` (2.x) or `| Warning | ... |`.
* 2.x/3.x plugin rows carry a GPU scope: `Pass - All`, `Fail - GPU: 0`, then more scopes on
  unnamed rows (`| | Warn - GPUs: 1, 2 |`), then `| Warning | GPU 0 ... |` and (`-v`, or on
  failure) `| Info | GPU 1 ... |` rows; the GPU is named in the message text.
* 4.x: one row per test with its overall result (`| pcie | Fail |`), global `Warning`/`Info`
  rows, then one `| | GPU0: Pass |` row per entity (`CPU0: ...` too), each followed by its own
  `| Warning: GPU0 | ... |` / `| Info: GPU0 | ... |` rows. Statuses: Pass, Fail, Warn, Skip,
  Not Run.

Diag JSON (`-j`): `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
[{"name", "results": [...]}]}]}}` up to 3.x, `"DCGM Diagnostic"` from 4.0. Results carry
`gpu_ids` ("0", "0,1,2" or 0; 2.x/3.0-3.2), `gpu_id` ("0"; 3.3, where an integer `gpu_id` on a
deployment result names the GPU of its error) or `entity_group`/`entity_id` (4.x, plus a
`test_summary` per test, `entity_groups` and `metadata` at the top). `warnings` is a string
(2.x) or a list of `{"warning", "error_id", ...}` objects (3.3's deployment results misspell the
key `warnings`); `info` is a string or a list. A run that fails outright prints
`{"DCGM Diagnostic": {"runtime_error": "...", "version": ...}}`; `--iterations` wraps the runs in
`{"iterations": [...], "Overall Result": ...}`.

Failures (each raised as a subclass of `DcgmiFailureError`): `Error: unable to establish a
connection to the specified host: localhost` / `Error: Unable to connect to host engine. Host
engine connection invalid/disconnected.` (no nv-hostengine), `Error: Unable to complete
diagnostic for group 0. Return: (-30) : DCGM GPU Diagnostic returned an error` plus the system
errors (for `entities 0,1`, or without a group, from 4.x; `Return: (-30) <text>.` before),
the homogeneous-group, unsupported-driver, paused and no-GPU texts.

Discovery (`dcgmi discovery -l`): `N GPUs found.` (`N GPUs found (Active).` in 4.5+), one box
per GPU (`| 0 | Name: ... |`, `PCI Bus ID: ...`, `Device UUID: ...`, `Status: ...` with `-a`),
then `N NvSwitches found.` with a `Switch ID` column, `N ConnectX found.` (4.x) and
`N CPUs found.` (Grace: `Name`, `Serial number`, `Cores`).

Health (`dcgmi health -c`): a `Health Monitor Report` tree, `| Overall Health | Warning |`, then
`| GPU | |`, `| -> 0 | Warning |`, `|    -> Errors | |`, `|       -> PCIe system | Warning |`
and the incident text on unlabelled rows; with `-j` the same tree as `{"header": [...],
"body": {"Overall Health": {"value": ...}, "GPU": {"children": ...}}}`.

`parse_dcgmi` tells these apart and returns the matching record (each has a `kind`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal

from nodeforge.parsers.record import Record

Status = Literal["Pass", "Fail", "Warn", "Skip", "Not Run"]
Verdict = Literal["pass", "fail", "warn", "nothing ran"]
MessageKind = Literal["warning", "info", "error", "note"]

_ORDER: tuple[Status, ...] = ("Fail", "Warn", "Pass", "Skip", "Not Run")


class ParseError(ValueError):
    """Text that is no dcgmi output this module reads, nor a known dcgmi error text."""


class DcgmiFailureError(Exception):
    """dcgmi ran but printed an error instead of results."""

    def __init__(self, message: str, output: str, return_code: int | None = None) -> None:
        super().__init__(message)
        self.output = output
        self.return_code = return_code


class DcgmiConnectionError(DcgmiFailureError):
    """No host engine to talk to: nv-hostengine not running, or DCGM failed to initialise."""


class DcgmiDiagnosticError(DcgmiFailureError):
    """The diagnostic could not run to completion (`Unable to complete diagnostic ...`)."""


class DcgmiNoGpusError(DcgmiFailureError):
    """There was no GPU to run on (empty group, no GPU found)."""


class DcgmiUnsupportedError(DcgmiFailureError):
    """DCGM refused the GPU or driver (`not supported`, not a datacenter driver)."""


class DcgmMessage(Record):
    """A warning, info, error or unlabelled line dcgmi printed, and the GPU it is about."""

    kind: MessageKind
    text: str
    gpu_id: int | None = None
    error_id: int | None = None


class DcgmGpuResult(Record):
    """One result: the entities it covers (empty: all, as the table says), status, messages."""

    gpu_ids: tuple[int, ...]
    status: Status
    notes: tuple[DcgmMessage, ...] = ()
    entity_group: str = "GPU"

    @property
    def messages(self) -> tuple[str, ...]:
        return tuple(note.text for note in self.notes)


def _worst(statuses: set[Status]) -> Status:
    return next((s for s in _ORDER if s in statuses), "Not Run")


class DcgmTest(Record):
    category: str
    name: str
    results: tuple[DcgmGpuResult, ...]
    summary: Status | None = None
    """The status dcgmi printed for the whole test (4.x row or test_summary, `X - All`)."""
    notes: tuple[DcgmMessage, ...] = ()
    """Messages not tied to one entity's result."""

    @property
    def status(self) -> Status:
        """The worst of the summary and the results: Fail > Warn > Pass > Skip > Not Run."""
        statuses = {result.status for result in self.results}
        if self.summary is not None:
            statuses.add(self.summary)
        return _worst(statuses)

    def gpu_status(self, gpu_id: int) -> Status | None:
        """This GPU's own result, else the one for all GPUs, else the summary."""
        gpus = [r for r in self.results if r.entity_group == "GPU"]
        own = {r.status for r in gpus if gpu_id in r.gpu_ids}
        every = {r.status for r in gpus if not r.gpu_ids}
        if own or every:
            return _worst(own or every)
        return self.summary

    @property
    def all_notes(self) -> tuple[DcgmMessage, ...]:
        return self.notes + tuple(note for result in self.results for note in result.notes)


class DcgmDiag(Record):
    version: str | None
    tests: tuple[DcgmTest, ...]
    driver_version: str | None = None
    device_ids: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    notes: tuple[DcgmMessage, ...] = ()
    """Rows outside any test (excerpts that start mid-table)."""
    kind: Literal["diag"] = "diag"

    def test(self, name: str) -> DcgmTest:
        for test in self.tests:
            if test.name == name:
                return test
        raise ParseError(f"no test '{name}'; tests: {', '.join(t.name for t in self.tests)}")

    @property
    def failed_tests(self) -> tuple[str, ...]:
        return tuple(test.name for test in self.tests if test.status == "Fail")

    @property
    def warned_tests(self) -> tuple[str, ...]:
        return tuple(test.name for test in self.tests if test.status == "Warn")

    @property
    def verdict(self) -> Verdict:
        """fail / warn / pass by the worst test; `nothing ran` when every test was skipped."""
        if not self.tests:
            kinds = {note.kind for note in self.notes}
            if "error" in kinds:
                return "fail"
            return "warn" if "warning" in kinds else "nothing ran"
        worst = _worst({test.status for test in self.tests})
        verdicts: dict[Status, Verdict] = {"Fail": "fail", "Warn": "warn", "Pass": "pass"}
        return verdicts.get(worst, "nothing ran")

    @property
    def passed(self) -> bool:
        """No test failed and at least one ran."""
        return self.verdict in ("pass", "warn")


class DcgmDevice(Record):
    entity_id: int
    name: str | None
    pci_bus_id: str | None = None
    uuid: str | None = None
    status: str | None = None
    """`Status: ...` that `discovery -l -a` prints for a GPU that is not active."""
    error: str | None = None


class DcgmCpu(Record):
    entity_id: int
    name: str | None
    serial: str | None = None
    cores: str | None = None


class DcgmDiscovery(Record):
    gpu_count: int
    """As printed (`N GPUs found.`); an excerpt may list fewer boxes."""
    gpus: tuple[DcgmDevice, ...]
    nvswitch_ids: tuple[int, ...] = ()
    connectx_ids: tuple[int, ...] = ()
    cpus: tuple[DcgmCpu, ...] = ()
    kind: Literal["discovery"] = "discovery"


class DcgmHealthIncident(Record):
    system: str
    health: str
    message: str


class DcgmHealthEntity(Record):
    entity_group: str
    entity_id: int
    health: str
    incidents: tuple[DcgmHealthIncident, ...]


class DcgmHealth(Record):
    overall: str
    """Healthy, Warning or Failure."""
    entities: tuple[DcgmHealthEntity, ...]
    kind: Literal["health"] = "health"

    @property
    def healthy(self) -> bool:
        return self.overall == "Healthy"


DcgmiOutput = DcgmDiag | DcgmDiscovery | DcgmHealth

# --- statuses and messages -------------------------------------------------------------------

_STATUS: dict[str, Status] = {
    "pass": "Pass",
    "passed": "Pass",
    "fail": "Fail",
    "failed": "Fail",
    # not a word dcgmi prints for a result, but nvvs turns any result it cannot name into a
    # failure (NvvsPluginResultToDiagResult), and a summary saying Error is read the same way
    "error": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "skip": "Skip",
    "skipped": "Skip",
    "not run": "Not Run",
    "not_run": "Not Run",
}
_GPU_IN_TEXT = re.compile(r"\bGPU\s*(\d+)\b")
_BLANK = re.compile(r"^<<<\w+>>>$")


def _status_or_none(raw: object) -> Status | None:
    return _STATUS.get(str(raw).strip().lower())


def _status(raw: object, where: str) -> Status:
    status = _status_or_none(raw)
    if status is None:
        raise ParseError(f"{where}: unknown status {raw!r}")
    return status


def _message(kind: MessageKind, text: str, gpu_id: int | None = None) -> DcgmMessage:
    """A message; its GPU is the one given, else the first `GPU N` its text names."""
    if gpu_id is None and (m := _GPU_IN_TEXT.search(text)):
        gpu_id = int(m.group(1))
    return DcgmMessage(kind=kind, text=text, gpu_id=gpu_id)


def _blank_to_none(value: str) -> str | None:
    """DCGM prints `<<<NULL>>>`, `<<<NOT_SUPPORTED>>>` ... for values it does not have."""
    value = value.strip()
    return None if not value or _BLANK.match(value) else value


# --- failure texts ---------------------------------------------------------------------------

_RETURN_CODE = re.compile(r"Return:\s*\((-?\d+)\)")
_CONNECTION = (
    "unable to establish a connection to the specified host",
    "unable to connect to host engine",
    "host engine connection invalid",
    "unable to initialize dcgm",
    "unable to start an embedded host engine",
)
_NO_GPUS = ("no gpus", "there were no gpus in group", "group is empty", "0 devices")
_UNSUPPORTED = (
    "tesla recommended driver is not being used",
    "not supported by dcgm",
    "unsupported gpu",
)
_DIAGNOSTIC = (
    "unable to complete diagnostic",
    "homogeneous group of gpus",
    "diagnostic could not be run",
    "aborting the iterative runs of the diagnostic",
)
_CODE_CLASS: dict[int, type[DcgmiFailureError]] = {
    -21: DcgmiConnectionError,  # DCGM_ST_CONNECTION_NOT_VALID
    -22: DcgmiUnsupportedError,  # DCGM_ST_GPU_NOT_SUPPORTED
    -35: DcgmiNoGpusError,  # DCGM_ST_GROUP_IS_EMPTY
}


_ERROR_LINE = re.compile(r"^(?:Error|ERROR):\s|^Aborting the iterative runs")


def _error_lines(text: str) -> list[str]:
    """From dcgmi's first `Error: ` line on: the system errors follow it unprefixed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if _ERROR_LINE.match(line)), len(lines))
    return lines[first:]


def _failure_class(low: str, code: int | None) -> type[DcgmiFailureError] | None:
    if code is not None and code in _CODE_CLASS:
        return _CODE_CLASS[code]
    for needles, cls in (
        (_CONNECTION, DcgmiConnectionError),
        (_NO_GPUS, DcgmiNoGpusError),
        (_UNSUPPORTED, DcgmiUnsupportedError),
        (_DIAGNOSTIC, DcgmiDiagnosticError),
    ):
        if any(needle in low for needle in needles):
            return cls
    return None


def _failure(message: str, output: str) -> DcgmiFailureError | None:
    """The exception for a dcgmi error text, or None when the text is none of them."""
    code_match = _RETURN_CODE.search(message)
    code = int(code_match.group(1)) if code_match else None
    cls = _failure_class(message.lower(), code)
    return None if cls is None else cls(message, output, code)


def check_dcgmi_failure(text: str) -> None:
    """Raise the `DcgmiFailureError` subclass for the error text dcgmi printed, if any.

    Only dcgmi's own `Error: ...` phrasings are recognised (see the module docstring); any other
    `Error:` line raises the base class, so that a run that printed nothing else is not taken
    for an empty result.
    """
    lines = _error_lines(text)
    if not lines:
        return
    message = "\n".join(lines)
    error = _failure(message, text)
    raise error if error is not None else DcgmiFailureError(message, text)


# --- diag JSON -------------------------------------------------------------------------------

_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")


def _json_start(text: str) -> int:
    """Where the document starts: the first line that begins with `{`, else the first `{`."""
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("{"):
            return offset + line.index("{")
        offset += len(line)
    return text.find("{")


def _has_json(text: str) -> bool:
    return any(line.lstrip().startswith("{") for line in text.splitlines())


def _load_json(text: str) -> dict[str, object]:
    """The JSON document in dcgmi's output; text before it (and a prompt after it) is ignored."""
    start = _json_start(text)
    if start < 0:
        raise ParseError("no JSON object in dcgmi output")
    try:
        document, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as err:
        raise ParseError(f"dcgmi output is not valid JSON: {err}") from err
    if not isinstance(document, dict):
        raise ParseError("dcgmi JSON is not an object")
    return document


def _list(raw: object, where: str) -> list[object]:
    if not isinstance(raw, list):
        raise ParseError(f"{where}: expected a list")
    return raw


def _dict(raw: object) -> dict[str, object]:
    return raw if isinstance(raw, dict) else {}


def _gpu_ids(raw: object, where: str) -> tuple[int, ...]:
    if isinstance(raw, bool):
        raise ParseError(f"{where}: gpu id {raw!r} is not a number")
    if isinstance(raw, int):
        return (raw,)
    if isinstance(raw, str) and re.fullmatch(r"\s*\d+(?:\s*,\s*\d+)*\s*", raw):
        return tuple(int(part) for part in raw.split(","))
    raise ParseError(f"{where}: gpu ids {raw!r} are neither an integer nor a CSV of integers")


def _json_note(kind: MessageKind, item: object, gpu_id: int | None) -> DcgmMessage:
    if not isinstance(item, dict):
        return _message(kind, str(item), gpu_id)
    # 3.3 writes the deployment warning text under "warnings" instead of "warning"
    text = next((item[k] for k in ("warning", "warnings", "message", "info") if k in item), item)
    error_id = item.get("error_id")
    note = _message(kind, str(text), gpu_id)
    if isinstance(error_id, int) and not isinstance(error_id, bool):
        return note.model_copy(update={"error_id": error_id})
    return note


def _json_notes(raw: dict[str, object], gpu_id: int | None) -> tuple[DcgmMessage, ...]:
    notes: list[DcgmMessage] = []
    keys: tuple[tuple[str, MessageKind], ...] = (("warnings", "warning"), ("info", "info"))
    for key, kind in keys:
        value = raw.get(key)
        items = value if isinstance(value, list) else [] if value is None else [value]
        notes.extend(_json_note(kind, item, gpu_id) for item in items)
    return tuple(notes)


def _json_result(raw: object, where: str) -> DcgmGpuResult:
    if not isinstance(raw, dict):
        raise ParseError(f"{where}: result is not an object")
    if "status" not in raw:
        raise ParseError(f"{where}: result has no 'status'")
    key = next((k for k in ("gpu_ids", "gpu_id", "entity_id") if k in raw), None)
    value = None if key is None else raw[key]
    error_gpu: int | None = None
    if key == "gpu_id" and isinstance(value, int):
        # 3.3 deployment results: an integer gpu_id is the GPU of the error, the result is for all
        error_gpu, value = value, None
    ids = () if value is None else _gpu_ids(value, where)
    group = str(raw.get("entity_group", "GPU"))
    own_gpu = ids[0] if len(ids) == 1 and group == "GPU" else error_gpu
    return DcgmGpuResult(
        gpu_ids=ids,
        status=_status(raw["status"], where),
        notes=_json_notes(raw, own_gpu),
        entity_group=group,
    )


def _json_test(raw: dict[str, object], category: str) -> DcgmTest:
    where = f"test {raw['name']!r}"
    results = tuple(
        _json_result(r, where) for r in _list(raw.get("results", []), where) if r is not None
    )
    summary_raw = _dict(raw.get("test_summary"))
    summary = _status(summary_raw["status"], where) if "status" in summary_raw else None
    # the 4.x summary repeats every entity's warnings; keep only those no result carries
    seen = {(n.kind, n.text) for r in results for n in r.notes}
    notes = tuple(n for n in _json_notes(summary_raw, None) if (n.kind, n.text) not in seen)
    return DcgmTest(
        category=category, name=str(raw["name"]), results=results, summary=summary, notes=notes
    )


def _json_tests(root: dict[str, object]) -> tuple[DcgmTest, ...]:
    tests: list[DcgmTest] = []
    for category in _list(root.get("test_categories"), "test_categories"):
        if not isinstance(category, dict):
            raise ParseError("test_categories: entry is not an object")
        name = str(category.get("category", ""))
        for test in _list(category.get("tests"), f"category {name!r}"):
            if test is None:
                continue
            if not isinstance(test, dict) or "name" not in test:
                raise ParseError(f"category {name!r}: test without a name")
            tests.append(_json_test(test, name))
    return tuple(tests)


def _json_device_ids(document: dict[str, object]) -> tuple[str, ...]:
    listed = document.get("GPU Device IDs")
    if isinstance(listed, list):
        return tuple(str(item) for item in listed)
    groups = document.get("entity_groups")
    return tuple(
        str(entity["device_id"])
        for group in (groups if isinstance(groups, list) else [])
        if _dict(group).get("entity_group") == "GPU"
        for entity in _list(_dict(group).get("entities", []), "entity_groups")
        if isinstance(entity, dict) and "device_id" in entity
    )


def _first_str(*candidates: object) -> str | None:
    return next((str(c) for c in candidates if c is not None), None)


def _diag_from_json(document: dict[str, object], output: str) -> DcgmDiag:
    if "iterations" in document:
        return _diag_from_iterations(document, output)
    root = next((document[k] for k in _ROOTS if k in document), None)
    if not isinstance(root, dict):
        raise ParseError(
            "no 'DCGM GPU Diagnostic' (DCGM 3.x) or 'DCGM Diagnostic' (4.x) object; "
            f"top-level keys: {', '.join(map(str, document))}"
        )
    if "runtime_error" in root:
        message = str(root["runtime_error"]).strip()
        raise _failure(message, output) or DcgmiDiagnosticError(message, output)
    metadata = _dict(document.get("metadata"))
    return DcgmDiag(
        version=_first_str(root.get("version"), document.get("version"), metadata.get("version")),
        tests=_json_tests(root),
        driver_version=_first_str(
            document.get("Driver Version Detected"), metadata.get("Driver Version Detected")
        ),
        device_ids=_json_device_ids(document),
    )


def _diag_from_iterations(document: dict[str, object], output: str) -> DcgmDiag:
    """`--iterations N -j`: the first failing run, else the last one."""
    runs = [
        _diag_from_json(run, output)
        for run in _list(document["iterations"], "iterations")
        if isinstance(run, dict)
    ]
    failing = [run for run in runs if run.verdict == "fail"]
    if failing:
        return failing[0]
    if runs:
        return runs[-1]
    message = str(document.get("warning", "the iterative diagnostic runs failed"))
    raise DcgmiDiagnosticError(message, output)


def parse_dcgmi_json(text: str) -> DcgmDiag:
    """Parse `dcgmi diag -j` output (text before the first `{` is ignored)."""
    return _diag_from_json(_load_json(text), text)


# --- diag table ------------------------------------------------------------------------------

_CHUNK = 45  # DATA_INFO_TAG_LEN: dcgmi cuts long values into chunks of this many characters
_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_PREFIX = re.compile(r"^[\w.\-\[\],<>]+:\s*$")
_SCOPED = re.compile(
    r"^(Pass|Fail|Warn|Skip|Not Run|Error)(?:\s*-\s*(All|GPUs?:\s*([\d,\s]+?)))?\s*$", re.I
)
_ENTITY = re.compile(r"^([A-Za-z_]+?)(\d+)\s*:\s*(\w[\w ]*?)\s*$")
_LABEL = re.compile(r"^(Warning|Info|Error)(?::\s*([A-Za-z_]+?)(\d+))?$", re.I)
_METADATA = re.compile(r"^(?:DCGM Version|Driver Version Detected|\w+ Device IDs Detected)$")


@dataclass
class _Row:
    name: str
    value: str
    chunk: str
    """The value cell as dcgmi wrote it, so that wrapped chunks join without losing spaces."""

    @property
    def full(self) -> bool:
        """A chunk of full width: the message goes on on the next row."""
        return len(self.chunk.rstrip()) >= _CHUNK - 1


def _table_line(line: str) -> str | None:
    """The line from its first `|` or `+`, after any `host:`-style prefix; None if no table."""
    line = line.rstrip()
    start = min((i for i in (line.find("|"), line.find("+")) if i >= 0), default=-1)
    if start < 0 or (start > 0 and not _PREFIX.match(line[:start])):
        return None
    return line[start:]


def _row(line: str) -> _Row | None:
    if not line.startswith("|") or "|" not in line[1:]:
        return None
    name, _, rest = line[1:].partition("|")
    rest = rest.removesuffix("|")
    chunk = rest[1:] if rest.startswith(" ") else rest
    return _Row(name=name.strip(), value=chunk.strip(), chunk=chunk[:_CHUNK])


@dataclass
class _Result:
    ids: tuple[int, ...]
    status: Status
    group: str = "GPU"
    notes: list[DcgmMessage] = field(default_factory=list)


@dataclass
class _Test:
    category: str
    name: str
    summary: Status | None
    results: list[_Result] = field(default_factory=list)
    notes: list[DcgmMessage] = field(default_factory=list)


@dataclass
class _Open:
    kind: MessageKind
    gpu_id: int | None
    target: list[DcgmMessage]
    chunks: list[str]
    full: bool


@dataclass
class _Table:
    category: str = ""
    tests: list[_Test] = field(default_factory=list)
    metadata: list[tuple[str, str]] = field(default_factory=list)
    notes: list[DcgmMessage] = field(default_factory=list)
    open: _Open | None = None

    def close(self) -> None:
        if self.open is not None:
            text = "".join(self.open.chunks).strip()
            self.open.target.append(_message(self.open.kind, text, self.open.gpu_id))
            self.open = None

    def start(self, kind: MessageKind, gpu_id: int | None, target: list[DcgmMessage]) -> _Open:
        self.close()
        self.open = _Open(kind=kind, gpu_id=gpu_id, target=target, chunks=[], full=True)
        return self.open

    def add_chunk(self, row: _Row) -> None:
        """Continue the open message; a row without one is an unlabelled note (`Code: ...`)."""
        message = self.open or self.start(
            "note", None, self.tests[-1].notes if self.tests else self.notes
        )
        message.chunks.append(row.chunk)
        message.full = row.full


def _scope(match: re.Match[str]) -> tuple[Status, tuple[int, ...] | None]:
    """`Fail - GPU: 0` -> (Fail, (0,)); `Pass - All` and bare `Pass` -> (Pass, None)."""
    status = _status(match.group(1), "table")
    ids = match.group(3)
    if ids is None:
        return status, None
    return status, tuple(int(part) for part in ids.replace(" ", "").split(",") if part)


def _add_test(table: _Table, row: _Row, match: re.Match[str]) -> None:
    status, ids = _scope(match)
    summary = status if ids is None else None
    test = _Test(category=table.category, name=row.name, summary=summary)
    test.results.append(_Result(ids=ids or (), status=status))
    table.tests.append(test)


def _add_scope(table: _Table, match: re.Match[str]) -> None:
    """A further `Warn - GPUs: 1, 2` row of a 2.x/3.x test."""
    status, ids = _scope(match)
    table.tests[-1].results.append(_Result(ids=ids or (), status=status))


def _add_entity(table: _Table, match: re.Match[str]) -> None:
    """A 4.x `GPU0: Pass` row; it replaces the all-GPU result its test row stood for."""
    test = table.tests[-1]
    status = _status(match.group(3), test.name)
    test.results = [r for r in test.results if r.ids]
    test.results.append(_Result(ids=(int(match.group(2)),), status=status, group=match.group(1)))


_LABEL_KIND: dict[str, MessageKind] = {"warning": "warning", "info": "info", "error": "error"}


def _start_message(table: _Table, label: re.Match[str]) -> None:
    kind = _LABEL_KIND[label.group(1).lower()]
    if not table.tests:
        table.start(kind, None, table.notes)
        return
    test = table.tests[-1]
    if label.group(3) is None:
        table.start(kind, None, test.notes)
        return
    group, entity = label.group(2), int(label.group(3))
    result = next((r for r in reversed(test.results) if r.group == group and entity in r.ids), None)
    target = result.notes if result is not None else test.notes
    table.start(kind, entity if group == "GPU" else None, target)


def _metadata(table: _Table, row: _Row) -> bool:
    """Record a Metadata row; True when it was one.

    Pastes that dropped the `Metadata` section row still carry the version rows.
    """
    if table.category == "Metadata" or _METADATA.match(row.name):
        table.metadata.append((row.name, row.value))
        return True
    return False


def _named_row(table: _Table, row: _Row) -> None:
    # the header row; a 2.x/3.x hardware test is also named "Diagnostic"
    if (row.name, row.value) == ("Diagnostic", "Result") or _metadata(table, row):
        return
    if label := _LABEL.match(row.name):
        _start_message(table, label)
        table.add_chunk(row)
    elif scoped := _SCOPED.match(row.value):
        _add_test(table, row, scoped)
    else:
        table.notes.append(_message("note", f"{row.name}: {row.value}"))


def _unnamed_row(table: _Table, row: _Row) -> None:
    if table.open is not None and table.open.full:
        table.add_chunk(row)
        return
    table.close()
    if not row.value:
        return
    scoped = _SCOPED.match(row.value)
    entity = _ENTITY.match(row.value)
    if table.tests and scoped:
        _add_scope(table, scoped)
    elif table.tests and entity and _status_or_none(entity.group(3)):
        _add_entity(table, entity)
    else:
        table.add_chunk(row)


def _feed(table: _Table, line: str) -> None:
    if section := _SECTION.match(line):
        table.close()
        table.category = section.group(1)
        return
    row = _row(line)
    if row is None:
        table.close()
    elif row.name:
        table.close()
        _named_row(table, row)
    else:
        _unnamed_row(table, row)


def _freeze(table: _Table) -> DcgmDiag:
    table.close()
    metadata = dict(table.metadata)
    device_ids = metadata.get("GPU Device IDs Detected", "").split(",")
    tests = tuple(
        DcgmTest(
            category=t.category,
            name=t.name,
            summary=t.summary,
            notes=tuple(t.notes),
            results=tuple(
                DcgmGpuResult(
                    gpu_ids=r.ids, status=r.status, notes=tuple(r.notes), entity_group=r.group
                )
                for r in t.results
            ),
        )
        for t in table.tests
    )
    return DcgmDiag(
        version=metadata.get("DCGM Version"),
        tests=tests,
        driver_version=metadata.get("Driver Version Detected"),
        device_ids=tuple(d.strip() for d in device_ids if d.strip()),
        metadata=tuple(table.metadata),
        notes=tuple(table.notes),
    )


def _is_diag_table(text: str) -> bool:
    for raw in text.splitlines():
        line = _table_line(raw)
        if line is None:
            continue
        row = _row(line)
        if _SECTION.match(line) or (row is not None and row.name == "Diagnostic"):
            return True
        if row is not None and row.name and _SCOPED.match(row.value):
            return True
    return False


def parse_dcgmi_table(text: str) -> DcgmDiag:
    """Parse the table `dcgmi diag -r N` prints without `-j` (also excerpts of it)."""
    if not _is_diag_table(text):
        check_dcgmi_failure(text)
        raise ParseError("no '| Diagnostic | Result |' header: not dcgmi diag table output")
    table = _Table()
    for raw in text.splitlines():
        line = _table_line(raw)
        if line is None:
            table.close()
        else:
            _feed(table, line)
    return _freeze(table)


# --- discovery -------------------------------------------------------------------------------

_FOUND = re.compile(r"^(\d+) (GPUs?|NvSwitch(?:es)?|ConnectX|CPUs?) found\b")
_SECTIONS = {"GPUs": "GPU", "NvSwitches": "NvSwitch", "CPUs": "CPU"}


@dataclass
class _Box:
    entity_id: int
    fields: dict[str, str] = field(default_factory=dict)


def _device(box: _Box) -> DcgmDevice:
    def get(key: str) -> str | None:
        value = box.fields.get(key)
        return None if value is None else _blank_to_none(value.removesuffix(" (last known)"))

    error = box.fields.get("Error")
    if error is not None and "Return" in box.fields:
        error = f"{error} {box.fields['Return']}"
    return DcgmDevice(
        entity_id=box.entity_id,
        name=get("Name"),
        pci_bus_id=get("PCI Bus ID"),
        uuid=get("Device UUID"),
        status=get("Status"),
        error=error,
    )


def _cpu(box: _Box) -> DcgmCpu:
    return DcgmCpu(
        entity_id=box.entity_id,
        name=_blank_to_none(box.fields.get("Name", "")),
        serial=_blank_to_none(box.fields.get("Serial number", "")),
        cores=_blank_to_none(box.fields.get("Cores", "")),
    )


def _discovery_rows(text: str) -> tuple[dict[str, int], dict[str, list[_Box]]]:
    counts: dict[str, int] = {}
    boxes: dict[str, list[_Box]] = {}
    section = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if found := _FOUND.match(stripped):
            section = _SECTIONS.get(found.group(2), found.group(2))
            counts[section] = int(found.group(1))
            boxes.setdefault(section, [])
            continue
        line = _table_line(raw)
        if not section or line is None or not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].isdigit():
            boxes[section].append(_Box(entity_id=int(cells[0])))
        if len(cells) > 1 and boxes[section] and ":" in cells[1]:
            key, _, value = cells[1].partition(":")
            boxes[section][-1].fields.setdefault(key.strip(), value.strip())
    return counts, boxes


def parse_dcgmi_discovery(text: str) -> DcgmDiscovery:
    """Parse `dcgmi discovery -l` (`-a` too): GPUs, NvSwitches, ConnectX and CPUs."""
    counts, boxes = _discovery_rows(text)
    if "GPU" not in counts:
        check_dcgmi_failure(text)
        raise ParseError("no 'N GPUs found.' line: not dcgmi discovery -l output")
    return DcgmDiscovery(
        gpu_count=counts["GPU"],
        gpus=tuple(_device(box) for box in boxes["GPU"]),
        nvswitch_ids=tuple(box.entity_id for box in boxes.get("NvSwitch", [])),
        connectx_ids=tuple(box.entity_id for box in boxes.get("ConnectX", [])),
        cpus=tuple(_cpu(box) for box in boxes.get("CPU", [])),
    )


# --- health ----------------------------------------------------------------------------------

_HEALTH_TITLE = "Health Monitor Report"
_OVERALL = "Overall Health"


@dataclass
class _Incident:
    system: str
    health: str
    lines: list[str] = field(default_factory=list)


@dataclass
class _Entity:
    group: str
    entity_id: int
    health: str
    incidents: list[_Incident] = field(default_factory=list)


def _freeze_health(overall: str | None, entities: list[_Entity]) -> DcgmHealth:
    if overall is None:
        raise ParseError(f"'{_HEALTH_TITLE}' without an '{_OVERALL}' row")
    return DcgmHealth(
        overall=overall,
        entities=tuple(
            DcgmHealthEntity(
                entity_group=e.group,
                entity_id=e.entity_id,
                health=e.health,
                incidents=tuple(
                    DcgmHealthIncident(
                        system=i.system, health=i.health, message=" ".join(i.lines).strip()
                    )
                    for i in e.incidents
                ),
            )
            for e in entities
        ),
    )


def _tree_rows(text: str) -> list[tuple[int, str, str]]:
    """(depth, label, value) per tree row: depth 0 is a group, 1 an entity, 3 a system."""
    rows: list[tuple[int, str, str]] = []
    for raw in text.splitlines():
        line = _table_line(raw)
        if line is None or not line.startswith("|") or line.count("|") < 3:
            continue
        left, _, rest = line[1:].partition("|")
        label = left.removeprefix(" ").rstrip()
        arrow = label.find("->")
        depth = 0 if arrow < 0 else arrow // 3 + 1
        rows.append((depth, label.replace("->", "", 1).strip(), rest.strip().rstrip("|").strip()))
    return rows


def _parse_health_tree(text: str) -> DcgmHealth:
    overall: str | None = None
    entities: list[_Entity] = []
    group = ""
    for depth, label, value in _tree_rows(text):
        if label == _OVERALL:
            overall = value
        elif depth == 0 and label:
            group = label
        elif depth == 1 and label.isdigit():
            entities.append(_Entity(group=group, entity_id=int(label), health=value))
        elif depth == 3 and entities:
            entities[-1].incidents.append(_Incident(system=label, health=value))
        elif not label and entities and entities[-1].incidents:
            entities[-1].incidents[-1].lines.append(value)
    return _freeze_health(overall, entities)


def _json_incidents(errors: dict[str, object]) -> list[_Incident]:
    incidents: list[_Incident] = []
    for system, node in _dict(errors.get("children")).items():
        body = _dict(node)
        overflow = body.get("overflow")
        lines = [str(x) for x in overflow] if isinstance(overflow, list) else []
        incidents.append(_Incident(system=system, health=str(body.get("value", "")), lines=lines))
    return incidents


def _parse_health_json(document: dict[str, object]) -> DcgmHealth:
    body = _dict(document.get("body"))
    overall_node = _dict(body.get(_OVERALL))
    overall = str(overall_node["value"]) if "value" in overall_node else None
    entities: list[_Entity] = []
    for group, node in body.items():
        for entity_id, entity in _dict(_dict(node).get("children")).items():
            if not entity_id.isdigit():
                raise ParseError(f"health JSON: {group} entity {entity_id!r} is not an id")
            entity_node = _dict(entity)
            errors = _dict(_dict(entity_node.get("children")).get("Errors"))
            entities.append(
                _Entity(
                    group=group,
                    entity_id=int(entity_id),
                    health=str(entity_node.get("value", "")),
                    incidents=_json_incidents(errors),
                )
            )
    return _freeze_health(overall, entities)


def _is_health_json(document: dict[str, object]) -> bool:
    header = document.get("header")
    return (isinstance(header, list) and _HEALTH_TITLE in header) or _OVERALL in _dict(
        document.get("body")
    )


def parse_dcgmi_health(text: str) -> DcgmHealth:
    """Parse `dcgmi health -c` (the report tree, or its `-j` JSON)."""
    if _has_json(text):
        document = _load_json(text)
        if not _is_health_json(document):
            raise ParseError("JSON without a 'Health Monitor Report': not dcgmi health -c -j")
        return _parse_health_json(document)
    if _HEALTH_TITLE not in text:
        check_dcgmi_failure(text)
        raise ParseError(f"no '{_HEALTH_TITLE}': not dcgmi health -c output")
    return _parse_health_tree(text)


# --- which output is it ----------------------------------------------------------------------


def parse_dcgmi(text: str) -> DcgmiOutput:
    """Read any output this module knows, telling them apart by their own markers.

    Returns a `DcgmDiag`, `DcgmDiscovery` or `DcgmHealth` (see `kind`); raises a
    `DcgmiFailureError` subclass for dcgmi's error texts and `ParseError` for anything else.
    """
    if _has_json(text):
        document = _load_json(text)
        if _is_health_json(document):
            return _parse_health_json(document)
        return _diag_from_json(document, text)
    if _HEALTH_TITLE in text:
        return _parse_health_tree(text)
    if any(_FOUND.match(line.strip()) for line in text.splitlines()):
        return parse_dcgmi_discovery(text)
    if _is_diag_table(text):
        return parse_dcgmi_table(text)
    check_dcgmi_failure(text)
    raise ParseError("neither dcgmi diag, discovery nor health output, nor a dcgmi error text")
