"""nvidia-smi parsers on real outputs (tests/fixtures/outputs/nvidia_smi/SOURCES.md)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from nodeforge.parsers import nvidia_smi
from nodeforge.parsers.nvidia_smi import (
    QueryCsv,
    QueryReport,
    SmiTable,
    TopoMatrix,
)

OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"
SAMPLES = OUTPUTS / "nvidia_smi"


def _read(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def _table(name: str) -> SmiTable:
    result = nvidia_smi.parse_nvidia_smi(_read(name))
    assert isinstance(result, SmiTable)
    return result


def _query(name: str) -> QueryReport:
    result = nvidia_smi.parse_nvidia_smi(_read(name))
    assert isinstance(result, QueryReport)
    return result


def _topology(name: str) -> TopoMatrix:
    result = nvidia_smi.parse_nvidia_smi(_read(name))
    assert isinstance(result, TopoMatrix)
    return result


def _csv(name: str) -> QueryCsv:
    result = nvidia_smi.parse_nvidia_smi(_read(name))
    assert isinstance(result, QueryCsv)
    return result


# --- default table ----------------------------------------------------------------------------


def test_table_driver_331_layout() -> None:
    table = _table("table_331_gtx680.txt")
    assert (table.smi_version, table.driver_version, table.cuda_version) == (
        "331.62",
        "331.62",
        None,
    )
    assert table.timestamp == "Fri Apr 18 12:26:18 2014"
    assert [gpu.bus_id for gpu in table.gpus] == ["0000:03:00.0", "0000:04:00.0"]
    first = table.gpus[0]
    assert (first.index, first.name, first.persistence_mode) == (0, "GeForce GTX 680", False)
    assert (first.fan_percent, first.temperature_c, first.performance_state) == (30, 35, None)
    assert (first.power_draw_w, first.power_cap_w) == (None, None)
    assert (first.memory_used_mib, first.memory_total_mib) == (9, 4095)
    assert (first.utilization_percent, first.compute_mode) == (None, "Default")
    assert (first.ecc, first.ecc_uncorrectable, first.mig_mode) == ("N/A", None, None)
    assert first.errors == ()


def test_table_windows_driver_model_column() -> None:
    (gpu,) = _table("table_369_windows_tcc_wddm.txt").gpus
    assert (gpu.driver_model, gpu.persistence_mode, gpu.display_active) == ("WDDM", None, False)
    assert (gpu.name, gpu.performance_state, gpu.memory_total_mib) == ("GeForce 840M", "P8", 2048)
    windows = _table("table_610_windows_wddm.txt")
    assert (windows.driver_version, windows.cuda_version) == ("610.62", "13.3")
    (modern,) = windows.gpus
    assert (modern.driver_model, modern.display_active) == ("WDDM", True)
    assert len(windows.processes) == 21
    assert windows.processes[0].type == "C+G"
    assert windows.processes[0].name == "C:\\Windows\\System32\\dwm.exe"
    assert windows.processes[0].memory_mib is None


def test_table_gpu_reading_err_is_flagged() -> None:
    table = _table("table_525_a40_gpu_err.txt")
    assert len(table.gpus) == 8
    lost = table.gpus[4]
    assert lost.bus_id == "00000000:83:00.0"
    assert set(lost.errors) == {
        "name",
        "ecc",
        "fan",
        "temperature",
        "performance_state",
        "power_draw",
        "power_cap",
        "utilization",
        "mig_mode",
    }
    assert (lost.temperature_c, lost.power_draw_w, lost.ecc_uncorrectable) == (None, None, None)
    assert (lost.memory_used_mib, lost.memory_total_mib) == (0, 46068)
    assert [gpu.index for gpu in table.gpus if gpu.errors] == [4]
    assert table.gpus[2].power_draw_w == 81.0
    (process,) = table.processes
    assert (process.gpu, process.pid, process.type, process.memory_mib) == (2, 2111354, "C", 818)
    assert process.gpu_instance == "N/A"


def test_table_err_in_fan_cell_only() -> None:
    (gpu,) = _table("table_525_err_fan.txt").gpus
    assert gpu.errors == ("fan",)
    assert (gpu.name, gpu.fan_percent, gpu.temperature_c) == ("NVIDIA GeForce ...", None, 38)
    assert (gpu.power_draw_w, gpu.power_cap_w, gpu.compute_mode) == (49.0, 450.0, "E. Process")


def test_table_h100_x8_wide_layout() -> None:
    table = _table("table_550_h100x8.txt")
    assert (table.driver_version, table.cuda_version) == ("550.90.07", "12.4")
    assert [gpu.index for gpu in table.gpus] == list(range(8))
    assert table.gpus[7].bus_id == "00000000:DB:00.0"
    assert {gpu.name for gpu in table.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(gpu.persistence_mode and gpu.mig_mode == "Disabled" for gpu in table.gpus)
    assert {
        (gpu.power_cap_w, gpu.memory_total_mib, gpu.ecc_uncorrectable) for gpu in table.gpus
    } == {(700.0, 81559, 0)}
    assert table.processes == ()


Header = tuple[str, str, str, float, int]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("table_570_t4.txt", ("570.133.20", "12.8", "Tesla T4", 70.0, 15360)),
        ("table_610_b200_2of8.txt", ("610.43.02", "13.3", "NVIDIA B200", 1000.0, 183359)),
        (
            "table_610_kmd_linux.txt",
            ("610.57.04", "13.3", "NVIDIA GeForce RTX 2080 ...", 250.0, 8192),
        ),
        ("table_590_h200_processes.txt", ("590.48.01", "13.1", "NVIDIA H200", 700.0, 143771)),
    ],
)
def test_table_recent_headers(name: str, expected: Header) -> None:
    table = _table(name)
    first = table.gpus[0]
    assert (
        table.driver_version,
        table.cuda_version,
        first.name,
        first.power_cap_w,
        first.memory_total_mib,
    ) == expected


def test_table_mig_devices() -> None:
    table = _table("table_590_h100_mig.txt")
    (gpu,) = table.gpus
    assert (gpu.mig_mode, gpu.ecc, gpu.utilization_percent) == ("Enabled", "On", None)
    assert [(d.gpu_instance, d.mig_device, d.memory_total_mib) for d in table.mig_devices] == [
        (2, 0, 40448),
        (3, 1, 20096),
        (9, 2, 9984),
        (10, 3, 9984),
    ]
    assert table.mig_devices[0].memory_used_mib == 26
    assert table.processes == ()


def test_table_processes() -> None:
    processes = _table("table_590_h200_processes.txt").processes
    assert [(p.pid, p.name, p.memory_mib) for p in processes] == [
        (10291, "/root/tools/memhog", 2566),
        (10293, "/root/tools/memhog", 1542),
        (10309, "./gpu_burn", 28234),
    ]


def test_table_with_a_handle_error_before_it() -> None:
    table = _table("table_handle_error_before_table_constructed.txt")
    assert [gpu.bus_id for gpu in table.gpus] == ["00000000:03:00.0", "00000000:04:00.0"]
    (failure,) = table.failures
    assert (failure.kind, failure.bus_id, failure.reason) == (
        "gpu_unknown_error",
        "0000:0B:00.0",
        "Unknown Error",
    )
    error = nvidia_smi.failure_error(failure, "")
    assert isinstance(error, nvidia_smi.GpuUnknownError)
    assert error.bus_id == "0000:0B:00.0"


# --- nvidia-smi -q ----------------------------------------------------------------------------


def test_query_remap_pending_is_unhealthy() -> None:
    report = _query("query_535_a10.txt")
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == (
        "535.129.03",
        "12.2",
        1,
    )
    (gpu,) = report.gpus
    assert (gpu.bus_id, gpu.product_name) == ("00000000:07:00.0", "NVIDIA A10")
    assert gpu.uuid == "GPU-73d12ef7-f589-f867-4259-c7090ab44736"
    assert (gpu.persistence_mode, gpu.ecc_mode, gpu.reset_required) == (True, True, False)
    assert gpu.remapped_rows is not None
    assert (gpu.remapped_rows.uncorrectable, gpu.remapped_rows.pending) == (4, True)
    assert gpu.remapped_rows.failure is False
    assert gpu.remapped_rows.unhealthy
    assert (gpu.ecc_errors.volatile_uncorrectable, gpu.ecc_errors.aggregate_uncorrectable) == (0, 0)
    assert gpu.retired_pages.pending is None
    assert gpu.section.get("PCI", "Bus Id") == "00000000:07:00.0"


def test_query_hopper_535_throttle_reasons() -> None:
    report = _query("query_535_h100_2of8.txt")
    assert report.attached_gpus == 8
    assert [gpu.bus_id for gpu in report.gpus] == ["00000000:19:00.0", "00000000:3B:00.0"]
    first = report.gpus[0]
    assert first.clocks_event_reasons == ("HW Slowdown", "HW Power Brake Slowdown")
    assert first.ecc_errors.sram_threshold_exceeded is False
    assert first.remapped_rows is not None
    assert not first.remapped_rows.unhealthy
    assert (first.power_draw_w, first.power_limit_w, first.temperature_c) == (67.74, 700.0, 29)


def test_query_volta_ecc_layout_and_processes() -> None:
    (gpu,) = _query("query_560_titanv_volta.txt").gpus
    assert gpu.remapped_rows is None
    assert gpu.ecc_mode is None
    assert gpu.ecc_errors.volatile_uncorrectable is None
    assert gpu.ecc_errors.aggregate_correctable is None
    assert gpu.clocks_event_reasons == ("Idle",)
    processes = gpu.section.find("Processes")
    assert processes is not None
    pids = [node.value for node in processes.children if node.key == "Process ID"]
    assert pids == ["100607", "100838", "101815"]
    assert processes.children[2].get("Name") == "/usr/lib/xorg/Xorg"


def test_query_590_names() -> None:
    report = _query("query_590_h100.txt")
    (gpu,) = report.gpus
    assert (report.driver_version, report.cuda_version) == ("590.48.01", "13.1")
    # Average Power Draw comes before Instantaneous Power Draw
    assert (gpu.power_draw_w, gpu.power_limit_w) == (69.85, 700.0)
    assert (gpu.temperature_c, gpu.recovery_action, gpu.mig_mode) == (41, "None", "Disabled")
    assert gpu.ecc_errors.volatile_uncorrectable == 0
    assert gpu.ecc_errors.sram_threshold_exceeded is False
    assert gpu.remapped_rows is not None
    assert (gpu.remapped_rows.pending, gpu.remapped_rows.failure) == (False, False)


def test_query_mig_sections_do_not_count_as_the_gpu() -> None:
    (gpu,) = _query("query_590_h100_mig.txt").gpus
    assert gpu.mig_mode == "Enabled"
    assert gpu.remapped_rows is None
    mig = [node for node in gpu.section.children if node.key == "MIG Device"]
    assert [node.get("GPU Instance ID") for node in mig] == ["2", "3", "9", "10"]
    assert mig[0].get("ECC Errors", "Volatile", "SRAM Uncorrectable") == "0"
    assert gpu.ecc_errors.volatile_correctable == 0


def test_query_610_kmd_version_and_nested_power_limit() -> None:
    report = _query("query_610_kmd_linux.txt")
    assert (report.driver_version, report.cuda_version) == ("610.57.04", "13.3")
    (gpu,) = report.gpus
    assert (gpu.power_draw_w, gpu.power_limit_w) == (38.89, 250.0)
    assert gpu.product_name == "NVIDIA GeForce RTX 2080 SUPER"


def test_query_row_remapper_pending_and_failure() -> None:
    gpus = _query("query_row_remapper_pending_constructed.txt").gpus
    states = [
        (r.uncorrectable, r.pending, r.failure, r.unhealthy)
        for r in (gpu.remapped_rows for gpu in gpus)
        if r is not None
    ]
    assert states == [(4, True, False, True), (0, False, True, True)]


def test_query_tree_walk_and_missing_paths() -> None:
    (gpu,) = _query("query_535_a10.txt").gpus
    assert gpu.section.get("PCI", "GPU Link Info", "PCIe Generation", "Max") == "4"
    assert gpu.section.get("No Such Section", "Max") is None
    assert gpu.section.get("PCI") is None
    assert any(node.key == "Bank Remap Availability Histogram" for node in gpu.section.walk())


# --- --query-* CSV ----------------------------------------------------------------------------


def test_csv_header_with_units() -> None:
    table = _csv("query_gpu_header_a10.csv")
    assert table.fields[3:6] == ("utilization.gpu", "utilization.memory", "memory.total")
    assert table.units[3:6] == ("%", "%", "MiB")
    assert len(table.rows) == 5
    first = table.rows[0]
    assert (first.value("memory.total"), first.value("memory.used")) == (23028, 21)
    assert first.value("timestamp") == "2024/01/16 14:44:16.977"
    records = nvidia_smi.parse_query_gpu(_read("query_gpu_header_a10.csv"))
    assert [r.value("temperature.gpu") for r in records] == [25, 24, 23, 26, 25]


def test_csv_header_alias_and_unknown_error_cell() -> None:
    (row,) = _csv("query_gpu_header_unknown_error.csv").rows
    assert row.value("gpu_name") == "GeForce RTX 2080 Ti"
    assert row.value("power.draw") == 228.82
    default_limit = row.field("power.default_limit")
    assert (default_limit.status, default_limit.value) == ("not_available", None)


def test_csv_event_reasons_answer_for_throttle_reasons() -> None:
    (row,) = _csv("query_gpu_header_590_h100.csv").rows
    assert row.value("clocks_event_reasons.active") == 0x1
    assert row.value("clocks_throttle_reasons.active") == 0x1
    assert row.value("clocks_event_reasons.gpu_idle") is True
    assert row.value("clocks_event_reasons.hw_slowdown") is False
    assert row.value("memory.total") == 81559
    assert row.value("clocks_event_reasons_counters.sw_power_cap") == 0
    assert row.field("power.management").status == "not_available"
    assert row.value("ecc.mode.current") is True


def test_csv_without_header_needs_fields() -> None:
    with pytest.raises(nvidia_smi.ParseError, match="no CSV header line and no field list"):
        nvidia_smi.parse_query_csv(_read("../nvidia_smi_query_na.csv"))


def test_query_gpu_raises_a_handle_error_beside_gpu_lines() -> None:
    # Inline: the error line of failure_gpu_lost.txt beside one GPU line of the suite's query.
    output = "0, NVIDIA H100 80GB HBM3, 81559, 550.90.07, Enabled, No, 0x1, 0x233010DE\n" + _read(
        "failure_gpu_lost.txt"
    )
    with pytest.raises(nvidia_smi.GpuLostError) as raised:
        nvidia_smi.parse_query_gpu(output)
    assert raised.value.bus_id == "0000:02:00.0"
    table = nvidia_smi.parse_query_csv(output, nvidia_smi.DEFAULT_FIELDS)
    assert len(table.rows) == 1
    assert [f.kind for f in table.failures] == ["gpu_lost"]


# --- row remapping ----------------------------------------------------------------------------


def test_remapped_rows_pending_and_failure() -> None:
    rows = nvidia_smi.parse_remapped_rows(_read("remapped_rows_pending_failure_constructed.csv"))
    assert [r.gpu for r in rows] == [
        "00000000:19:00.0",
        "00000000:3B:00.0",
        "00000000:4C:00.0",
        "00000000:5D:00.0",
    ]
    assert [r.unhealthy for r in rows] == [False, True, True, False]
    assert (rows[1].uncorrectable, rows[1].pending) == (4, True)
    assert (rows[2].correctable, rows[2].failure) == (2, True)
    assert (rows[3].pending, rows[3].failure, rows[3].uncorrectable) == (None, None, None)


def test_remapped_rows_from_query_gpu_csv() -> None:
    (healthy,) = nvidia_smi.parse_remapped_rows(_read("query_gpu_header_590_h100.csv"))
    assert (healthy.gpu, healthy.pending, healthy.failure) == ("00000000:00:09.0", False, False)
    (mig,) = nvidia_smi.parse_remapped_rows(_read("query_gpu_header_590_h100_mig.csv"))
    assert (mig.pending, mig.correctable) == (None, None)


def test_remapped_rows_needs_a_remapped_rows_field() -> None:
    with pytest.raises(nvidia_smi.ParseError, match=r"no remapped_rows\.\* field"):
        nvidia_smi.parse_remapped_rows(_read("query_gpu_header_a10.csv"))


# --- topo -m ----------------------------------------------------------------------------------


def test_topology_two_gpus_space_aligned() -> None:
    topo = _topology("topo_2gpu_phb.txt")
    assert topo.devices == ("GPU0", "GPU1")
    assert topo.link("GPU0", "GPU1") == "PHB"
    assert topo.link("GPU1", "GPU1") == "X"
    row = topo.row("GPU0")
    assert (row.cpu_affinity, row.numa_affinity, row.gpu_numa_id) == ("0-11", "N/A", None)
    legend = dict(topo.legend)
    assert set(legend) == {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}
    assert legend["NV#"] == "Connection traversing a bonded set of # NVLinks"
    assert topo.nic_names == ()


def test_topology_gpus_nics_and_nic_legend() -> None:
    topo = _topology("topo_8xa100_17nics.txt")
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert len(topo.devices) == 25
    assert topo.link("GPU0", "GPU7") == "NV12"
    assert topo.link("GPU0", "NIC0") == "PXB"
    assert topo.link("NIC0", "NIC1") == "PIX"
    assert dict(topo.nic_names)["NIC16"] == "mlx5_bond_0"
    gpu = topo.row("GPU7")
    assert (gpu.cpu_affinity, gpu.numa_affinity, gpu.gpu_numa_id) == ("0-103", "0", "N/A")
    assert topo.row("NIC16").cpu_affinity is None


def test_topology_tabs_and_ansi_underline() -> None:
    topo = _topology("topo_590_h100_ansi.txt")
    assert topo.devices == ("GPU0",)
    row = topo.row("GPU0")
    assert (row.links, row.cpu_affinity, row.numa_affinity, row.gpu_numa_id) == (
        ("X",),
        "0-19",
        "0",
        "N/A",
    )
    windows = _topology("topo_610_windows.txt").row("GPU0")
    assert (windows.cpu_affinity, windows.numa_affinity, windows.gpu_numa_id) == (
        None,
        None,
        "N/A",
    )


def test_topology_unknown_device() -> None:
    with pytest.raises(nvidia_smi.ParseError, match="no device 'GPU9'"):
        _topology("topo_2gpu_phb.txt").link("GPU9", "GPU0")


# --- failure texts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("../nvidia_smi_no_devices.txt", nvidia_smi.NoDevicesFoundError),
        ("../nvidia_smi_driver_failed.txt", nvidia_smi.DriverUnreachableError),
        ("failure_nvml_mismatch.txt", nvidia_smi.DriverLibraryMismatchError),
        ("failure_nvml_mismatch_library_version.txt", nvidia_smi.DriverLibraryMismatchError),
        ("failure_gpu_lost.txt", nvidia_smi.GpuLostError),
        ("failure_gpu_lost_wrapped_windows.txt", nvidia_smi.GpuLostError),
        ("failure_handle_unknown_error.txt", nvidia_smi.GpuUnknownError),
        ("failure_handle_not_found.txt", nvidia_smi.GpuNotFoundError),
        ("failure_nvml_unknown_error.txt", nvidia_smi.NvmlUnknownError),
        ("failure_insufficient_permissions.txt", nvidia_smi.InsufficientPermissionsError),
        ("failure_gpu_access_blocked_wsl.txt", nvidia_smi.GpuAccessBlockedError),
        ("failure_libnvidia_ml_missing.txt", nvidia_smi.NvmlLibraryNotFoundError),
    ],
)
def test_each_failure_text_has_its_exception(
    name: str, error: type[nvidia_smi.NvidiaSmiFailureError]
) -> None:
    text = _read(name)
    for parse in (
        nvidia_smi.parse_nvidia_smi,
        nvidia_smi.parse_table,
        nvidia_smi.parse_query,
        nvidia_smi.parse_topology,
        nvidia_smi.parse_query_csv,
        nvidia_smi.parse_query_gpu,
    ):
        with pytest.raises(error) as raised:
            parse(text)
        assert type(raised.value) is error
        assert raised.value.output == text
        assert raised.value.notice is not None


def test_failure_details() -> None:
    with pytest.raises(nvidia_smi.DriverLibraryMismatchError) as mismatch:
        nvidia_smi.parse_nvidia_smi(_read("failure_nvml_mismatch_library_version.txt"))
    assert mismatch.value.nvml_library_version == "570.124"
    assert "570.124" in str(mismatch.value)
    with pytest.raises(nvidia_smi.DriverLibraryMismatchError) as older:
        nvidia_smi.parse_nvidia_smi(_read("failure_nvml_mismatch.txt"))
    assert older.value.nvml_library_version is None
    with pytest.raises(nvidia_smi.GpuNotFoundError) as missing:
        nvidia_smi.parse_nvidia_smi(_read("failure_handle_not_found.txt"))
    assert missing.value.bus_id == "0000:D8:00.0"
    assert isinstance(missing.value, nvidia_smi.DeviceHandleError)
    with pytest.raises(nvidia_smi.GpuUnknownError) as unknown:
        nvidia_smi.parse_nvidia_smi(_read("failure_handle_unknown_error.txt"))
    assert unknown.value.bus_id == "0000:07:00.0"


@pytest.mark.parametrize(
    ("line", "error"),
    [
        # Inline, not captured: the texts of NVML's reset and power errors, no public copy found.
        (
            "Unable to determine the device handle for GPU 0000:3B:00.0: GPU requires reset",
            nvidia_smi.GpuRequiresResetError,
        ),
        (
            "Unable to determine the device handle for GPU 0000:3B:00.0: Unable to communicate "
            "with GPU because it is insufficiently powered.",
            nvidia_smi.GpuInsufficientPowerError,
        ),
        (
            "Unable to determine the device handle for gpu 0000:01:00.0: Timeout",
            nvidia_smi.DeviceHandleError,
        ),
        ("Failed to initialize NVML: Driver Not Loaded", nvidia_smi.NvmlInitError),
    ],
)
def test_other_handle_and_nvml_reasons(
    line: str, error: type[nvidia_smi.NvidiaSmiFailureError]
) -> None:
    with pytest.raises(error) as raised:
        nvidia_smi.parse_nvidia_smi(line + "\n")
    assert type(raised.value) is error
    assert isinstance(raised.value, nvidia_smi.NvidiaSmiFailureError)


# --- format detection and foreign input -------------------------------------------------------


def test_every_sample_is_recognised() -> None:
    kinds = {"table": "table_", "query": "query_", "csv": "query_gpu_", "topology": "topo_"}
    for path in sorted(SAMPLES.glob("*")):
        if path.name.startswith(("failure_", "SOURCES")):
            continue
        result = nvidia_smi.parse_nvidia_smi(path.read_text(encoding="utf-8"))
        prefix = "remapped_rows_" if path.name.startswith("remapped") else kinds[result.kind]
        assert path.name.startswith(prefix), (path.name, result.kind)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("   \n\n", "empty output"),
        ('{"DCGM GPU Diagnostic": {"version": "3.1.0"}}', "no nvidia-smi output"),
        ("bash: nvidia-smi: command not found\n", "no nvidia-smi output"),
        ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaa)\n", "no nvidia-smi output"),
    ],
)
def test_foreign_input_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(nvidia_smi.ParseError, match=message):
        nvidia_smi.parse_nvidia_smi(text)


def test_other_tools_outputs_are_parse_errors() -> None:
    for name in ("fi_info_efa_three_endpoints.txt", "dcgmi_diag_table_4_2_3.txt"):
        with pytest.raises(nvidia_smi.ParseError):
            nvidia_smi.parse_nvidia_smi((OUTPUTS / name).read_text(encoding="utf-8"))


def test_each_parser_refuses_the_other_formats() -> None:
    with pytest.raises(nvidia_smi.ParseError, match="no nvidia-smi table"):
        nvidia_smi.parse_table(_read("query_535_a10.txt"))
    with pytest.raises(nvidia_smi.ParseError, match="no nvidia-smi -q report"):
        nvidia_smi.parse_query(_read("table_550_h100x8.txt"))
    with pytest.raises(nvidia_smi.ParseError, match="no topology matrix"):
        nvidia_smi.parse_topology(_read("query_gpu_header_a10.csv"))


def test_corrupt_table_row() -> None:
    text = _read("table_550_h100x8.txt").replace("72W /  700W", "72W    700W", 1)
    with pytest.raises(nvidia_smi.ParseError, match=r"line 10: not a GPU reading row"):
        nvidia_smi.parse_nvidia_smi(text)


def test_corrupt_topology_row() -> None:
    text = _read("topo_2gpu_phb.txt").replace("GPU1    PHB      X", "GPU1    PHB", 1)
    with pytest.raises(nvidia_smi.ParseError, match="GPU1 has 1 links for 2 devices"):
        nvidia_smi.parse_nvidia_smi(text)


def test_csv_value_count_mismatch() -> None:
    text = _read("query_gpu_header_a10.csv").replace(", P8, 24,", ", P8,", 1)
    with pytest.raises(nvidia_smi.ParseError, match="line 3: 7 values for 8 queried fields"):
        nvidia_smi.parse_nvidia_smi(text)


def test_truncated_samples_never_crash() -> None:
    """Any prefix of a real output parses or raises ParseError / a failure, nothing else."""
    for path in sorted(SAMPLES.glob("*")):
        if path.name == "SOURCES.md":
            continue
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for cut in range(0, len(lines), max(1, len(lines) // 12)):
            with contextlib.suppress(nvidia_smi.ParseError, nvidia_smi.NvidiaSmiFailureError):
                nvidia_smi.parse_nvidia_smi("".join(lines[:cut]))
