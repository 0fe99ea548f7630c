"""`nodeforge diagnose` on every real output in tests/fixtures/outputs (each folder's SOURCES.md
names where they came from): the reader it picks, the verdict and the action on the ones that
matter; foreign text is unreadable with what each reader expected, and nothing raises."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeforge.cli import main
from nodeforge.diagnose import diagnose
from tests.conftest import REPO

OUTPUTS = REPO / "tests" / "fixtures" / "outputs"
FAMILY = {
    "kernel_log": {"kernel-log"},
    "nvidia_smi": {"nvidia-smi"},
    "dcgmi": {"dcgmi"},
    "nccl": {"nccl-tests", "nccl-debug"},
    "efa": {"fi_info", "efa-installer", "efa-installed-packages"},
    "fi_info": {"fi_info"},  # the older samples sit beside the folders, named by tool
}
# samples that are not a whole output of their tool: a JSON fragment, a header alone, CSV
# without the header that names its fields, a run whose every rank printed rank 0's lines
NOT_WHOLE = {
    "json_4_x_diagnostic_test_fragment.txt",
    "nccl_tests_version_header_gh200.txt",
    "legacy_non_mpi_build_duplicate_rank0.txt",
    "nvidia_smi_query_na.csv",
    "nvidia_smi_query_not_supported.csv",
    "nvidia_smi_query_units_not_supported.csv",
}


def _samples() -> list[Path]:
    return sorted(p for p in OUTPUTS.rglob("*") if p.is_file() and p.name != "SOURCES.md")


@pytest.mark.parametrize("sample", _samples(), ids=lambda p: p.name)
def test_every_sample_is_read_by_its_own_tool(sample: Path) -> None:
    found = diagnose(sample.read_text(encoding="utf-8", errors="replace"), sample.name)
    if sample.name in NOT_WHOLE:
        assert found.verdict == "unreadable"
        return
    folder = sample.parent.name
    expected = FAMILY.get(folder) or {
        k for tool, kinds in FAMILY.items() if sample.name.startswith(tool) for k in kinds
    }
    assert found.kind in expected, (found.kind, found.reason)
    assert found.verdict in ("healthy", "fault")


@pytest.mark.parametrize(
    ("sample", "verdict", "action"),
    [
        ("kernel_log/dmesg_iso_xid48_63_94_dbe.log", "fault", "replace_node"),
        ("kernel_log/dmesg_ctime_xid79_crash_dump_continuation.log", "fault", "reboot_node"),
        ("kernel_log/dmesg_fallen_off_bus_multiline_no_xid.log", "fault", "reboot_node"),
        ("kernel_log/dmesg_xid74_nvlink_registers.log", "fault", "reset_gpu"),
        ("kernel_log/dmesg_ctime_uuid_xid43_31_94.log", "healthy", None),
        ("kernel_log/dmesg_decode_iso_boot_clean.log", "healthy", None),
        ("kernel_log/journal_fedora_rtx5080_init_failure_no_xid.log", "fault", "reboot_node"),
        ("nvidia_smi/query_535_a10.txt", "fault", "reset_gpu"),
        ("nvidia_smi/remapped_rows_pending_failure_constructed.csv", "fault", "replace_node"),
        ("nvidia_smi/table_525_a40_gpu_err.txt", "fault", "reset_gpu"),
        ("nvidia_smi/failure_gpu_lost.txt", "fault", "reboot_node"),
        ("nvidia_smi/table_550_h100x8.txt", "healthy", None),
        ("nvidia_smi_driver_failed.txt", "fault", "reboot_node"),
        ("dcgmi/diag_3_3_0_pcie_fail_all.txt", "fault", "replace_node"),
        ("dcgmi/diag_4_4_2_r2_pass.txt", "healthy", None),
        ("nccl/debug_ofi_refused_socket_fallback_2_27.log", "fault", None),
        ("nccl_debug_h200_efa_16nics.log", "healthy", None),
        ("nccl_all_gather_oob_failed_legacy.txt", "fault", None),
        ("nccl_all_reduce_h100_16rank.txt", "healthy", None),
        ("efa/fi_info_pdsh_three_hosts_one_61.txt", "fault", None),
        ("efa/fi_info_p4d_rdm_4nics_111.txt", "healthy", None),
        ("efa/efa_installer_1.30_ping_test_failed.txt", "fault", None),
        ("efa/efa_installer_1.34_reboot_needed.txt", "healthy", None),
    ],
)
def test_verdicts(sample: str, verdict: str, action: str | None) -> None:
    found = diagnose((OUTPUTS / sample).read_text(encoding="utf-8"), sample)
    assert found.verdict == verdict, found.reason
    if action is not None:
        assert found.action == action


@pytest.mark.parametrize("name", ["README.md", "pyproject.toml", "Makefile", "images/compat.yml"])
def test_foreign_text_is_unreadable_with_what_was_expected(name: str) -> None:
    found = diagnose((REPO / name).read_text(encoding="utf-8"), name)
    assert (found.kind, found.verdict) == ("unknown", "unreadable")
    assert any(d.startswith("kernel-log: ") for d in found.details)
    assert any(d.startswith("nvidia-smi: ") for d in found.details)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_any_text_gets_a_verdict_and_no_exception(text: str) -> None:
    assert diagnose(text, "-").verdict in ("healthy", "fault", "unreadable")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.sampled_from(_samples()), st.data())
def test_cut_samples_get_a_verdict_and_no_exception(sample: Path, data: st.DataObject) -> None:
    lines = sample.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    start = data.draw(st.integers(0, len(lines)))
    end = data.draw(st.integers(start, len(lines)))
    assert diagnose("".join(lines[start:end]), "-").verdict in ("healthy", "fault", "unreadable")


# --- the command ---------------------------------------------------------------------------


def test_command_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    healthy = str(OUTPUTS / "nvidia_smi" / "table_550_h100x8.txt")
    fault = str(OUTPUTS / "kernel_log" / "dmesg_iso_xid48_63_94_dbe.log")
    assert main(["diagnose", healthy]) == 0
    assert ": healthy (nvidia-smi): " in capsys.readouterr().out
    assert main(["diagnose", healthy, fault, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    verdicts = [(d["kind"], d["verdict"], d["action"]) for d in report["diagnoses"]]
    assert verdicts == [("nvidia-smi", "healthy", None), ("kernel-log", "fault", "replace_node")]
    assert main(["diagnose", str(REPO / "README.md")]) == 2
    assert "expected: dcgmi: " in capsys.readouterr().out


def test_command_reads_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (OUTPUTS / "nvidia_smi_no_devices.txt").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert main(["diagnose", "-"]) == 1
    assert capsys.readouterr().out.startswith("-: fault (nvidia-smi): ")


def test_command_needs_no_catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no images/ here, and none passed
    assert main(["diagnose", str(OUTPUTS / "nvidia_smi_no_devices.txt")]) == 1
