"""A verdict on one tool output a user pastes: which tool printed it, healthy or not, and what
to do about it.

Each reader tells its own output apart (the parsers raise ParseError on anything else), in an
order where the more particular formats go first: an nccl-tests run carries NCCL_DEBUG lines,
and a kernel log is recognised by its NVRM lines before the lenient readers see it. A text no
reader accepts is `unreadable`, with what each reader expected.

Actions are the Xid policy's (`application`, `reset_gpu`, `reboot_node`, `replace_node`) where
the fault is the node's; a fault of the setup (a missing plugin, a failed install) names the fix
instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from nodeforge.parsers import dcgmi, efa_installer, fi_info, kernel_log, nccl_tests, nvidia_smi
from nodeforge.xid_policy import ACTIONS, classify

Verdict = Literal["healthy", "fault", "unreadable"]


@dataclass(frozen=True)
class Diagnosis:
    source: str
    kind: str
    """The tool output it was read as; `unknown` when unreadable."""
    verdict: Verdict
    reason: str
    action: str | None = None
    details: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "kind": self.kind,
            "verdict": self.verdict,
            "reason": self.reason,
            "action": self.action,
            "details": list(self.details),
        }


@dataclass(frozen=True)
class _Finding:
    verdict: Verdict
    reason: str
    action: str | None = None
    details: tuple[str, ...] = ()


_NVRM = re.compile(r"NVRM:\s*(Xid|GPU|The NVIDIA GPU)")
# the line shapes of dmesg (plain, -T, -x with ISO stamps), journalctl -k, syslog and kmsg
_KERNEL_LINE = re.compile(
    r"^(?:\[\s*\d+\.\d+\]|\[[A-Z][a-z]{2} |kern\s*:|\d+,\d+,\d+,[^;]*;"
    r"|\S+\s+\d+\s+\d\d:\d\d:\d\d\s+\S+\s+kernel:|\d{4}-\d\d-\d\dT\S+\s+\S+\s+kernel:)"
)
_INIT_FAILED = re.compile(r"NVRM: GPU (\S+?):? (?:rm_init_adapter|RmInitAdapter) failed", re.I)


def _kernel_log(text: str) -> _Finding:
    lines = [line for line in text.splitlines() if line.strip()]
    shaped = sum(bool(_KERNEL_LINE.match(line.lstrip())) for line in lines)
    if not _NVRM.search(text) and shaped * 2 < len(lines):
        raise kernel_log.ParseError("no NVRM line, and most lines are not kernel-log lines")
    events = kernel_log.parse_kernel_log(text)
    failed_init = sorted(set(_INIT_FAILED.findall(text)))
    if not events:
        if failed_init:
            reason = f"the driver failed to initialise {', '.join(failed_init)} (no Xid)"
            return _Finding("fault", reason, "reboot_node")
        return _Finding("healthy", "no Xid and no GPU fallen off the bus in this log")
    verdict = classify(events)
    # a failing GPU repeats its Xid by the hundred: one line per kind, with its count
    counted = Counter(
        f"Xid {f.event.xid} ({f.entry.name}) on {f.event.bus_id or 'an unnamed GPU'}: {f.action}"
        if f.event.xid is not None
        else f"{f.event.bus_id or 'a GPU'} fell off the bus: {f.action}"
        for f in verdict.findings
    )
    details = tuple(f"{line} (x{n})" if n > 1 else line for line, n in counted.items())
    if verdict.healthy:
        return _Finding("healthy", f"{len(events)} Xid event(s), none a node fault", None, details)
    gpus = ", ".join(verdict.gpus) or "an unnamed GPU"
    kind = "a hardware fault" if verdict.hardware_fault else "a node fault"
    return _Finding("fault", f"{kind} on {gpus}", verdict.action, details)


_SMI_ACTIONS: tuple[tuple[type[nvidia_smi.NvidiaSmiFailureError], str], ...] = (
    (nvidia_smi.GpuRequiresResetError, "reset_gpu"),
    # fallen off the bus (Xid 79's own remedy), or a driver that no longer answers
    (nvidia_smi.DeviceHandleError, "reboot_node"),
    (nvidia_smi.DriverLibraryMismatchError, "reboot_node"),
    (nvidia_smi.NvmlLibraryNotFoundError, "reinstall the driver (rebuild the image)"),
    (nvidia_smi.InsufficientPermissionsError, "run nvidia-smi as root"),
    (nvidia_smi.NvidiaSmiFailureError, "reboot_node"),
)


def _smi_failure(exc: nvidia_smi.NvidiaSmiFailureError) -> _Finding:
    action = next(a for cls, a in _SMI_ACTIONS if isinstance(exc, cls))
    return _Finding("fault", str(exc), action)


def _nvidia_smi(text: str) -> _Finding:
    try:
        output = nvidia_smi.parse_nvidia_smi(text)
    except nvidia_smi.NvidiaSmiFailureError as exc:
        return _smi_failure(exc)
    problems: list[tuple[str, str]] = []
    if isinstance(output, nvidia_smi.SmiTable):
        problems += [(f.text, "reboot_node") for f in output.failures]
        problems += [
            (f"GPU {g.index} ({g.bus_id}) reads ERR! in {', '.join(g.errors)}", "reset_gpu")
            for g in output.gpus
            if g.errors
        ]
        problems += [
            (f"GPU {g.index} has {g.ecc_uncorrectable} uncorrectable ECC errors", "reset_gpu")
            for g in output.gpus
            if g.ecc_uncorrectable
        ]
    elif isinstance(output, nvidia_smi.QueryReport):
        problems += [(f.text, "reboot_node") for f in output.failures]
        for gpu in output.gpus:
            problems += _remap_problems(gpu.bus_id, gpu.remapped_rows)
            if gpu.retired_pages.pending:
                problems.append((f"{gpu.bus_id}: a page retirement waits for a reset", "reset_gpu"))
    elif isinstance(output, nvidia_smi.QueryCsv):
        problems += [(f.text, "reboot_node") for f in output.failures]
        if {"remapped_rows.pending", "remapped_rows.failure"} & set(output.fields):
            for rows in nvidia_smi.parse_remapped_rows(text, output.fields):
                problems += _remap_problems(rows.gpu or "a GPU", rows)
    if not problems:
        return _Finding("healthy", f"{output.kind}: no fault reported")
    return _worst_of(problems)


def _remap_problems(gpu: str, rows: nvidia_smi.RemappedRows | None) -> list[tuple[str, str]]:
    if rows is None:
        return []
    if rows.failure:
        return [(f"{gpu}: row remapping failed", "replace_node")]
    if rows.pending:
        return [(f"{gpu}: a row remap waits for a GPU reset", "reset_gpu")]
    return []


def _worst_of(problems: list[tuple[str, str]]) -> _Finding:
    def rank(action: str) -> int:
        return ACTIONS.index(action) if action in ACTIONS else len(ACTIONS)

    reason, action = max(problems, key=lambda problem: rank(problem[1]))
    return _Finding("fault", reason, action, tuple(p for p, _ in problems))


def _dcgmi(text: str) -> _Finding:
    try:
        output = dcgmi.parse_dcgmi(text)
    except dcgmi.DcgmiFailureError as exc:
        return _Finding("fault", str(exc), "start nv-hostengine (or reboot_node)")
    if isinstance(output, dcgmi.DcgmDiag):
        notes = tuple(
            f"{name}: {note.text}"
            for name in output.failed_tests
            for note in output.test(name).all_notes
        )
        if output.verdict == "fail":
            failed = ", ".join(output.failed_tests) or "the diagnostic"
            # a failed hardware test on a cloud instance is the host's: a new one is the remedy
            return _Finding("fault", f"dcgmi diag failed: {failed}", "replace_node", notes)
        if output.verdict == "nothing ran":
            return _Finding("fault", "dcgmi diag ran no test: GPU health unknown", "reboot_node")
        warned = ", ".join(output.warned_tests)
        reason = f"dcgmi diag passed with warnings: {warned}" if warned else "dcgmi diag passed"
        return _Finding("healthy", reason)
    if isinstance(output, dcgmi.DcgmHealth):
        if output.healthy:
            return _Finding("healthy", "dcgmi health: Healthy")
        return _Finding("fault", f"dcgmi health: {output.overall}", "reset_gpu")
    return _Finding("healthy", f"dcgmi discovery: {output.gpu_count} GPU(s)")


def _nccl_tests(text: str) -> _Finding:
    result = nccl_tests.parse_nccl_tests(text)
    if not result.rows and not result.failures:
        raise nccl_tests.ParseError("no result rows and no test failure")
    reasons = list(result.failures)
    if result.wrong_total:
        reasons.append(f"{result.wrong_total:g} wrong values")
    if result.out_of_bounds_ok is False:
        reasons.append(f"{result.out_of_bounds} out-of-bounds values")
    if result.out_of_bounds_ok is None and not result.failures:
        reasons.append("the output ends before the run's summary (cut, or the run died)")
    if result.last_error:
        reasons.append(result.last_error)
    # the same run's NCCL_DEBUG lines tell whether it crossed the fabric the way it should
    path = _path_problems(text)
    if not reasons and not path:
        average = f", {result.avg_busbw_gbps} GB/s average bus bandwidth"
        return _Finding("healthy", "nccl-tests passed" + (average if result.avg_busbw_gbps else ""))
    if not reasons:
        return _Finding("fault", path[0], _NET_FIX, tuple(path))
    fix = "rerun on each node alone and on pairs to find the faulty node or link"
    return _Finding("fault", "nccl-tests failed: " + "; ".join(reasons), fix, tuple(path))


_NET_FIX = "check EFA (fi_info -p efa), the aws-ofi-nccl plugin and NCCL_* settings"


def _path_problems(text: str) -> list[str]:
    try:
        path = nccl_tests.parse_nccl_debug(text)
    except nccl_tests.ParseError:
        return []  # no NCCL_DEBUG lines
    problems = []
    if path.socket_fallback:
        problems.append("NCCL fell back to TCP sockets")
    if path.ofi_plugin_refused:
        problems.append("the aws-ofi-nccl plugin refused to initialise")
    return problems + [f"NCCL WARN ({w.category}): {w.message}" for w in path.warnings]


def _nccl_debug(text: str) -> _Finding:
    path = nccl_tests.parse_nccl_debug(text)
    problems = _path_problems(text)
    if not problems:
        network = path.network or "unknown network"
        return _Finding("healthy", f"NCCL used {network} ({path.provider or 'no provider named'})")
    return _Finding("fault", problems[0], _NET_FIX, tuple(problems))


# libfabric's providers and utility layers (fi_provider(7)), for `fi_info -l` listings
_PROVIDER = re.compile(
    r"^(efa|efa-direct|tcp|udp|verbs|shm|sm2|sockets|psm[23]?|opx|cxi|usnic|ucx|lnx|net|mrail"
    r"|rxm|rxd|ofi_\w+|hook_\w+|off_coll|sm)$"
)
_EFA_FIX = "check the EFA device, its driver and the libfabric install"


def _fi_info(text: str) -> _Finding:
    try:
        result = fi_info.parse_fi_info(text)
    except fi_info.NoFabricDataError as exc:
        return _Finding("fault", f"fi_info found no provider: {exc}", _EFA_FIX)
    listed = [
        h
        for h in result.hosts
        if h.entries or h.failure or h.fi_info_version
        or any(_PROVIDER.match(p.name) for p in h.providers)
    ]  # fmt: skip
    if not listed:
        # the parser skips noise; a text that is all noise is not fi_info output
        raise fi_info.ParseError("no provider block, provider list or fi_getinfo line")
    failed = result.failed_hosts()
    if failed:
        hosts = ", ".join(str(h.name) for h in failed)
        return _Finding("fault", f"fi_info failed on {hosts}", _EFA_FIX)
    devices = result.devices("efa")
    if not result.entries and not any(h.providers for h in listed):
        version = listed[0].fi_info_version
        return _Finding("healthy", f"fi_info {version}: a version, no provider listing")
    has_efa = devices or any(p.name == "efa" for h in result.hosts for p in h.providers)
    if not has_efa:
        return _Finding("fault", "fi_info lists no efa provider", _EFA_FIX)
    if not devices:
        return _Finding("healthy", "fi_info lists the efa provider")
    return _Finding("healthy", f"fi_info: {len(devices)} EFA device(s)", None, devices)


# the packages every EFA installer record lists one of (libfabric, its EFA kernel module)
_EFA_PACKAGES = re.compile(r"^(libfabric|efa|rdma-core|ibverbs|openmpi\d*-aws|efa-config)", re.I)


def _efa_packages(text: str) -> _Finding:
    record = efa_installer.parse_installed_packages(text)
    if not any(_EFA_PACKAGES.match(name) for name in record.names()):
        raise efa_installer.ParseError("no libfabric, efa or rdma-core package in the list")
    version = record.installer_version or "unknown"
    reason = f"EFA installer {version} record: {len(record.packages)} package(s) installed"
    return _Finding("healthy", reason, None, record.names())


def _efa_installer(text: str) -> _Finding:
    run = efa_installer.parse_installer_output(text)
    if run.succeeded:
        reason = "EFA installer succeeded" + (" (reboot required)" if run.reboot_required else "")
        return _Finding("healthy", reason)
    reason = f"EFA installer {run.status}: {run.reason or 'no reason printed'}"
    return _Finding("fault", reason, "fix what the installer names and run it again", run.errors)


Reader = Callable[[str], _Finding]
# dcgmi reads any `Error:` line as its own failure, so the installer's output goes first
READERS: tuple[tuple[str, Reader, type[Exception]], ...] = (
    ("kernel-log", _kernel_log, kernel_log.ParseError),
    ("nvidia-smi", _nvidia_smi, nvidia_smi.ParseError),
    ("efa-installer", _efa_installer, efa_installer.ParseError),
    ("nccl-tests", _nccl_tests, nccl_tests.ParseError),
    ("dcgmi", _dcgmi, dcgmi.ParseError),
    ("fi_info", _fi_info, fi_info.ParseError),
    ("nccl-debug", _nccl_debug, nccl_tests.ParseError),
    ("efa-installed-packages", _efa_packages, efa_installer.ParseError),
)


def diagnose(text: str, source: str) -> Diagnosis:
    """The first reader that accepts the text judges it."""
    expected = []
    if text.strip():
        for kind, reader, refused in READERS:
            try:
                found = reader(text)
            except refused as exc:
                expected.append(f"{kind}: {exc}")
                continue
            return Diagnosis(source, kind, found.verdict, found.reason, found.action, found.details)
    kinds = ", ".join(kind for kind, _, _ in READERS)
    return Diagnosis(
        source,
        "unknown",
        "unreadable",
        f"not an output nodeforge reads (one of: {kinds})" if text.strip() else "empty input",
        None,
        tuple(expected),
    )
