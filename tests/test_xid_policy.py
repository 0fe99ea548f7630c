"""The Xid policy table and the verdict on real kernel logs (fixtures/outputs/kernel_log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.errors import InputError
from nodeforge.parsers.kernel_log import XidEvent, parse_kernel_log
from nodeforge.xid_policy import ACTIONS, action_for, classify, load_policy

LOGS = Path(__file__).parent / "fixtures" / "outputs" / "kernel_log"
PACKAGED = Path(__file__).parents[1] / "src" / "nodeforge" / "xid_policy.yml"

REQUIRED = {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120}
REQUIRED |= {121, 140, 143, *range(144, 151)}


def _events(name: str) -> list[XidEvent]:
    return parse_kernel_log((LOGS / name).read_text(encoding="utf-8"))


# --- the table --------------------------------------------------------------------------------


def test_table_lists_the_codes_a_node_check_meets() -> None:
    policy = load_policy()
    assert set(policy.entries) >= REQUIRED


def test_every_entry_cites_a_url_or_a_pinned_file() -> None:
    policy = load_policy()
    for entry in [policy.default, *policy.entries.values()]:
        assert entry.sources, entry.name
        for source in entry.sources:
            assert "https://" in source or "@" in source, (entry.xid, source)


@pytest.mark.parametrize(
    ("xid", "action", "hardware", "nvidia"),
    [
        (13, "application", False, "RESTART_APP"),
        (31, "application", False, "RESTART_APP"),
        (43, "application", False, "IGNORE"),
        (48, "reset_gpu", True, "WORKFLOW_XID_48"),
        (63, "replace_node", True, "IGNORE"),
        (64, "replace_node", True, "RESET_GPU"),
        (74, "reset_gpu", True, "WORKFLOW_NVLINK_ERR"),
        (79, "reboot_node", True, "RESTART_BM"),
        (94, "application", True, "RESTART_APP"),
        (95, "reboot_node", True, "RESET_GPU"),
        (119, "reset_gpu", False, "RESET_GPU"),
        (149, "reset_gpu", True, "WORKFLOW_NVLINK5_ERR"),
    ],
)
def test_action_for_known_codes(xid: int, action: str, hardware: bool, nvidia: str) -> None:
    entry = action_for(xid)
    assert (entry.xid, entry.action, entry.hardware_fault, entry.nvidia_action) == (
        xid,
        action,
        hardware,
        nvidia,
    )


def test_unknown_code_gets_the_default_reboot() -> None:
    entry = action_for(9999)
    assert (entry.xid, entry.action, entry.hardware_fault) == (None, "reboot_node", False)
    assert any("NVSentinel" in source for source in entry.sources)


def test_nvlink5_codes_have_a_milder_nonfatal_action() -> None:
    for xid in range(144, 151):
        entry = action_for(xid)
        assert (entry.action, entry.nonfatal_action) == ("reset_gpu", "application")


def test_explicit_path_reads_the_same_table() -> None:
    assert set(load_policy(PACKAGED).entries) == set(load_policy().entries)


# --- verdicts on real logs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "action", "gpus"),
    [
        ("dmesg_decode_iso_boot_clean.log", None, ()),
        ("journal_fedora_rtx5080_init_failure_no_xid.log", None, ()),
        ("dmesg_decode_iso_xid13_43.log", "application", ()),
        ("dmesg_ctime_uuid_xid43_31_94.log", "application", ()),
        ("bare_gb200_nvlink5_nonfatal_assembled.log", "application", ()),
        ("dmesg_ctime_xid119_gsp_rpc_history.log", "reset_gpu", ("0000:9b:00",)),
        ("journal_xid120_gsp_crashcat.log", "reset_gpu", ("0000:02:00",)),
        ("journal_xid62_154_109_rtx5080.log", "reset_gpu", ("0000:01:00",)),
        ("dmesg_xid74_nvlink_registers.log", "reset_gpu", ("0003:00:00",)),
        ("dmesg_ctime_xid79_crash_dump_continuation.log", "reboot_node", ("0000:a1:00",)),
        ("dmesg_fallen_off_bus_multiline_no_xid.log", "reboot_node", ("0000:b3:00",)),
        ("dmesg_iso_xid48_63_94_dbe.log", "replace_node", ("0000:19:00",)),
        ("dmesg_ctime_driver390_xid48_63_page_retirement.log", "replace_node", ("0000:8a:00",)),
        ("bare_xid63_row_remapper.log", "replace_node", ("0000:10:1c",)),
    ],
)
def test_verdict_on_real_logs(name: str, action: str | None, gpus: tuple[str, ...]) -> None:
    verdict = classify(_events(name))
    assert verdict.action == action
    assert verdict.healthy is (action in (None, "application"))
    assert verdict.gpus == gpus


def test_contained_errors_are_hardware_but_need_no_node_action() -> None:
    verdict = classify(_events("dmesg_ctime_uuid_xid43_31_94.log"))
    assert verdict.healthy
    assert verdict.hardware_fault
    assert [f.entry.hardware_fault for f in verdict.findings] == [False, False, False, True]


def test_dbe_sequence_findings_keep_each_events_action() -> None:
    verdict = classify(_events("dmesg_iso_xid48_63_94_dbe.log"))
    assert [f.action for f in verdict.findings[:3]] == ["reset_gpu", "replace_node", "application"]
    assert verdict.findings[1].entry.mnemonic == "INFOROM_DRAM_RETIREMENT_EVENT"


def test_fall_off_report_without_xid_counts_as_xid_79() -> None:
    (finding,) = classify(_events("dmesg_fallen_off_bus_multiline_no_xid.log")).findings
    assert (finding.event.xid, finding.entry.xid, finding.action) == (None, 79, "reboot_node")


def test_recovery_action_of_xid_154_decides() -> None:
    verdict = classify(_events("dmesg_gb200_xid149_154_assembled.log"))
    recoveries = [f.action for f in verdict.findings if f.event.xid == 154]
    assert recoveries == ["reset_gpu"] * 4
    assert verdict.action == "reset_gpu"
    assert verdict.gpus == ("0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00")


@pytest.mark.parametrize(
    ("recovery", "action"),
    [
        ("0x0 (None)", "application"),
        ("0x2 (Node Reboot Required)", "reboot_node"),
        ("0x2 (OS Reboot)", "reboot_node"),
        ("0x8 (Drain P2P)", "reset_gpu"),
        ("0x9 (Some Future Action)", "reboot_node"),
    ],
)
def test_recovery_action_names(recovery: str, action: str) -> None:
    # inline: no citable real log names these recoveries (see SOURCES.md)
    line = "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to "
    line += recovery
    assert classify(parse_kernel_log(line)).action == action


def test_cleanup_whose_cause_was_cut_from_the_log_takes_the_causes_action() -> None:
    verdict = classify(_events("kernel_prefix_xid45_caused_by_nvlink.log"))
    assert verdict.action == "reset_gpu"
    assert verdict.gpus == ("0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00")


def test_cleanup_next_to_its_cause_follows_the_cause_line() -> None:
    # inline: a nonfatal Xid 149 and the Xid 45 it caused, both in the log
    log = (
        "NVRM: Xid (PCI:0000:dc:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226)\n"
        "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, Ch 00000001 caused by previous Xid 149\n"
    )
    verdict = classify(parse_kernel_log(log))
    assert [f.action for f in verdict.findings] == ["application", "application"]
    assert verdict.healthy


def test_unknown_codes_are_listed_and_reboot() -> None:
    verdict = classify(_events("nvidia_doc_example_legacy_no_pci_prefix.log"))
    assert (verdict.action, verdict.unknown_xids, verdict.gpus) == (
        "reboot_node",
        (14,),
        ("0000:03:00",),
    )


def test_no_events_is_healthy_with_no_action() -> None:
    verdict = classify([])
    assert (verdict.action, verdict.healthy, verdict.findings) == (None, True, ())


def test_actions_are_ordered_mildest_first() -> None:
    assert ACTIONS == ("application", "reset_gpu", "reboot_node", "replace_node")


# --- broken tables ----------------------------------------------------------------------------

_ENTRY = "  - {xid: 79, name: fell off, action: reboot_node, hardware_fault: true, sources: [a]}\n"
_HEAD = (
    "references: {a: 'https://example.invalid/a'}\n"
    "default: {name: d, action: reboot_node, hardware_fault: false, sources: [a]}\n"
    "fallen_off_bus_xid: 79\n"
    "recovery_actions: {None: application}\n"
    "xids:\n"
)


@pytest.mark.parametrize(
    ("xids", "message"),
    [
        (_ENTRY + _ENTRY, "Xid 79 is listed more than once"),
        (_ENTRY.replace("[a]", "[b]"), "source 'b' is not in references"),
        (_ENTRY.replace("reboot_node", "drain"), "Input should be 'application'"),
        (_ENTRY.replace("xid: 79", "xid: 80"), "fallen_off_bus_xid 79 is not listed"),
        (_ENTRY.replace(", hardware_fault: true", ""), "required field is missing"),
        (_ENTRY.replace("}", ", severity: high}"), "unknown key"),
    ],
)
def test_broken_table_names_the_problem(tmp_path: Path, xids: str, message: str) -> None:
    path = tmp_path / "xid_policy.yml"
    path.write_text(_HEAD + xids, encoding="utf-8")
    with pytest.raises(InputError, match=message) as caught:
        load_policy(path)
    assert caught.value.file == path


def test_table_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "xid_policy.yml"
    path.write_text("- 79\n", encoding="utf-8")
    with pytest.raises(InputError, match="expected a mapping"):
        load_policy(path)


def test_well_formed_inline_table_loads(tmp_path: Path) -> None:
    path = tmp_path / "xid_policy.yml"
    path.write_text(_HEAD + _ENTRY, encoding="utf-8")
    policy = load_policy(path)
    assert policy.action_for(79).sources == ("https://example.invalid/a",)
    assert policy.action_for(13).action == "reboot_node"
