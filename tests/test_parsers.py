"""The output parsers, run on real captured outputs (tests/fixtures/outputs/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.parsers import dcgmi, fi_info, nccl_tests, nvidia_smi

OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"


def _read(name: str) -> str:
    return (OUTPUTS / name).read_text(encoding="utf-8")


# --- nccl-tests -------------------------------------------------------------------------------


def test_all_reduce_h100_rows_devices_and_footer() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_all_reduce_h100_16rank.txt"))
    assert len(result.devices) == 16
    first = result.devices[0]
    assert (first.rank, first.pid, first.host, first.device) == (0, 6899, "ztan-mig-235z", 0)
    assert first.bus_id == "0000:04:00"
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert result.devices[15].host == "ztan-mig-gq73"
    assert len(result.rows) == 8
    last = result.rows[-1]
    assert (last.size_bytes, last.count, last.dtype, last.redop, last.root) == (
        8589934592,
        2147483648,
        "float",
        "sum",
        -1,
    )
    assert last.out_of_place.time_us == 47535
    assert last.out_of_place.algbw_gbps == 180.71
    assert last.in_place.busbw_gbps == 337.35
    assert nccl_tests.busbw_at(result, 8589934592) == 338.82
    assert nccl_tests.busbw_at(result, 1073741824, in_place=True) == 298.82
    assert result.avg_busbw_gbps == 70.742
    assert result.out_of_bounds == 0
    assert result.out_of_bounds_ok is True
    assert result.wrong_total == 0
    assert result.passed


def test_srun_label_prefix_is_tolerated() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_all_reduce_p5_srun_prefix.txt"))
    assert [row.size_bytes for row in result.rows][-1] == 17179869184
    assert nccl_tests.busbw_at(result, 17179869184) == 487.09
    assert nccl_tests.busbw_at(result, 134217728, in_place=True) == 287.01
    assert result.avg_busbw_gbps is None


def test_in_place_wrong_na_is_none_not_zero() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_alltoall_inplace_na.txt"))
    (row,) = result.rows
    assert row.redop == "none"
    assert row.out_of_place.wrong == 0
    assert row.in_place.wrong is None
    assert row.in_place.algbw_gbps == 43046.10
    assert result.devices[0].host == "GENOA-01"
    assert result.devices[0].bus_id == "0x01"
    assert result.passed


def test_out_of_bounds_failed_legacy_layout() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_all_gather_oob_failed_legacy.txt"))
    (row,) = result.rows
    assert (row.size_bytes, row.redop, row.root) == (4294967296, None, None)
    assert row.out_of_place.busbw_gbps == 129.05
    assert row.out_of_place.wrong == 1.0
    assert result.out_of_bounds == 2
    assert result.out_of_bounds_ok is False
    assert result.avg_busbw_gbps == 128.942
    assert not result.passed


def test_version_line_and_collective() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_tests_version_header_gh200.txt"))
    assert result.version == "2.17.8"
    assert result.collective == "all_reduce_perf"
    assert result.devices[4].host == "gpu-1-7"
    assert result.devices[4].name == "NVIDIA GH200 120GB"
    assert result.rows == ()
    assert not result.passed


def test_busbw_at_unknown_size_names_the_sizes() -> None:
    result = nccl_tests.parse_nccl_tests(_read("nccl_all_reduce_p5_srun_prefix.txt"))
    with pytest.raises(nccl_tests.ParseError, match="no row for size 3 bytes"):
        nccl_tests.busbw_at(result, 3)


def test_nccl_tests_rejects_other_text() -> None:
    with pytest.raises(nccl_tests.ParseError, match="no nccl-tests output"):
        nccl_tests.parse_nccl_tests(_read("nvidia_smi_no_devices.txt"))


# --- NCCL_DEBUG=INFO ---------------------------------------------------------------------------


def test_debug_log_libfabric_with_gdrdma() -> None:
    path = nccl_tests.parse_nccl_debug(_read("nccl_debug_efa_libfabric_gdrdma.log"))
    assert path.nccl_version == "2.27.3+cuda12.9"
    assert path.ofi_plugin_loaded
    assert path.ofi_plugin_version == "1.16.2"
    assert path.network == "Libfabric"
    assert (path.provider, path.fabric, path.nic_count) == ("efa", "efa", 1)
    assert path.gpudirect_rdma is True
    assert path.net_transports == ("Libfabric",)
    assert not path.socket_fallback


def test_debug_log_selected_provider_capitalised() -> None:
    path = nccl_tests.parse_nccl_debug(_read("nccl_debug_h200_efa_16nics.log"))
    assert path.provider == "efa"
    assert path.nic_count == 16
    assert path.network == "Libfabric"
    assert path.ofi_plugin_loaded
    assert path.gpudirect_rdma is None
    assert not path.socket_fallback


def test_debug_log_aws_libfabric_without_gdrdma_and_mpirun_prefix() -> None:
    path = nccl_tests.parse_nccl_debug(_read("nccl_debug_aws_libfabric_mpirun_prefix.log"))
    assert path.ofi_plugin_loaded
    assert path.net_transports == ("AWS Libfabric",)
    assert path.gpudirect_rdma is False
    assert path.provider is None
    assert not path.socket_fallback


def test_debug_log_socket_fallback() -> None:
    path = nccl_tests.parse_nccl_debug(_read("nccl_debug_socket_fallback.log"))
    assert path.nccl_version == "2.20.5+cuda12.4"
    assert path.network == "Socket"
    assert path.socket_fallback
    assert not path.ofi_plugin_loaded
    assert path.provider is None


def test_debug_log_rejects_non_nccl_text() -> None:
    with pytest.raises(nccl_tests.ParseError, match="not an NCCL log"):
        nccl_tests.parse_nccl_debug(_read("fi_info_efa_three_endpoints.txt"))


# --- nvidia-smi -------------------------------------------------------------------------------

I3_FIELDS = (
    "memory.total",
    "memory.free",
    "memory.used",
    "temperature.gpu",
    "fan.speed",
    "utilization.gpu",
    "utilization.memory",
)


def test_query_gpu_na_and_not_supported() -> None:
    (new,) = nvidia_smi.parse_query_gpu(_read("nvidia_smi_query_na.csv"), I3_FIELDS)
    (old,) = nvidia_smi.parse_query_gpu(_read("nvidia_smi_query_not_supported.csv"), I3_FIELDS)
    assert new.value("memory.total") == 2004
    assert new.value("temperature.gpu") == 44
    assert new.field("fan.speed").status == "not_available"
    assert old.field("fan.speed").status == "not_supported"
    assert old.value("fan.speed") is None


def test_query_gpu_with_units() -> None:
    fields = (
        "gpu_name",
        "utilization.gpu",
        "utilization.memory",
        "temperature.gpu",
        "power.draw",
        "power.limit",
        "fan.speed",
        "pstate",
        "clocks.current.graphics",
        "clocks.current.memory",
        "power.max_limit",
        "power.default_limit",
    )
    (gpu,) = nvidia_smi.parse_query_gpu(_read("nvidia_smi_query_units_not_supported.csv"), fields)
    assert gpu.value("gpu_name") == "GeForce GTX 770"
    assert gpu.value("fan.speed") == 52
    assert gpu.value("pstate") == "P0"
    assert gpu.field("power.draw").status == "not_supported"


def test_query_gpu_suite_fields_inline() -> None:
    # Inline, not captured: no real line for the suite's own field list was found.
    line = "0, NVIDIA H100 80GB HBM3, 81559, 550.90.07, Enabled, No, 0x0000000000000004, 0x233010DE"
    (gpu,) = nvidia_smi.parse_query_gpu(line)
    assert gpu.value("ecc.mode.current") is True
    assert gpu.value("retired_pages.pending") is False
    assert gpu.value("clocks_throttle_reasons.active") == 4
    assert gpu.value("pci.device_id") == 0x233010DE


def test_no_devices_and_driver_failure_are_distinct() -> None:
    with pytest.raises(nvidia_smi.NoDevicesFoundError):
        nvidia_smi.parse_query_gpu(_read("nvidia_smi_no_devices.txt"))
    with pytest.raises(nvidia_smi.DriverUnreachableError):
        nvidia_smi.parse_query_gpu(_read("nvidia_smi_driver_failed.txt"))


def test_query_gpu_field_count_mismatch() -> None:
    with pytest.raises(nvidia_smi.ParseError, match="7 values for 8 queried fields"):
        nvidia_smi.parse_query_gpu(_read("nvidia_smi_query_na.csv"))


# --- fi_info ----------------------------------------------------------------------------------


def test_fi_info_three_endpoints_one_device() -> None:
    result = fi_info.parse_fi_info(_read("fi_info_efa_three_endpoints.txt"))
    assert len(result.entries) == 3
    assert result.entries[0].fabric == "EFA-fe80::39:beff:fe6e:c23"
    assert result.entries[0].version == "2.0"
    assert result.entries[2].provider == "efa;ofi_rxd"
    assert result.entries[2].protocol == "FI_PROTO_RXD"
    assert result.domains() == ("efa_0-rdm", "efa_0-dgrm")
    assert result.devices() == ("efa_0",)


def test_fi_info_rdm_four_devices() -> None:
    result = fi_info.parse_fi_info(_read("fi_info_efa_rdm_p4d_4nics.txt"))
    assert result.devices() == ("rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27")
    assert {e.type for e in result.entries} == {"FI_EP_RDM"}
    assert result.entries[0].domain == "rdmap16s27-rdm"
    assert result.entries[0].version == "111.20"


@pytest.mark.parametrize("name", ["fi_info_getinfo_61.txt", "fi_info_getinfo_61_short.txt"])
def test_fi_info_no_data(name: str) -> None:
    with pytest.raises(fi_info.NoFabricDataError) as caught:
        fi_info.parse_fi_info(_read(name))
    assert caught.value.code == -61


def test_fi_info_rejects_other_text() -> None:
    with pytest.raises(fi_info.ParseError, match="not a 'key: value' line"):
        fi_info.parse_fi_info(_read("nvidia_smi_driver_failed.txt"))


# --- dcgmi diag -------------------------------------------------------------------------------


def test_dcgmi_json_v3() -> None:
    diag = dcgmi.parse_dcgmi_json(_read("dcgmi_diag_v3_1_0_pass.json"))
    assert diag.version == "3.1.0"
    assert [t.name for t in diag.tests] == ["Denylist", "NVML Library", "Inforom", "software"]
    assert diag.test("Denylist").results[0].gpu_ids == tuple(range(8))
    software = diag.test("software")
    assert software.category == "Custom"
    assert [r.gpu_ids for r in software.results] == [(0,), (1,), (7,)]
    assert software.status == "Pass"
    assert diag.passed


def test_dcgmi_json_fail_inline() -> None:
    # Inline, not captured: shape of the 3.x schema with a Fail (see SOURCES.md).
    text = (
        '{"DCGM GPU Diagnostic": {"version": "3.3.5", "test_categories": [{"category": '
        '"Integration", "tests": [{"name": "PCIe", "results": [{"gpu_ids": 0, "status": '
        '"FAIL", "warnings": ["GPU 0 bandwidth too low"]}, {"gpu_ids": 1, "status": "PASS"}]}]}]}}'
    )
    diag = dcgmi.parse_dcgmi_json(text)
    assert diag.failed_tests == ("PCIe",)
    assert diag.test("PCIe").results[0].messages == ("GPU 0 bandwidth too low",)
    assert not diag.passed


def test_dcgmi_table_4x_per_gpu() -> None:
    diag = dcgmi.parse_dcgmi_table(_read("dcgmi_diag_table_4_2_3.txt"))
    assert diag.version == "4.2.3"
    (software,) = diag.tests
    assert software.category == "Deployment"
    assert [r.gpu_ids for r in software.results] == [(0,), (1,), (2,), (3,)]
    assert diag.passed


def test_dcgmi_table_3x() -> None:
    diag = dcgmi.parse_dcgmi_table(_read("dcgmi_diag_table_3_0_4.txt"))
    assert diag.version is None
    assert len(diag.tests) == 9
    assert diag.test("Page Retirement/Row Remap").status == "Pass"
    assert diag.passed


def test_dcgmi_rejects_other_json_and_text() -> None:
    with pytest.raises(dcgmi.ParseError, match="top-level keys: foo"):
        dcgmi.parse_dcgmi_json('{"foo": 1}')
    with pytest.raises(dcgmi.ParseError, match="no JSON object"):
        dcgmi.parse_dcgmi_json(_read("fi_info_getinfo_61.txt"))
    with pytest.raises(dcgmi.ParseError, match="unknown status"):
        dcgmi.parse_dcgmi_json(
            '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "x", "tests": '
            '[{"name": "t", "results": [{"gpu_ids": 0, "status": "Maybe"}]}]}]}}'
        )
    with pytest.raises(dcgmi.ParseError, match="not dcgmi diag table"):
        dcgmi.parse_dcgmi_table(_read("nvidia_smi_no_devices.txt"))
