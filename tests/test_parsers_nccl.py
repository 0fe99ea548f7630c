"""nccl-tests tables and NCCL_DEBUG logs, on real outputs (tests/fixtures/outputs/nccl/SOURCES.md).

Inline texts are marked as constructed where no real sample of the layout was found; they follow
the printf formats of NVIDIA/nccl-tests `src/util.cu` and NVIDIA/nccl `src/debug.cc`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nodeforge.acceptance import nccl_path_problems
from nodeforge.parsers import nccl_tests
from nodeforge.parsers.nccl_tests import busbw_at, parse_nccl_debug, parse_nccl_tests

NCCL = Path(__file__).parent / "fixtures" / "outputs" / "nccl"
OUTPUTS = NCCL.parent


def _read(name: str) -> str:
    return (NCCL / name).read_text(encoding="utf-8")


# --- nccl-tests tables ---------------------------------------------------------------------------


def test_openmpi_tagged_output_with_interleaved_nccl_info() -> None:
    result = parse_nccl_tests(_read("all_reduce_eks_efa_openmpi_tag_output.txt"))
    assert len(result.rows) == 31
    assert (result.rows[0].size_bytes, result.rows[0].count) == (0, 0)
    assert busbw_at(result, 1073741824) == 3.11
    assert busbw_at(result, 1073741824, in_place=True) == 3.12
    assert [d.host for d in result.devices] == ["test-nccl-efa-worker-0", "test-nccl-efa-worker-1"]
    assert result.devices[1].bus_id == "0xf5"
    assert result.config is not None
    assert (result.config.n_gpus, result.config.iters, result.config.agg_iters) == (1, 100, 1)
    assert result.config.max_bytes == 1073741824
    assert result.nccl_version == "2.12.7+cuda11.4"
    assert result.avg_busbw_gbps == 1.15327
    assert result.passed


def test_openmpi_tagged_output_is_also_a_debug_log() -> None:
    path = parse_nccl_debug(_read("all_reduce_eks_efa_openmpi_tag_output.txt"))
    assert path.ofi_plugin_loaded
    assert path.ofi_plugin_version == "1.5.0aws"
    assert path.network == "AWS Libfabric"
    assert (path.provider, path.nic_count) == ("efa", 1)
    assert path.net_transports == ("AWS Libfabric",)
    assert path.gpudirect_rdma is False
    assert (path.channels, path.coll_channels, path.p2p_channels) == (2, 2, 2)
    assert path.rings_connected and path.trees_connected
    assert path.hosts == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")
    assert not path.socket_fallback


def test_wide_header_with_trailing_blanks_and_16g_rows() -> None:
    result = parse_nccl_tests(_read("all_reduce_p5_openmpi_tag_output_wide_header.txt"))
    assert len(result.rows) == 32
    assert busbw_at(result, 17179869184) == 483.05
    assert result.rows[-1].in_place.time_us == 62200
    assert result.passed


def test_four_digit_ranks_gb200() -> None:
    result = parse_nccl_tests(_read("all_reduce_gb200_nvl72_1440_ranks.txt"))
    (device,) = result.devices
    assert (device.rank, device.host, device.device) == (1439, "slurm-gb200-218-073", 3)
    assert device.name == "NVIDIA GB200"
    assert busbw_at(result, 17179869184) == 405.74
    assert result.avg_busbw_gbps == 297.808


def test_all_gather_single_gpu_overflowing_algbw_column() -> None:
    result = parse_nccl_tests(_read("all_gather_2_13_single_gpu_wide_algbw.txt"))
    (row,) = result.rows
    assert (row.redop, row.root) == ("none", -1)
    assert row.in_place.algbw_gbps == 619657.10
    assert result.devices[0].host == "nixos-desktop"
    assert result.avg_busbw_gbps is None
    assert result.passed


@pytest.mark.parametrize(
    ("name", "redop", "root", "avg"),
    [
        ("legacy_all_gather_no_check_a100.txt", None, None, 58.2651),
        ("legacy_alltoall_blank_redop_a100.txt", None, None, 58.6481),
        ("legacy_broadcast_root_a100.txt", None, 0, 64.8653),
        ("legacy_reduce_redop_root_a100.txt", "sum", 0, 65.018),
    ],
)
def test_legacy_per_collective_columns(
    name: str, redop: str | None, root: int | None, avg: float
) -> None:
    result = parse_nccl_tests(_read(name))
    assert len(result.rows) == 34
    assert {(r.redop, r.root) for r in result.rows} == {(redop, root)}
    last = result.rows[-1]
    assert last.size_bytes == 8589934592
    assert last.out_of_place.wrong is None
    assert last.out_of_place.legacy_error
    assert len(result.devices) == 8
    assert result.devices[0].group is None
    assert result.devices[0].pid is not None
    assert result.avg_busbw_gbps == avg
    assert result.passed


def test_legacy_error_column_small_values_are_not_wrong_counts() -> None:
    result = parse_nccl_tests(_read("legacy_all_reduce_error_column_sharp.txt"))
    assert len(result.rows) == 6
    first = result.rows[0]
    assert (first.redop, first.root) == ("sum", None)
    assert first.out_of_place.wrong == 1e-06
    assert first.out_of_place.legacy_error
    assert result.wrong_total == 0
    # no `Out of bounds values` footer: the excerpt stops before nccl-tests' own verdict
    assert result.out_of_bounds_ok is None
    assert not result.passed


def test_legacy_pid_device_lines_and_zero_error_cells() -> None:
    result = parse_nccl_tests(_read("legacy_all_reduce_pid_devices_small_errors.txt"))
    first = result.devices[0]
    assert (first.rank, first.pid, first.group) == (0, 71327, None)
    assert result.devices[3].bus_id == "0x1e"
    assert result.rows[0].out_of_place.wrong == 1e-07
    assert result.rows[0].in_place.wrong == 0
    assert all(r.in_place.legacy_error for r in result.rows)


def test_legacy_broadcast_with_warnings_between_header_and_table() -> None:
    text = _read("legacy_broadcast_root_no_check_ibverbs_warn.txt")
    result = parse_nccl_tests(text)
    (row,) = result.rows
    assert (row.redop, row.root, row.out_of_place.wrong) == (None, 0, None)
    assert result.nccl_version == "2.9.6+cuda11.2"
    assert result.config is not None and result.config.validation == 0
    path = parse_nccl_debug(text)
    assert [w.category for w in path.warnings] == ["ib_verbs", "ib_verbs"]
    assert path.warnings[0].source == "misc/ibvwrap.cc:63"
    assert path.warnings[1].host == "v100-gpu-5"


def test_existing_legacy_failed_fixture_counts_deltas_not_as_wrong() -> None:
    result = parse_nccl_tests((OUTPUTS / "nccl_all_gather_oob_failed_legacy.txt").read_text())
    assert result.rows[0].out_of_place.legacy_error
    assert result.wrong_total == 0
    assert result.out_of_bounds == 2
    assert not result.passed


def test_test_nccl_failure_lines_of_several_hosts() -> None:
    result = parse_nccl_tests(_read("all_reduce_test_nccl_failure_multi_host.txt"))
    assert len(result.rows) == 5
    assert len(result.failures) == 8
    assert result.failures[0].startswith("Test NCCL failure common.cu:1204 'unhandled cuda error")
    assert not result.passed
    path = parse_nccl_debug(
        "NCCL version 2.21.5\n" + _read("all_reduce_test_nccl_failure_multi_host.txt")
    )
    assert {w.kind for w in path.warnings} == {"test_failure"}
    assert {w.category for w in path.warnings} == {"cuda"}
    assert path.warnings[0].source == "common.cu:1204"


def test_markdown_stripped_hashes_and_unindented_rows() -> None:
    result = parse_nccl_tests(_read("all_reduce_failure_unindented_rows.txt"))
    assert [r.size_bytes for r in result.rows] == [8, 16, 32]
    assert result.rows[0].in_place.time_us == 190.2
    assert [d.rank for d in result.devices] == [0, 1, 2]
    assert result.failures[0] == "Test NCCL failure common.cu:1005 'unhandled CUDA error'"
    assert not result.passed

    stripped = parse_nccl_tests(_read("all_reduce_markdown_stripped_cuda_warn.txt"))
    assert [d.name for d in stripped.devices] == ["NVIDIA GeForce RTX 4090"] * 2
    assert stripped.config is not None and stripped.config.n_gpus == 2
    assert stripped.rows == ()


def test_cuda_failure_warnings_and_plugin_not_found() -> None:
    path = parse_nccl_debug(_read("all_reduce_markdown_stripped_cuda_warn.txt"))
    assert path.nccl_version == "2.21.5+cuda11.8"
    assert path.net_plugin_missing
    assert not path.ofi_plugin_loaded
    assert path.warning_categories == ("cuda",)
    assert path.warnings[0].message == "Cuda failure 'named symbol not found'"
    assert (path.warnings[0].source, path.warnings[0].device) == ("enqueue.cc:47", 1)


def test_v1_header_and_nccl_failure() -> None:
    result = parse_nccl_tests(_read("v1_all_reduce_nccl_failure.txt"))
    assert len(result.devices) == 8
    assert (result.devices[0].pid, result.devices[0].group) == (None, None)
    assert result.failures == ("NCCL failure all_reduce.cu:95 'unhandled cuda error'",)
    assert not result.passed


def test_non_mpi_build_prints_rank_zero_twice() -> None:
    result = parse_nccl_tests(_read("legacy_non_mpi_build_duplicate_rank0.txt"))
    assert [(d.rank, d.host) for d in result.devices] == [
        (0, "ip-172-31-20-228"),
        (0, "ip-172-31-22-230"),
    ]
    assert result.rows == ()


def test_version_line_gives_nccl_library_version() -> None:
    result = parse_nccl_tests((OUTPUTS / "nccl_tests_version_header_gh200.txt").read_text())
    assert result.version == "2.17.8"
    assert result.nccl_version == "2.26.6"
    assert result.collective == "all_reduce_perf"


# Constructed: the printf formats of nccl-tests 2.19 `src/util.cu` (-I 1 per-iteration columns,
# -S 1 timestamps); no real output of these options was found.
PER_ITERATION = """\
# nccl-tests version 2.19.6 nccl-headers=22903 nccl-library=22903
# Collective test starting: all_reduce_perf
#                                                                 out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)   %Y-%m-%d %H:%M:%S
  1073741824     268435456     float     sum      -1  4607.60  233.04  436.95       0  4580.10  4660.90  4655.20     0.41  4565.60  235.18  440.96       0  4550.30  4601.70  4599.00     0.28  2026-07-01 10:00:00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 438.955 OK
"""  # noqa: E501

CPUTIME_FAILED_FOOTERS = """\
#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong           timestamp
     8388608       2097152     float     sum      -1   762.80   11.00   20.62       0   760.70   11.03   20.68       0  2025-11-03 09:15:42
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 20.65 FAILED
# Bitwise mismatches   : 3 FAILED
# GPU memory usage     : Initialization 512 MB | User-Allocated 48.00 MB | Collective 0 B | Total  560 MB
#
# Collective test concluded: all_reduce_perf
# error: NET/IB : Got completion from peer 10.0.0.2<52132> with status=12
"""  # noqa: E501


def test_per_iteration_columns_and_timestamp_constructed() -> None:
    result = parse_nccl_tests(PER_ITERATION)
    (row,) = result.rows
    assert row.collective == "all_reduce_perf"
    assert row.timestamp == "2026-07-01 10:00:00"
    assert row.out_of_place.busbw_gbps == 436.95
    assert row.out_of_place.per_iteration == nccl_tests.NcclIterStats(
        min_us=4580.10, max_us=4660.90, p99_us=4655.20, cv_pct=0.41
    )
    assert row.in_place.busbw_gbps == 440.96
    assert row.in_place.per_iteration is not None
    assert row.in_place.per_iteration.cv_pct == 0.28
    assert result.nccl_version == "2.29.3"
    assert result.avg_busbw_ok is True
    assert result.passed


def test_cputime_min_bw_failure_and_bitwise_footer_constructed() -> None:
    result = parse_nccl_tests(CPUTIME_FAILED_FOOTERS)
    (row,) = result.rows
    assert row.cpu_time
    assert row.timestamp == "2025-11-03 09:15:42"
    assert row.in_place.time_us == 760.70
    assert result.out_of_bounds_ok is True
    assert result.avg_busbw_ok is False
    assert result.bitwise_mismatches == 3
    assert result.last_error is not None and result.last_error.startswith("NET/IB : Got")
    assert not result.passed


# Constructed: nccl-tests prints a row's first columns without a newline, then NCCL (writing to
# the same stdout) may log while the collective runs; the row goes on after the log lines.
GLUED = """\
8h200-2:6831:6831 [0] NCCL INFO Launch mode Parallel
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -18h200-2:6831:6840 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via P2P/IPC
8h200-2:6831:6840 [0] NCCL INFO Connected all rings
    35.79    0.00    0.00      0    29.56    0.00    0.00      0
          16             4     float     sum      -1    19.36    0.00    0.00      0

[2025-05-01 10:00:00] 8h200-2:6831:6841 [1] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer 8h200-3<40310>
    19.07    0.00    0.00      0
          32             8     float     sum      -1    19.16    0.00    0.00      0    18.98    0.00    0.00      0
"""  # noqa: E501


def test_rows_split_by_glued_nccl_log_lines_constructed() -> None:
    result = parse_nccl_tests(GLUED)
    assert [r.size_bytes for r in result.rows] == [8, 16, 32]
    assert result.rows[0].root == -1
    assert result.rows[0].in_place.time_us == 29.56
    assert result.rows[1].in_place.time_us == 19.07
    path = parse_nccl_debug(GLUED)
    assert path.transports == ("P2P/IPC",)
    assert path.hosts == ("8h200-2",)
    (warning,) = path.warnings
    assert (warning.category, warning.timestamp) == ("remote_error", "2025-05-01 10:00:00")
    assert (warning.host, warning.pid, warning.device) == ("8h200-2", 6831, 1)


@pytest.mark.parametrize(
    "prefix",
    ["0: ", " 12: ", "[1,0]<stdout>:", "[1,0]<stderr>: ", "node-1: ", "[0] ", "[default0]:"],
)
def test_launcher_prefixes(prefix: str) -> None:
    lines = _read("all_reduce_gb200_nvl72_1440_ranks.txt").splitlines()
    result = parse_nccl_tests("\n".join(prefix + line for line in lines))
    assert len(result.rows) == 6
    assert result.devices[0].rank == 1439
    assert result.passed


def test_kubectl_timestamps_before_srun_labels() -> None:
    lines = _read("all_reduce_gb200_nvl72_1440_ranks.txt").splitlines()
    text = "\n".join(
        f"2025-02-20T10:00:0{i % 10}.123456789Z 0: {line}" for i, line in enumerate(lines)
    )
    assert busbw_at(parse_nccl_tests(text), 8589934592) == 381.48


def test_hypercube_blank_redop_and_nan_constructed() -> None:
    # hypercube.cu passes "" as the op name, so the redop column is blank (nccl-tests util.cu);
    # a failing hypercube run prints -nan bandwidths (nccl-tests 2.18.3)
    text = (
        "         128            32     float              -1    23.51    -nan    -nan     16"
        "    23.10    0.01    0.01     16\n"
        "# Out of bounds values : 16 FAILED\n"
        "# Avg bus bandwidth    : -nan \n"
    )
    result = parse_nccl_tests(text)
    (row,) = result.rows
    assert (row.redop, row.root, row.in_place.time_us) == (None, -1, 23.10)
    assert math.isnan(row.out_of_place.busbw_gbps)
    assert result.avg_busbw_gbps is not None and math.isnan(result.avg_busbw_gbps)
    assert result.wrong_total == 32
    assert not result.passed


def test_several_collectives_in_one_output() -> None:
    gather = "# Collective test starting: all_gather_perf\n" + _read(
        "all_gather_2_13_single_gpu_wide_algbw.txt"
    )
    result = parse_nccl_tests(gather + PER_ITERATION + CPUTIME_FAILED_FOOTERS)
    assert result.collectives == ("all_gather_perf", "all_reduce_perf")
    assert result.collective == "all_gather_perf"
    assert busbw_at(result, 1073741824, collective="all_reduce_perf") == 436.95
    with pytest.raises(nccl_tests.ParseError, match="sizes measured: 33554432"):
        busbw_at(result, 1073741824, collective="all_gather_perf")
    assert (result.out_of_bounds, result.out_of_bounds_ok) == (0, True)
    assert result.avg_busbw_gbps == 438.955
    assert result.avg_busbw_ok is False
    assert not result.passed


def test_wrong_counts_in_e_notation_fail() -> None:
    # `%6g` prints counts from 1e6 on as 1.04858e+06 (nccl-tests >= 2.13); constructed row
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "     2097152        524288     float     sum      -1    311.5    6.73    6.73"
        "  1.04858e+06    311.3    6.74    6.74  1.04858e+06\n"
        "# Out of bounds values : 108 FAILED\n"
    )
    result = parse_nccl_tests(text)
    assert result.rows[0].out_of_place.wrong == 1048580
    assert not result.rows[0].out_of_place.legacy_error
    assert result.wrong_total == 2 * 1048580
    assert (result.out_of_bounds, result.out_of_bounds_ok) == (108, False)
    assert not result.passed


@pytest.mark.parametrize(
    "name",
    [
        "debug_ib_completion_status12.log",
        "debug_pdsh_host_prefix.log",
        "debug_rank_bracket_prefix.log",
    ],
)
def test_nccl_tests_rejects_logs_without_a_table(name: str) -> None:
    with pytest.raises(nccl_tests.ParseError, match="no nccl-tests output found"):
        parse_nccl_tests(_read(name))


@pytest.mark.parametrize("text", ["", "garbage\n\x00\x01 binary ]]]\n", "{'json': 1}"])
def test_nccl_tests_rejects_garbage(text: str) -> None:
    with pytest.raises(nccl_tests.ParseError, match="no nccl-tests output found"):
        parse_nccl_tests(text)


# --- NCCL_DEBUG logs -----------------------------------------------------------------------------


def test_ofi_plugin_refused_then_socket_fallback() -> None:
    path = parse_nccl_debug(_read("debug_ofi_refused_socket_fallback_2_27.log"))
    assert path.nccl_version == "2.27.3+cuda12.9"
    assert path.net_plugin == "Libfabric"
    assert path.ofi_plugin_version == "1.16.2"
    assert path.ofi_plugin_refused
    assert not path.ofi_plugin_loaded
    assert path.provider is None
    assert path.network == "Socket"
    assert path.socket_fallback
    assert path.net_transports == ("Socket",)
    assert path.gpudirect_rdma is False
    assert [w.category for w in path.warnings] == ["ofi_init"] * 3
    first = path.warnings[0]
    assert first.timestamp == "2025-12-28 16:04:25"
    assert first.source == "int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):259"
    assert (
        first.message == "NET/OFI Unable to find a protocol that worked.  Failing initialization."
    )


def test_refused_plugin_fails_acceptance() -> None:
    path = parse_nccl_debug(_read("debug_ofi_refused_socket_fallback_2_27.log"))
    problems = nccl_path_problems(path, expect_efa=True, require_gdr=True)
    assert "the aws-ofi-nccl plugin was not loaded (no NET/OFI lines)" in problems
    assert problems[0].startswith("NCCL fell back to TCP sockets")


def test_old_ofi_plugin_provider_without_nic_count() -> None:
    path = parse_nccl_debug(_read("debug_ofi_1_3_provider_without_nic_count.log"))
    assert path.ofi_plugin_loaded
    assert path.ofi_plugin_version == "1.3.0aws"
    assert (path.provider, path.nic_count, path.fabric) == ("efa", None, None)
    assert path.network == "AWS Libfabric"
    assert path.nccl_version == "2.10.3+cuda11.3"
    assert path.warnings == ()


def test_ib_with_gpudirect_on_old_ring_lines() -> None:
    path = parse_nccl_debug(_read("debug_ib_gdrdma_azure_ring.log"))
    assert path.net_transports == ("IB",)
    assert path.gpudirect_rdma is True
    assert not path.ofi_plugin_loaded
    assert not path.socket_fallback
    assert path.hosts == ("pkb-aa8dbd1b-0", "pkb-aa8dbd1b-1")


@pytest.mark.parametrize(
    ("name", "version", "network"),
    [
        ("debug_socket_2_4_no_plugin_pid_devices.log", "2.4.8+cuda10.1", None),
        ("debug_socket_2_10_trailing_spaces.log", "2.10.3+cuda11.3", "Socket"),
        ("debug_socket_wrong_pattern_warn_2_16.log", "2.16.5+cuda11.8", "Socket"),
        ("debug_socket_2_25_could_not_find_plugin.log", "2.25.1+cuda12.8", "Socket"),
    ],
)
def test_socket_fallback_across_nccl_versions(name: str, version: str, network: str | None) -> None:
    path = parse_nccl_debug(_read(name))
    assert path.nccl_version == version
    assert path.network == network
    assert path.socket_fallback
    assert path.net_plugin_missing
    assert not path.ofi_plugin_loaded


def test_topology_warning_is_categorised() -> None:
    path = parse_nccl_debug(_read("debug_socket_wrong_pattern_warn_2_16.log"))
    (warning,) = path.warnings
    assert warning.category == "topology"
    assert warning.source == "graph/search.cc:890"
    assert warning.message.startswith("Could not find a path for pattern 4")


@pytest.mark.parametrize(
    "name", ["debug_ib_completion_status12.log", "debug_ib_completion_error4_older.log"]
)
def test_ib_completion_errors(name: str) -> None:
    path = parse_nccl_debug(_read(name))
    assert len(path.warnings) == 2
    assert {w.category for w in path.warnings} == {"ib_completion"}
    assert all(w.source and w.source.startswith("transport/net_ib.cc:") for w in path.warnings)


def test_dlerror_plugin_line_means_no_plugin() -> None:
    path = parse_nccl_debug(_read("debug_dlerror_no_plugin_2_19.log"))
    assert path.net_plugin_missing
    assert path.net_plugin is None
    assert path.hosts == ("VM-0-14-tencentos",)


@pytest.mark.parametrize(
    ("name", "hosts"),
    [
        ("debug_pdsh_host_prefix.log", ("MLVM2", "MLVM")),
        ("debug_rank_bracket_prefix.log", ("node0", "node2")),
    ],
)
def test_debug_log_launcher_prefixes(name: str, hosts: tuple[str, ...]) -> None:
    path = parse_nccl_debug(_read(name))
    assert path.hosts == hosts
    assert path.net_plugin_missing


def test_existing_fixtures_keep_their_paths() -> None:
    gdr = parse_nccl_debug((OUTPUTS / "nccl_debug_efa_libfabric_gdrdma.log").read_text())
    assert (gdr.net_plugin, gdr.ofi_plugin_refused, gdr.rings_connected) == (
        "Libfabric",
        False,
        True,
    )
    old = parse_nccl_debug((OUTPUTS / "nccl_debug_aws_libfabric_mpirun_prefix.log").read_text())
    assert old.transports == ("P2P/IPC", "NET/AWS Libfabric")
    assert old.warning_categories == ("ofi",)


@pytest.mark.parametrize(
    ("message", "category"),
    [
        # WARN texts as NCCL and aws-ofi-nccl print them (their sources, issue titles, fixtures)
        ("Cuda failure 'out of memory'", "cuda"),
        ("NET/OFI Request 0x7f2c completed with error. RC: 21. Error: unknown", "ofi_completion"),
        ("NET/OFI No eligible providers were found", "ofi_init"),
        ("NET/OFI OFI fi_getinfo() call failed: No data available", "ofi_init"),
        ("NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument", "ofi"),
        ("Error: network AWS Libfabric not found.", "ofi"),
        ("NET/IB : Got completion from peer 10.0.0.2<1> with error 12, opcode 0", "ib_completion"),
        ("Call to ibv_create_qp failed with error Cannot allocate memory", "ib_verbs"),
        ("socketPollConnect: connect returned Connection timed out, exceeded", "timeout"),
        ("socketProgress: Connection closed by remote peer node2<42830>", "remote_error"),
        ("remote process exited or there was a network error", "remote_error"),
        ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "system_error"),
        ("Failed to CUDA calloc 2097152 bytes", "memory"),
        ("socketFinalizeAccept: wrong type 4 != 3", "socket"),
        ("Message truncated : received 172 bytes instead of 64", "bootstrap"),
        ("Mismatched NCCL version detected : rank 1 version 22703", "version_mismatch"),
        ("nvmlDeviceGetHandleByPciBusId() failed: Not Found", "topology"),
        ("Attempt to use communicator before the previous operation returned ncclSuccess", "other"),
    ],
)
def test_warning_categories(message: str, category: str) -> None:
    line = f"h1:1:2 [0] misc/x.cc:1 NCCL WARN {message}"
    (warning,) = parse_nccl_debug(line).warnings
    assert warning.category == category
    assert warning.message == message


def test_newest_warn_format_with_function_name_constructed() -> None:
    # NCCL 2.30 debug.cc: "[%d] %s:%d (%s) NCCL WARN %s" after the default "[%F %T] " stamp
    line = (
        "[2026-05-28 09:00:00] gpu-a:101:202 [3] transport/net_ib/p2p.cc:688 (ncclIbTest)"
        " NCCL WARN NET/IB: Got completion from peer 10.1.1.2<5000> with status=12"
    )
    (warning,) = parse_nccl_debug(line).warnings
    assert warning.source == "transport/net_ib/p2p.cc:688 (ncclIbTest)"
    assert (warning.host, warning.pid, warning.device) == ("gpu-a", 101, 3)
    assert warning.category == "ib_completion"


@pytest.mark.parametrize(
    "name", ["legacy_all_reduce_error_column_sharp.txt", "all_reduce_gb200_nvl72_1440_ranks.txt"]
)
def test_debug_rejects_tables_without_nccl_lines(name: str) -> None:
    with pytest.raises(nccl_tests.ParseError, match="not an NCCL log"):
        parse_nccl_debug(_read(name))


@pytest.mark.parametrize("text", ["", "\x00\x01\x02", "Using network Socket"])
def test_debug_rejects_garbage(text: str) -> None:
    with pytest.raises(nccl_tests.ParseError, match="not an NCCL log"):
        parse_nccl_debug(text)
