"""The kernel-log Xid parser, on real logs (tests/fixtures/outputs/kernel_log/SOURCES.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeforge.parsers.kernel_log import ParseError, XidEvent, parse_kernel_log

LOGS = Path(__file__).parent / "fixtures" / "outputs" / "kernel_log"


def _parse(name: str) -> list[XidEvent]:
    return parse_kernel_log((LOGS / name).read_text(encoding="utf-8"))


def _codes(events: list[XidEvent]) -> list[int | None]:
    return [event.xid for event in events]


# --- dmesg ------------------------------------------------------------------------------------


def test_dmesg_ctime_gsp_timeouts_skip_rpc_tables_and_stack() -> None:
    events = _parse("dmesg_ctime_xid119_gsp_rpc_history.log")
    assert _codes(events) == [119] * 5
    assert [event.line for event in events] == [3, 38, 40, 42, 43]
    first = events[0]
    assert (first.bus_id, first.bus_id_raw) == ("0000:9b:00", "PCI:0000:9b:00")
    assert (first.pid, first.process) == (2024380, "nvidia-smi")
    assert first.message.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert first.gpu_uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert first.timestamp.raw == "Sun Feb 23 16:24:18 2025"
    assert first.timestamp.wall == datetime(2025, 2, 23, 16, 24, 18)
    assert first.timestamp.uptime_s is None
    assert (events[3].pid, events[3].process) == (1263500, "cache_mgr_main")
    assert events[4].process == "gpud"


def test_dmesg_iso_dbe_row_remap_and_contained_errors() -> None:
    events = _parse("dmesg_iso_xid48_63_94_dbe.log")
    assert _codes(events) == [48, 63] + [94] * 9
    dbe, remap, contained, *channels = events
    assert dbe.line == 11
    assert (dbe.pid, dbe.process) == (None, None)
    assert dbe.message.startswith("An uncorrectable double bit error (DBE)")
    assert dbe.timestamp.raw == "2024-11-15T12:02:03,470068+00:00"
    assert dbe.timestamp.wall == datetime(2024, 11, 15, 12, 2, 3, 470068, tzinfo=UTC)
    assert "marked for remapping, reset gpu to activate" in remap.message
    assert contained.message == "Contained: SM (0x1). RST: No, D-RST: No"
    assert {(e.pid, e.process) for e in channels} == {(1248209, "python3.10")}
    assert channels[0].message == "Ch 00000008"


def test_dmesg_decode_facility_prefix() -> None:
    events = _parse("dmesg_decode_iso_xid13_43.log")
    assert _codes(events) == [13] * 15 + [43] + [13] * 9 + [43]
    first = events[0]
    assert first.pid is None
    assert first.message.startswith("Graphics SM Warp Exception on (GPC 8, TPC 5, SM 0)")
    assert first.message.endswith("): Out Of Range Address")
    assert first.timestamp.wall == datetime(2025, 1, 21, 2, 21, 33, 498559, tzinfo=UTC)
    assert (events[15].pid, events[15].process, events[15].message) == (
        2815167,
        "pt_main_thread",
        "Ch 00000008",
    )


def test_dmesg_ctime_uuid_lines_name_each_gpu() -> None:
    events = _parse("dmesg_ctime_uuid_xid43_31_94.log")
    assert _codes(events) == [43, 43, 31, 94]
    assert [e.gpu_uuid for e in events] == [
        "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
        "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
        "GPU-3b6ec030-5adc-1847-e155-79f635584b4e",
        "GPU-c24840ec-8de1-83d5-b126-08000173ae32",
    ]
    mmu = events[2]
    assert mmu.bus_id == "0000:00:07"
    assert "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8" in mmu.message
    assert mmu.timestamp.wall == datetime(2024, 8, 5, 3, 54, 13)
    assert events[3].pid is None


def test_xid79_and_its_fall_off_line_and_crash_dump_continuations() -> None:
    events = _parse("dmesg_ctime_xid79_crash_dump_continuation.log")
    assert [(e.kind, e.xid, e.line) for e in events] == [
        ("xid", 79, 3),
        ("fallen_off_bus", None, 4),
    ]
    xid, fell = events
    assert xid.message == "GPU has fallen off the bus."
    assert (fell.bus_id, fell.bus_id_raw) == ("0000:a1:00", "0000:a1:00.0")
    assert fell.gpu_uuid == xid.gpu_uuid == "GPU-979426f2-893a-7cbb-c4cf-81472f89a462"


def test_fall_off_probe_message_without_xid() -> None:
    (event,) = _parse("dmesg_fallen_off_bus_multiline_no_xid.log")
    assert (event.kind, event.xid, event.line) == ("fallen_off_bus", None, 1)
    assert event.bus_id == "0000:b3:00"
    assert event.message == (
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
        "fallen off the bus and is not responding to commands."
    )
    assert event.timestamp.uptime_s == 1843.308145
    assert event.timestamp.raw == "1843.308145"


def test_healthy_boot_log_has_no_events() -> None:
    text = (LOGS / "dmesg_decode_iso_boot_clean.log").read_text(encoding="utf-8")
    assert "NVRM: loading NVIDIA UNIX x86_64 Kernel Module" in text
    assert parse_kernel_log(text) == []


def test_xid74_register_words_stay_in_the_message() -> None:
    (event,) = _parse("dmesg_xid74_nvlink_registers.log")
    assert (event.xid, event.bus_id) == (74, "0003:00:00")
    assert event.message.endswith("link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    assert event.nvlink is None
    assert event.timestamp.uptime_s == 449410.332316


def test_old_driver_lines_without_pid() -> None:
    dbe, retired = _parse("dmesg_ctime_driver390_xid48_63_page_retirement.log")
    assert (dbe.xid, dbe.pid, dbe.process) == (48, None, None)
    assert dbe.message.endswith("at partition 4, subpartition 1.")
    assert retired.message.startswith("Dynamic Page Retirement: New page retired")


def test_nvidia_doc_example_without_pci_prefix() -> None:
    (event,) = _parse("nvidia_doc_example_legacy_no_pci_prefix.log")
    assert (event.xid, event.bus_id, event.bus_id_raw) == (14, "0000:03:00", "0000:03:00")
    assert event.gpu_uuid == "GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"
    assert event.message == "Channel 00000001"
    assert event.timestamp.raw is None


def test_gb200_nvlink5_fatal_and_recovery_action() -> None:
    events = _parse("dmesg_gb200_xid149_154_assembled.log")
    assert _codes(events) == [149, 154, 149, 154, 149, 149, 149, 154, 154]
    netir = events[0]
    assert netir.nvlink is not None
    assert (netir.nvlink.unit, netir.nvlink.fatal, netir.nvlink.link) == (
        "NETIR_LINK_EVT",
        True,
        1,
    )
    assert netir.nvlink.values == (0x021425C6, 0, 0, 0, 0, 0)
    assert netir.bus_id == "0009:01:00"
    assert events[1].recovery_action == "Drain and Reset"
    assert events[3].recovery_action == "GPU Reset Required"
    assert events[5].nvlink is not None and events[5].nvlink.link == 15


def test_nvlink5_nonfatal_with_process() -> None:
    events = _parse("bare_gb200_nvlink5_nonfatal_assembled.log")
    assert _codes(events) == [149, 145, 145, 149, 145, 145, 145, 145, 145]
    assert all(e.nvlink is not None and not e.nvlink.fatal for e in events)
    rxpipe = events[1]
    assert (rxpipe.pid, rxpipe.process) == (876767, "ray::WorkerDict")
    assert rxpipe.nvlink is not None
    assert (rxpipe.nvlink.unit, rxpipe.nvlink.link) == ("RLW_RXPIPE", 13)
    assert rxpipe.nvlink.values[:2] == (0x0409A0C2, 0x8)


def test_bare_line_without_name() -> None:
    (event,) = _parse("bare_xid63_row_remapper.log")
    assert (event.xid, event.bus_id, event.pid, event.process) == (63, "0000:10:1c", 1896, None)
    assert event.message == "Row Remapper: New row marked for remapping, reset gpu to activate."


# --- journalctl and syslog --------------------------------------------------------------------


def test_journal_gsp_crashcat_banners_and_registers_are_context() -> None:
    (event,) = _parse("journal_xid120_gsp_crashcat.log")
    assert (event.xid, event.line, event.host) == (120, 8, "Kyrios")
    assert event.message.startswith("GSP task exception: load access page fault (cause:0xd)")
    assert event.gpu_uuid == "GPU-751acba2-df95-76f6-5914-58abf0c3cba3"
    assert event.timestamp.raw == "Apr 19 13:16:41"
    assert event.timestamp.wall is None


def test_journal_gsp_task_panic() -> None:
    (event,) = _parse("journal_xid120_gsp_task_panic_registers.log")
    assert (event.xid, event.bus_id, event.host) == (120, "0000:01:00", "ANDROMEDA")
    assert event.message.startswith("GSP task panic: unknown error (0)")


def test_journal_pmu_halt_recovery_action_and_context_switch_timeout() -> None:
    halt, recovery, timeout = _parse("journal_xid62_154_109_rtx5080.log")
    assert (halt.xid, halt.pid) == (62, None)
    assert halt.message.startswith("3239edf9 0000c3d8 00000000")
    assert (recovery.xid, recovery.recovery_action) == (154, "GPU Reset Required")
    assert (timeout.xid, timeout.pid, timeout.process) == (109, 1699, "cinnamon")
    assert timeout.message.startswith("channel 0x00000004, errorString CTX SWITCH TIMEOUT")
    assert {e.gpu_uuid for e in (halt, recovery, timeout)} == {
        "GPU-cccfc25d-fc66-0d40-e289-3b1a1f5d7896"
    }


def test_journal_init_failures_are_not_fall_off_reports() -> None:
    text = (LOGS / "journal_fedora_rtx5080_init_failure_no_xid.log").read_text(encoding="utf-8")
    assert "NVRM: GPU 0000:09:00.0: RmInitAdapter failed!" in text
    assert parse_kernel_log(text) == []


def test_kernel_prefix_without_stamp_and_preemptive_cleanup_cause() -> None:
    events = _parse("kernel_prefix_xid45_caused_by_nvlink.log")
    assert _codes(events) == [45] * 7
    assert [e.caused_by_xid for e in events] == [149, 145, 145, 145, 149, 145, 145]
    assert events[0].message == "Ch 00000001 caused by previous Xid 149"
    assert (events[0].timestamp.raw, events[0].host) == (None, None)


def test_journalctl_output_modes() -> None:
    events = _parse("journalctl_output_modes_constructed.log")
    assert len(events) == 7
    assert {event.host for event in events} == {"dev.luketic"}
    short, precise, iso, iso_precise, full, unix, monotonic = (e.timestamp for e in events)
    assert (short.raw, short.wall) == ("Mar 15 14:53:00", None)
    assert (precise.raw, precise.wall) == ("Mar 15 14:53:09.123456", None)
    plus_one = timezone(timedelta(hours=1))
    assert iso.wall == datetime(2026, 3, 15, 14, 53, 0, tzinfo=plus_one)
    assert iso_precise.wall == datetime(2026, 3, 15, 14, 53, 0, 412093, tzinfo=plus_one)
    assert full.wall == datetime(2026, 3, 15, 14, 53, 9)
    assert unix.wall == datetime(2026, 3, 15, 13, 53, 0, 412093, tzinfo=UTC)
    assert (monotonic.uptime_s, monotonic.wall) == (7286.412093, None)


def test_syslog_lines_with_kernel_uptime() -> None:
    dbe, remap, contained, nvlink = _parse("syslog_messages_constructed.log")
    assert (dbe.xid, dbe.host, dbe.timestamp.raw) == (48, "worker4", "Dec  2 10:43:35")
    assert dbe.timestamp.uptime_s == 240314.528856
    assert remap.xid == 63
    assert contained.timestamp.wall == datetime(2024, 12, 2, 10, 43, 35, 529012, tzinfo=UTC)
    assert (nvlink.xid, nvlink.pid, nvlink.process, nvlink.host) == (
        74,
        None,
        None,
        "ip-10-1-2-3",
    )


def test_raw_kmsg_records() -> None:
    events = _parse("kmsg_raw_xid79_constructed.log")
    assert [(e.kind, e.xid, e.line) for e in events] == [
        ("xid", 79, 3),
        ("fallen_off_bus", None, 4),
    ]
    assert events[0].timestamp.raw == "98379181630"
    assert events[0].timestamp.uptime_s == pytest.approx(98379.18163)
    assert events[0].gpu_uuid == "GPU-979426f2-893a-7cbb-c4cf-81472f89a462"


def test_mig_instance_attribution() -> None:
    gi_only, plain, uncontained, gi_ci = _parse("mig_forms_constructed.log")
    assert (gi_only.bus_id_raw, gi_only.bus_id) == ("PCI:0000:01:00 GPU-I:05", "0000:01:00")
    assert (gi_only.gpu_instance, gi_only.compute_instance, gi_only.pid) == (5, None, 7194)
    assert (plain.gpu_instance, plain.xid) == (None, 94)
    assert uncontained.message == "Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"
    assert (gi_ci.xid, gi_ci.gpu_instance, gi_ci.compute_instance) == (31, 5, 1)


def test_other_prefixes() -> None:
    raw, fell, decoded, talos = _parse("other_prefixes_constructed.log")
    assert raw.timestamp.uptime_s == 98379.18163
    assert fell.kind == "fallen_off_bus"
    assert decoded.timestamp.wall == datetime(2024, 4, 5, 21, 29, 39)
    assert talos.xid == 119
    assert talos.timestamp.wall == datetime(2026, 4, 22, 21, 27, 51, 291660, tzinfo=UTC)


# --- what is not an event ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        '{"DCGM GPU Diagnostic": {"test_categories": []}}',
        "No devices were found\n",
        "\x00\xff\xfe garbage \x1b[31m",
        "[    0.000000] Linux version 6.8.0-1015-aws (buildd@lcy02-amd64-049)\n",
        "SNVRM: Xid (PCI:0000:3b:00): 79, not a driver line\n",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress error\n",
    ],
    ids=["empty", "blank", "json", "nvidia-smi", "binary", "other-kernel", "glued", "sxid"],
)
def test_text_without_events_gives_nothing(text: str) -> None:
    assert parse_kernel_log(text) == []


@pytest.mark.parametrize(
    "line",
    [
        "[ 12.5] NVRM: Xid (PCI:0000:3b:00): INVALID, pid=1234",
        "Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI",
        "NVRM: Xid (invalid): some error",
    ],
)
def test_unreadable_xid_line_raises(line: str) -> None:
    with pytest.raises(ParseError, match=r"line 2: NVRM Xid line without a readable Xid code"):
        parse_kernel_log(f"[ 1.0] usb 1-1: new device\n{line}\n")


_REAL_LINES = sorted(
    {line for path in LOGS.glob("*.log") for line in path.read_text(encoding="utf-8").splitlines()}
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    line=st.sampled_from(_REAL_LINES),
    cut=st.integers(min_value=0, max_value=400),
    noise=st.text(max_size=12),
)
def test_mutated_real_lines_raise_nothing_but_parse_error(line: str, cut: int, noise: str) -> None:
    mutated = line[:cut] + noise + line[cut + len(noise) :]
    lines = mutated.count("\n") + 1
    outcome: list[XidEvent] | ParseError
    try:
        outcome = parse_kernel_log(mutated)
    except ParseError as exc:
        outcome = exc
    if isinstance(outcome, ParseError):
        assert "NVRM Xid line without a readable Xid code" in str(outcome)
    else:
        assert all(1 <= event.line <= lines for event in outcome)


def test_every_sample_is_listed_in_sources() -> None:
    listed = (LOGS / "SOURCES.md").read_text(encoding="utf-8")
    samples = sorted(path.name for path in LOGS.glob("*.log"))
    assert len(samples) >= 20
    assert [name for name in samples if f"`{name}`" not in listed] == []
