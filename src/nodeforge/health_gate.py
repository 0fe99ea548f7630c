"""The boot-time GPU health gate: is this node fit to start its scheduler daemon?

A oneshot unit runs `nodeforge health-gate` before slurmd or kubelet; a failed check keeps the
daemon from starting, so a node with a missing GPU, a half-loaded driver or a pending row remap
never takes jobs. Every check reads the node through two injected seams, a `CommandRunner` and
a `FileReader`, so tests feed canned outputs and nothing here touches the machine directly.

The expectations come from the catalog, per instance type, in the JSON the role writes
(`Expectation`); the instance type is what EC2 Nitro puts in the DMI product name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from nodeforge.errors import InputError
from nodeforge.parsers import nvidia_smi
from nodeforge.parsers.nvidia_smi import NvidiaSmiFailureError, ParseError, QueryCsv

PRODUCT_NAME = "/sys/devices/virtual/dmi/id/product_name"
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
INFINIBAND_DIR = "/sys/class/infiniband"
GPU_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,name,pci.bus_id,driver_version",
    "--format=csv",
)
REMAP_QUERY = (
    "nvidia-smi",
    "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure",
    "--format=csv",
)
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
IMEX_UNIT = "nvidia-imex.service"
COMMAND_TIMEOUT_S = 60.0
"""nvidia-smi on a GPU that stopped answering can hang for minutes: a boot must not."""

# The open module says "Kernel Module for x86_64  595.91.07", the proprietary one
# "x86_64 Kernel Module  535.261.03": the version is the first number after either.
_MODULE_VERSION = re.compile(
    r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(?P<version>\d+(?:\.\d+)+)"
)
# EC2 names EFA devices rdmapNNsN (rdma-core's predictable names) or efa_N (older AMIs);
# anything else under /sys/class/infiniband is not an EFA and must not make up the count.
_EFA_DEVICE = re.compile(r"^(?:rdmap\w+|efa_?\d+)$")
# The Xid policy's actions a reboot does not clear: the node needs one, or a replacement.
_BLOCKING_ACTIONS = ("reboot_node", "replace_node")
_KNOWN_ACTIONS = ("application", "reset_gpu", *_BLOCKING_ACTIONS)


# --- expectations -------------------------------------------------------------------------


class Expectation(BaseModel):
    """What the catalog says one instance type has. Strict: the role writes JSON types, and a
    string "8" or "true" means the role template is broken, not that the node has 8 GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_count: StrictInt = Field(ge=0)
    gpu_model: str = Field(min_length=1)
    driver_version: str = Field(pattern=r"^\d+(?:\.\d+)+$")
    efa_interfaces: StrictInt = Field(ge=0)
    fabric_manager: StrictBool
    imex: StrictBool


class _Expectations(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    types: dict[str, Expectation]


def parse_expectations(text: str, path: Path) -> dict[str, Expectation]:
    """The expect file's instance types, or an InputError naming the file and the field."""
    fix = 'write {"p5.48xlarge": {"gpu_count": 8, "gpu_model": "H100", ...}, ...}'
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise InputError(f"not JSON ({exc})", file=path, fix=fix) from None
    try:
        return _Expectations.model_validate({"types": data}).types
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"][1:])  # drop the wrapper's "types"
        raise InputError(first["msg"], file=path, field=where or "(top level)", fix=fix) from None


# --- the node, through injectable seams -------------------------------------------------


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        """Exit code, stdout and stderr; a command that cannot run is an exit code, not an
        exception (127 not found, 124 timed out), so a check fails instead of the gate."""
        ...


class FileReader(Protocol):
    def read_text(self, path: str) -> str:
        """The file's text; raises OSError (FileNotFoundError where it is missing)."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """The names in a folder; raises OSError (FileNotFoundError where it is missing)."""
        ...


@dataclass(frozen=True)
class SubprocessRunner:
    timeout_s: float = COMMAND_TIMEOUT_S

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            return 127, "", f"{argv[0]}: command not found"
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]}: no answer within {self.timeout_s:g} s"
        except OSError as exc:
            return 126, "", f"{argv[0]}: cannot run ({exc.strerror or exc})"
        return done.returncode, done.stdout, done.stderr


@dataclass(frozen=True)
class LocalFiles:
    root: Path = Path("/")
    """Where /proc and /sys are: another tree stands in for them in a container test."""

    def read_text(self, path: str) -> str:
        # sysfs and procfs files are small; a stray byte must not stop the boot check
        return self._under_root(path).read_text(encoding="utf-8", errors="replace")

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(self._under_root(path)))

    def _under_root(self, path: str) -> Path:
        return self.root / path.lstrip("/")


# --- results ------------------------------------------------------------------------------

Status = Literal["passed", "failed"]


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    reason: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "reason": self.reason}


def _passed(name: str, reason: str) -> CheckResult:
    return CheckResult(name, "passed", reason)


def _failed(name: str, reason: str) -> CheckResult:
    return CheckResult(name, "failed", reason)


@dataclass(frozen=True)
class GateResult:
    instance_type: str | None
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def first_reason(self) -> str | None:
        failed = next((check for check in self.checks if not check.passed), None)
        return f"{failed.name}: {failed.reason}" if failed else None

    def as_dict(self) -> dict[str, object]:
        return {
            "instance_type": self.instance_type,
            "passed": self.passed,
            "reason": self.first_reason,
            "checks": [check.as_dict() for check in self.checks],
        }


# --- the checks ---------------------------------------------------------------------------


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _smi_failure(rc: int, out: str, err: str) -> str | None:
    """Why nvidia-smi's answer cannot be trusted, in the parser's words where it knows them."""
    notices = nvidia_smi.find_failures(out + "\n" + err)
    if notices:
        return str(nvidia_smi.failure_error(notices[0], out))
    if rc != 0:
        return f"nvidia-smi exited {rc}: {_first_line(err) or _first_line(out) or 'no output'}"
    return None


@dataclass(frozen=True)
class _GpuQuery:
    table: QueryCsv | None
    failure: str | None


def _query_gpus(runner: CommandRunner) -> _GpuQuery:
    rc, out, err = runner.run(GPU_QUERY)
    # a failure text beside good lines (one GPU lost) still fails: that GPU cannot take jobs
    failure = _smi_failure(rc, out, err)
    if failure is not None:
        return _GpuQuery(None, failure)
    try:
        return _GpuQuery(nvidia_smi.parse_query_csv(out), None)
    except (NvidiaSmiFailureError, ParseError) as exc:
        return _GpuQuery(None, str(exc))


def _model_matches(name: str, model: str) -> bool:
    # whole word: "H20" must not pass for an "NVIDIA H200", nor "A10" for an "A100"
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(model)}(?![A-Za-z0-9])", name, re.I) is not None


def check_gpus(query: _GpuQuery, expect: Expectation) -> CheckResult:
    name = "gpus"
    if query.table is None:
        return _failed(name, query.failure or "nvidia-smi gave no answer")
    rows = query.table.rows
    if len(rows) != expect.gpu_count:
        return _failed(name, f"{len(rows)} GPUs found, {expect.gpu_count} expected")
    names = [str(row.value("name")) for row in rows]
    wrong = [
        f"{row.value('pci.bus_id')} is {gpu}"
        for row, gpu in zip(rows, names, strict=True)
        if not _model_matches(gpu, expect.gpu_model)
    ]
    if wrong:
        return _failed(name, f"{expect.gpu_model} expected: {'; '.join(wrong)}")
    return _passed(name, f"{len(rows)} x {names[0]}" if names else "no GPU expected, none found")


def check_driver(query: _GpuQuery, files: FileReader, expect: Expectation) -> CheckResult:
    name = "driver"
    try:
        text = files.read_text(DRIVER_VERSION_FILE)
    except FileNotFoundError:
        return _failed(name, f"no NVIDIA kernel module loaded ({DRIVER_VERSION_FILE} missing)")
    except OSError as exc:
        return _failed(name, f"cannot read {DRIVER_VERSION_FILE} ({exc.strerror or exc})")
    match = _MODULE_VERSION.search(text)
    if match is None:
        return _failed(name, f"no module version in {DRIVER_VERSION_FILE}: {_first_line(text)!r}")
    loaded = match.group("version")
    if loaded != expect.driver_version:
        return _failed(
            name, f"kernel module {loaded} loaded, {expect.driver_version} installed (expected)"
        )
    reported = set()
    if query.table is not None:
        reported = {
            str(row.value("driver_version"))
            for row in query.table.rows
            if row.has("driver_version") and row.value("driver_version") is not None
        }
    others = sorted(reported - {loaded})
    if others:
        # the user-space libraries nvidia-smi loads are another version than the module
        return _failed(name, f"kernel module {loaded} loaded, nvidia-smi reports {others[0]}")
    if query.table is None:
        # check_gpus already fails the gate; the module itself is the expected one
        return _passed(name, f"kernel module {loaded} (nvidia-smi gave no version)")
    return _passed(name, f"kernel module {loaded}")


def check_unit(runner: CommandRunner, name: str, unit: str, expected: bool) -> CheckResult:
    if not expected:
        return _passed(name, "not expected on this instance type")
    rc, out, err = runner.run(("systemctl", "is-active", unit))
    state = _first_line(out)
    if rc == 0 and state == "active":
        return _passed(name, f"{unit} active")
    if not state:  # systemctl itself failed (no systemd, no D-Bus): say what it said
        return _failed(name, f"systemctl is-active {unit} exited {rc}: {_first_line(err)}")
    return _failed(name, f"{unit} is {state}, expected active")


def check_efa(files: FileReader, expect: Expectation) -> CheckResult:
    name = "efa"
    if expect.efa_interfaces == 0:
        return _passed(name, "no EFA expected on this instance type")
    try:
        entries = files.list_dir(INFINIBAND_DIR)
    except FileNotFoundError:
        entries = []  # no RDMA device registered at all: the efa module is not loaded
    except OSError as exc:
        return _failed(name, f"cannot list {INFINIBAND_DIR} ({exc.strerror or exc})")
    found = sum(1 for entry in entries if _EFA_DEVICE.match(entry))
    if found != expect.efa_interfaces:
        return _failed(
            name, f"{found} EFA devices in {INFINIBAND_DIR}, {expect.efa_interfaces} expected"
        )
    return _passed(name, f"{found} EFA devices")


def check_remapped_rows(runner: CommandRunner) -> CheckResult:
    name = "row remapping"
    rc, out, err = runner.run(REMAP_QUERY)
    failure = _smi_failure(rc, out, err)
    if failure is not None:
        return _failed(name, failure)
    try:
        rows = nvidia_smi.parse_remapped_rows(out)
    except (NvidiaSmiFailureError, ParseError) as exc:
        return _failed(name, str(exc))
    problems = [
        f"{row.gpu or 'a GPU'}: "
        + ("remapping failed (replace the GPU)" if row.failure else "remap pending (reset the GPU)")
        for row in rows
        if row.unhealthy
    ]
    if problems:
        return _failed(name, "; ".join(problems))
    # [N/A] (no row remapper on this generation) reads None: nothing pending there
    return _passed(name, f"nothing pending on {len(rows)} GPUs")


def check_xid_state(files: FileReader, state_path: str | None) -> CheckResult:
    name = "xid"
    if state_path is None:
        return _passed(name, "no Xid state file given")
    try:
        text = files.read_text(state_path)
    except FileNotFoundError:
        return _passed(name, "no Xid event since boot")
    except OSError as exc:
        return _failed(name, f"cannot read {state_path} ({exc.strerror or exc})")
    try:
        state = json.loads(text)
    except (ValueError, RecursionError):
        state = None
    action = state.get("action") if isinstance(state, dict) else None
    # a state file nobody can read may hide a replace_node: fail closed, a gate's only way
    if action not in _KNOWN_ACTIONS:
        return _failed(name, f"{state_path} holds no known Xid action")
    reason = state.get("reason") if isinstance(state, dict) else None
    told = f": {reason}" if isinstance(reason, str) and reason else ""
    if action in _BLOCKING_ACTIONS:
        return _failed(name, f"{action}{told}")
    # reset_gpu and milder: the reboot this gate runs after has reset every GPU
    return _passed(name, f"{action} since boot, cleared by the reboot{told}")


def read_instance_type(files: FileReader) -> str:
    """EC2 Nitro's DMI product name is the instance type; raises OSError where unreadable."""
    return files.read_text(PRODUCT_NAME).strip()


def run_gate(
    expectations: dict[str, Expectation],
    *,
    runner: CommandRunner,
    files: FileReader,
    instance_type: str | None = None,
    xid_state: str | None = None,
    state_files: FileReader | None = None,
) -> GateResult:
    """Every check, in order; without a known instance type there is nothing to check against.
    `files` reads the host's /proc and /sys, `state_files` (default: `files`) the watcher's
    state file, which is nodeforge's own and never under a stand-in host tree."""
    if instance_type is None:
        try:
            instance_type = read_instance_type(files)
        except OSError as exc:
            reason = f"cannot read {PRODUCT_NAME} ({exc.strerror or exc}); pass --instance-type"
            return GateResult(None, (_failed("instance type", reason),))
    expect = expectations.get(instance_type)
    if expect is None:
        known = ", ".join(sorted(expectations)) or "none"
        reason = f"'{instance_type}' is not in the expect file (it has: {known})"
        return GateResult(instance_type, (_failed("instance type", reason),))
    query = _query_gpus(runner)
    return GateResult(
        instance_type,
        (
            _passed("instance type", instance_type),
            check_gpus(query, expect),
            check_driver(query, files, expect),
            check_unit(runner, "fabric manager", FABRIC_MANAGER_UNIT, expect.fabric_manager),
            check_unit(runner, "imex", IMEX_UNIT, expect.imex),
            check_efa(files, expect),
            check_remapped_rows(runner),
            check_xid_state(state_files or files, xid_state),
        ),
    )
