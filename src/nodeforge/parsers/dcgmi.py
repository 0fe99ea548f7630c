"""`dcgmi diag -r N --json` (`-j`) and `dcgmi diag -r N` table output.

JSON shape handled (DCGM 3.x, seen with 3.1.0; DCGM 4.x renames the top key to
"DCGM Diagnostic", also accepted):

    {"DCGM GPU Diagnostic": {
        "test_categories": [
            {"category": "Deployment",
             "tests": [{"name": "Denylist",
                        "results": [{"gpu_ids": "0,1,2,3", "status": "PASS",
                                     "warnings": [...], "info": ...}]},
                       null, ...]}],
        "version": "3.1.0"}}

`gpu_ids` is a CSV string for the deployment tests (one result for all GPUs) and an integer
per GPU for plugin tests; `null` entries occur between tests and are skipped. dcgmi may print
text before the JSON (DCGM's own test strips up to the first `{`), so does this parser.

The table output is one `| name | Result |` row per test under `|-----  Category  ---` rows,
with per-GPU lines `|   | GPU0: Pass |` in DCGM 4.x.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from nodeforge.parsers.record import Record

Status = Literal["Pass", "Fail", "Warn", "Skip"]


class ParseError(ValueError):
    """Text that is not dcgmi diag JSON or table output, or JSON of another shape."""


class DcgmGpuResult(Record):
    """One result entry: the GPUs it covers (empty: all, as the table says) and its status."""

    gpu_ids: tuple[int, ...]
    status: Status
    messages: tuple[str, ...]


class DcgmTest(Record):
    category: str
    name: str
    results: tuple[DcgmGpuResult, ...]

    @property
    def status(self) -> Status:
        """The worst status of its results: Fail > Warn > Pass > Skip."""
        order: tuple[Status, ...] = ("Fail", "Warn", "Pass", "Skip")
        statuses = {result.status for result in self.results}
        return next((s for s in order if s in statuses), "Skip")


class DcgmDiag(Record):
    version: str | None
    tests: tuple[DcgmTest, ...]

    def test(self, name: str) -> DcgmTest:
        for test in self.tests:
            if test.name == name:
                return test
        raise ParseError(f"no test '{name}'; tests: {', '.join(t.name for t in self.tests)}")

    @property
    def failed_tests(self) -> tuple[str, ...]:
        return tuple(test.name for test in self.tests if test.status == "Fail")

    @property
    def passed(self) -> bool:
        """No test failed and at least one ran."""
        return bool(self.tests) and not self.failed_tests


_STATUS: dict[str, Status] = {
    "pass": "Pass",
    "passed": "Pass",
    "fail": "Fail",
    "failed": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "skip": "Skip",
    "skipped": "Skip",
    "not run": "Skip",
}


def _status(raw: object, where: str) -> Status:
    status = _STATUS.get(str(raw).strip().lower())
    if status is None:
        raise ParseError(f"{where}: unknown status {raw!r}")
    return status


def _gpu_ids(raw: object, where: str) -> tuple[int, ...]:
    if isinstance(raw, bool):
        raise ParseError(f"{where}: gpu id {raw!r} is not a number")
    if isinstance(raw, int):
        return (raw,)
    if isinstance(raw, str) and re.fullmatch(r"\s*\d+(?:\s*,\s*\d+)*\s*", raw):
        return tuple(int(part) for part in raw.split(","))
    raise ParseError(f"{where}: gpu ids {raw!r} are neither an integer nor a CSV of integers")


def _messages(result: dict[str, object]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("warnings", "info"):
        raw = result.get(key)
        items = raw if isinstance(raw, list) else [raw] if raw is not None else []
        for item in items:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("message") or item.get("info")
                out.append(str(text if text is not None else item))
            else:
                out.append(str(item))
    return tuple(out)


def _result(raw: object, where: str) -> DcgmGpuResult:
    if not isinstance(raw, dict):
        raise ParseError(f"{where}: result is not an object")
    ids = next((raw[k] for k in ("gpu_ids", "gpu_id", "entity_id") if k in raw), None)
    if "status" not in raw:
        raise ParseError(f"{where}: result has no 'status'")
    return DcgmGpuResult(
        gpu_ids=() if ids is None else _gpu_ids(ids, where),
        status=_status(raw["status"], where),
        messages=_messages(raw),
    )


def _list(raw: object, where: str) -> list[object]:
    if not isinstance(raw, list):
        raise ParseError(f"{where}: expected a list")
    return raw


def parse_dcgmi_json(text: str) -> DcgmDiag:
    """Parse `dcgmi diag --json` output (text before the first `{` is ignored)."""
    start = text.find("{")
    if start < 0:
        raise ParseError("no JSON object in dcgmi output")
    try:
        document = json.loads(text[start:])
    except json.JSONDecodeError as err:
        raise ParseError(f"dcgmi output is not valid JSON: {err}") from err
    if not isinstance(document, dict):
        raise ParseError("dcgmi JSON is not an object")
    root = document.get("DCGM GPU Diagnostic", document.get("DCGM Diagnostic"))
    if not isinstance(root, dict):
        raise ParseError(
            "no 'DCGM GPU Diagnostic' (DCGM 3.x) or 'DCGM Diagnostic' (4.x) object; "
            f"top-level keys: {', '.join(map(str, document))}"
        )
    tests: list[DcgmTest] = []
    for category in _list(root.get("test_categories"), "test_categories"):
        if not isinstance(category, dict):
            raise ParseError("test_categories: entry is not an object")
        cat_name = str(category.get("category", ""))
        for test in _list(category.get("tests"), f"category {cat_name!r}"):
            if test is None:
                continue
            if not isinstance(test, dict) or "name" not in test:
                raise ParseError(f"category {cat_name!r}: test without a name")
            where = f"test {test['name']!r}"
            results = tuple(
                _result(r, where) for r in _list(test.get("results"), where) if r is not None
            )
            tests.append(DcgmTest(category=cat_name, name=str(test["name"]), results=results))
    version = root.get("version")
    return DcgmDiag(version=None if version is None else str(version), tests=tuple(tests))


_CATEGORY = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")
_PER_GPU = re.compile(r"^GPU\s*(\d+)\s*:\s*(\w[\w ]*?)\s*$")


def parse_dcgmi_table(text: str) -> DcgmDiag:
    """Parse the table `dcgmi diag -r N` prints without `--json`."""
    if "| Diagnostic" not in text:
        raise ParseError("no '| Diagnostic | Result |' header: not dcgmi diag table output")
    version: str | None = None
    category = ""
    tests: list[DcgmTest] = []
    for line in text.splitlines():
        if m := _CATEGORY.match(line):
            category = m.group(1)
            continue
        m = _ROW.match(line)
        if m is None:
            continue
        name, value = m.groups()
        if name == "Diagnostic" or category == "":
            continue
        if category == "Metadata":
            if name == "DCGM Version":
                version = value
            continue
        if name:
            result = DcgmGpuResult(gpu_ids=(), status=_status(value, name), messages=())
            tests.append(DcgmTest(category=category, name=name, results=(result,)))
        elif tests and (g := _PER_GPU.match(value)):
            last = tests[-1]
            per_gpu = DcgmGpuResult(
                gpu_ids=(int(g.group(1)),), status=_status(g.group(2), last.name), messages=()
            )
            results = (*(r for r in last.results if r.gpu_ids), per_gpu)
            tests[-1] = last.model_copy(update={"results": results})
        elif tests and value:
            last = tests[-1]
            head, *rest = last.results
            updated = head.model_copy(update={"messages": (*head.messages, value)})
            tests[-1] = last.model_copy(update={"results": (updated, *rest)})
    return DcgmDiag(version=version, tests=tuple(tests))
