"""The dcgmi parsers on real outputs (tests/fixtures/outputs/dcgmi/SOURCES.md), and failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.parsers import dcgmi

OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"
DCGMI = OUTPUTS / "dcgmi"


def _read(name: str) -> str:
    return (DCGMI / name).read_text(encoding="utf-8")


def _diag(name: str) -> dcgmi.DcgmDiag:
    result = dcgmi.parse_dcgmi(_read(name))
    assert isinstance(result, dcgmi.DcgmDiag)
    return result


# --- diag tables, DCGM 4.x ---------------------------------------------------------------------


def test_4x_pcie_fail_with_global_warnings_and_passing_gpus() -> None:
    diag = _diag("diag_4_2_3_pcie_fail_global_warnings.txt")
    assert (diag.version, diag.driver_version) == ("4.2.3", "570.148.08")
    assert diag.device_ids == ("26b9",) * 4
    assert [(t.category, t.name) for t in diag.tests] == [
        ("Deployment", "software"),
        ("Hardware", "memory"),
        ("Integration", "pcie"),
    ]
    pcie = diag.test("pcie")
    # the row says Fail although every GPU line says Pass: the overall result must win
    assert (pcie.summary, pcie.status) == ("Fail", "Fail")
    assert [(r.gpu_ids, r.status) for r in pcie.results] == [((g,), "Pass") for g in range(4)]
    assert pcie.gpu_status(2) == "Pass"
    assert len(pcie.notes) == 4
    assert {n.kind for n in pcie.notes} == {"warning"}
    assert pcie.notes[0].text == (
        "There was an internal error during the test: 'A child process (152) exited with "
        "non-zero status 1' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics."
    )
    assert pcie.notes[3].text.endswith(
        "'' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
    )
    assert diag.failed_tests == ("pcie",)
    assert (diag.verdict, diag.passed) == ("fail", False)


def test_4x_b200_eight_gpus_one_warning() -> None:
    diag = _diag("diag_4_4_1_b200_pcie_fail.txt")
    assert diag.version == "4.4.1"
    assert len(diag.device_ids) == 8
    memory = diag.test("memory")
    assert [r.gpu_ids for r in memory.results] == [(g,) for g in range(8)]
    (warning,) = diag.test("pcie").notes
    assert "'Output of child process (11167) couldn't be parsed:" in warning.text
    assert "Check DCGM and system logs" in warning.text
    assert diag.verdict == "fail"


def test_4x_single_gpu_pass() -> None:
    diag = _diag("diag_4_4_2_r2_pass.txt")
    assert diag.version == "4.4.2"
    assert [t.status for t in diag.tests] == ["Pass"] * 3
    assert all(t.gpu_status(0) == "Pass" for t in diag.tests)
    assert (diag.verdict, diag.passed, diag.failed_tests) == ("pass", True, ())


def test_4x_paste_with_trailing_blanks_and_elision() -> None:
    diag = _diag("diag_4_4_1_v100_verbose_elided.txt")
    assert (diag.version, diag.driver_version) == ("4.4.1", "580.65.06")
    assert diag.device_ids == ("1db1",) * 4
    (pcie,) = diag.tests
    assert (pcie.category, pcie.status) == ("Integration", "Fail")
    assert pcie.notes[0].text.startswith("There was an internal error during the test: 'A child")
    assert pcie.notes[0].text.endswith(
        "exited with non-zero status 1' Check DCGM and system "
        "logs for errors. Reset GPU. Restart DCGM. Rerun "
        "diagnostics."
    )


def test_4x_entity_warning_rows_attach_to_their_gpu() -> None:
    # Inline, constructed in the row format of dcgmi/Diag.cpp (HelperDisplayEntityResults)
    text = "\n".join(
        [
            "+-----  Hardware  ----------+------------------------------------------------+",
            "| memory                    | Fail                                           |",
            "|                           | GPU0: Fail                                     |",
            "| Warning: GPU0             | Unable to allocate memory for GPU 0            |",
            "| Info: GPU0                | Allocated 0 bytes                              |",
            "|                           | GPU1: Pass                                     |",
            "|                           | CPU0: Not Run                                  |",
        ]
    )
    memory = dcgmi.parse_dcgmi_table(text).test("memory")
    gpu0, gpu1, cpu0 = memory.results
    assert [(n.kind, n.gpu_id) for n in gpu0.notes] == [("warning", 0), ("info", 0)]
    assert gpu0.messages == ("Unable to allocate memory for GPU 0", "Allocated 0 bytes")
    assert (gpu1.status, gpu1.notes) == ("Pass", ())
    assert (cpu0.entity_group, cpu0.gpu_ids, cpu0.status) == ("CPU", (0,), "Not Run")
    assert memory.gpu_status(1) == "Pass"
    assert memory.gpu_status(0) == "Fail"


# --- diag tables, DCGM 2.x / 3.x -----------------------------------------------------------------


def test_3x_fail_all_with_wrapped_warning_and_skip_all() -> None:
    diag = _diag("diag_3_3_0_pcie_fail_all.txt")
    assert diag.version == "3.3.0"
    assert len([t for t in diag.tests if t.category == "Deployment"]) == 9
    pcie = diag.test("PCIe")
    assert (pcie.summary, pcie.results[0].gpu_ids) == ("Fail", ())
    (warning,) = pcie.notes
    assert warning.gpu_id == 0
    # chunks are joined as printed: "cudaDeviceGetByPCI" + "BusId", "00000" + "000:1B:00.0"
    assert "cudaDeviceGetByPCIBusId Check DCGM" in warning.text
    assert warning.text.endswith("for GPU 0, bus ID = 00000000:1B:00.0")
    assert diag.test("GPU Memory").status == "Skip"
    assert diag.verdict == "fail"


def test_3x_p4de_pass_all_and_empty_stress_section() -> None:
    diag = _diag("diag_3_3_3_p4de_r2_pass.txt")
    assert diag.version == "3.3.3"
    assert diag.test("PCIe").status == "Pass"
    assert diag.test("GPU Memory").gpu_status(5) == "Pass"
    assert not [t for t in diag.tests if t.category == "Stress"]
    assert diag.verdict == "pass"


def test_3x_split_gpu_scopes_and_thermal_warning() -> None:
    diag = _diag("diag_r2_gpu_memory_thermal_fail_excerpt.txt")
    (memory,) = diag.tests
    assert memory.summary is None
    assert [(r.gpu_ids, r.status) for r in memory.results] == [
        ((1, 2, 3, 4, 5, 6, 7), "Pass"),
        ((0,), "Fail"),
    ]
    assert (memory.gpu_status(0), memory.gpu_status(3)) == ("Fail", "Pass")
    (warning,) = memory.notes
    assert warning.gpu_id == 0
    # the paste lost the last row's right border; the text still ends where dcgmi's did
    assert warning.text.endswith("fans, and any other components.")
    assert "13.3 seconds started at 9.7 seconds" in warning.text


def test_3x_excerpt_starting_mid_message() -> None:
    diag = _diag("diag_3_3_1_gpu0_fail_info_excerpt.txt")
    assert [n.kind for n in diag.notes] == ["note", "info", "info"]
    assert [n.gpu_id for n in diag.notes[1:]] == [0, 1]
    assert diag.notes[2].text == (
        "GPU 1 GPU to Host bandwidth:  12.33 GB/s, GPU 1 Host to GPU bandwidth:  13.15 GB/s, "
        "GPU 1 bidirectional bandwidth: 22.63 GB/s"
    )
    memory = diag.test("GPU Memory")
    assert memory.category == "Hardware"
    assert memory.notes[0].text.endswith("'CUDA-capable device(s) is/are busy or unavailable'.")
    assert diag.failed_tests == ("GPU Memory",)


def test_deployment_error_row_without_its_test_row_fails() -> None:
    diag = _diag("diag_deployment_error_row_remap_excerpt.txt")
    assert diag.tests == ()
    (error,) = diag.notes
    assert (error.kind, error.gpu_id) == ("error", 3)
    assert error.text == "GPU 3 has uncorrectable memory errors and row remappings are pending"
    assert diag.verdict == "fail"


def test_2x_blacklist_and_error_rows() -> None:
    diag = _diag("diag_2_4_blacklist_persistence_fail_constructed.txt")
    assert diag.tests[0].name == "Blacklist"
    persistence = diag.test("Persistence Mode")
    (error,) = persistence.notes
    assert error.kind == "error"
    assert error.text.endswith('running "nvidia-smi -i <gpuId> -pm 1 " as root.')
    assert diag.test("GPU Memory").gpu_status(1) == "Fail"
    assert diag.test("SM Stress").status == "Skip"
    assert diag.failed_tests == ("Persistence Mode", "GPU Memory")


def test_host_prefix_and_other_table_rows() -> None:
    # Inline: lines as `srun --label`/pdsh prefix them, with a 3.x Warn scope and a Code row
    text = "\n".join(
        [
            "n1: +-----  Stress  ------------+------------------------------------------------+",
            "n1: | Diagnostic                | Warn - All                                     |",
            "n1: |                           |   Code: (000000000000)                         |",
            "n1: | Targeted Power            | Warn - GPUs: 0, 1                              |",
            "n1: |                           | Skip - GPU: 2                                  |",
        ]
    )
    diag = dcgmi.parse_dcgmi_table(text)
    assert [(t.category, t.name, t.status) for t in diag.tests] == [
        ("Stress", "Diagnostic", "Warn"),
        ("Stress", "Targeted Power", "Warn"),
    ]
    assert diag.tests[0].notes[0] == dcgmi.DcgmMessage(kind="note", text="Code: (000000000000)")
    assert diag.test("Targeted Power").gpu_status(2) == "Skip"
    assert (diag.verdict, diag.warned_tests, diag.passed) == (
        "warn",
        ("Diagnostic", "Targeted Power"),
        True,
    )


def test_existing_fixtures_keep_their_shape() -> None:
    diag = dcgmi.parse_dcgmi_table((OUTPUTS / "dcgmi_diag_table_4_2_3.txt").read_text())
    (software,) = diag.tests
    assert software.summary == "Pass"
    assert [r.gpu_ids for r in software.results] == [(0,), (1,), (2,), (3,)]


def test_only_skips_means_nothing_ran() -> None:
    text = "| SM Stress                 | Skip - All                                     |\n"
    diag = dcgmi.parse_dcgmi_table(text)
    assert (diag.verdict, diag.passed) == ("nothing ran", False)


# --- diag JSON ------------------------------------------------------------------------------


def test_json_3x_string_gpu_ids_and_info_strings() -> None:
    diag = _diag("json_r3_pass_skip_t4.json")
    assert [t.category for t in diag.tests].count("Deployment") == 9
    assert diag.test("Denylist").results[0].gpu_ids == ()
    memory = diag.test("GPU Memory")
    assert memory.results[0].gpu_ids == (0,)
    assert memory.results[0].notes[0] == dcgmi.DcgmMessage(
        kind="info", text="GPU 0 Allocated 15206918958 bytes (97.3%)", gpu_id=0
    )
    assert diag.test("EUD Test").status == "Skip"
    assert diag.test("Targeted Power").results[0].messages == ("GPU 0 GPU 0 power average:\t70 W",)
    assert diag.verdict == "pass"


def test_json_3x_level2() -> None:
    diag = dcgmi.parse_dcgmi_json(_read("json_r2_pass_t4.json"))
    assert [t.name for t in diag.tests][-2:] == ["PCIe", "GPU Memory"]
    assert diag.test("PCIe").results[0].messages[0].startswith("GPU 0 GPU 0 GPU to Host")


def test_json_33_gpu_id_and_misspelt_deployment_warnings() -> None:
    # Inline, constructed from DCGM 3.3.9 dcgmi/Diag.cpp (HelperJsonAddBasicTests/AddResult)
    text = """{"DCGM GPU Diagnostic": {"test_categories": [
      {"category": "Deployment", "tests": [{"name": "Persistence Mode", "results": [
        {"gpu_id": 3, "status": "Fail", "warnings": [{"warnings": "Persistence mode for GPU 3
 is disabled.", "error_id": 29, "error_category": 8, "error_severity": 5}]}]}]},
      {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
        {"gpu_id": "0", "status": "Pass"}, {"gpu_id": "1", "status": "Warn",
         "warnings": [{"warning": "GPU 1 slow", "error_id": 1}], "info": "GPU 1 info"}]}]}]},
      "version": "3.3.9", "Driver Version Detected": "550.54.15",
      "GPU Device IDs": ["2330", "2330"]}""".replace("\n is", " is")
    diag = dcgmi.parse_dcgmi_json(text)
    assert (diag.version, diag.driver_version, diag.device_ids) == (
        "3.3.9",
        "550.54.15",
        ("2330", "2330"),
    )
    persistence = diag.test("Persistence Mode")
    # an integer gpu_id on a deployment result names the failing GPU, not the result's scope
    assert persistence.results[0].gpu_ids == ()
    (warning,) = persistence.results[0].notes
    assert (warning.text, warning.gpu_id, warning.error_id) == (
        "Persistence mode for GPU 3 is disabled.",
        3,
        29,
    )
    memory = diag.test("GPU Memory")
    assert [n.kind for n in memory.results[1].notes] == ["warning", "info"]
    assert (memory.status, memory.gpu_status(0)) == ("Warn", "Pass")


def test_json_4x_entities_summary_and_metadata() -> None:
    diag = _diag("json_4_2_3_software_fail_constructed.json")
    assert (diag.version, diag.driver_version, diag.device_ids) == (
        "4.2.3",
        "570.148.08",
        ("2330", "2330"),
    )
    software = diag.test("software")
    assert (software.summary, software.gpu_status(0), software.gpu_status(1)) == (
        "Fail",
        "Fail",
        "Pass",
    )
    (warning,) = software.results[0].notes
    assert (warning.gpu_id, warning.error_id) == (0, 29)
    # the summary repeats GPU 0's warning; only its own info line is kept at test level
    assert [(n.kind, n.gpu_id) for n in software.notes] == [("info", 0)]
    assert [n.kind for n in software.all_notes] == ["info", "warning"]
    assert diag.test("memory").gpu_status(0) == "Skip"
    assert diag.verdict == "fail"


def test_json_4x_real_test_object_in_a_document() -> None:
    # the issue pasted one test object of a -r 4 run; put it where the 4.x writer does
    fragment = _read("json_4_x_diagnostic_test_fragment.txt").rstrip().removesuffix(",")
    text = (
        '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": ['
        + fragment
        + "]}]}}"
    )
    diagnostic = dcgmi.parse_dcgmi_json(text).test("diagnostic")
    assert [r.gpu_ids for r in diagnostic.results] == [(g,) for g in range(8)]
    assert diagnostic.results[2].messages == (
        "Allocated space for 138 output matricies from 76077622886 bytes available.",
        "Running with precisions: FP64 1, FP32 1, FP16 1",
    )
    assert diagnostic.results[1].notes[2].gpu_id == 1
    assert (diagnostic.summary, diagnostic.status) == ("Pass", "Pass")


def test_json_iterations_pick_the_failing_run() -> None:
    def run(status: str) -> str:
        result = f'{{"entity_group": "GPU", "entity_id": 0, "status": "{status}"}}'
        test = f'{{"name": "memory", "results": [{result}]}}'
        return f'{{"DCGM Diagnostic": {{"test_categories": [{{"tests": [{test}]}}]}}}}'

    text = f'{{"iterations": [{run("Pass")}, {run("Fail")}], "Overall Result": "Fail"}}'
    assert dcgmi.parse_dcgmi_json(text).verdict == "fail"
    with pytest.raises(dcgmi.DcgmiDiagnosticError, match="DCGM GPU Diagnostic returned"):
        dcgmi.parse_dcgmi_json(
            '{"iterations": [null], "Overall Result": "Fail", '
            '"warning": "DCGM GPU Diagnostic returned an error"}'
        )


def test_json_runtime_error_raises() -> None:
    with pytest.raises(dcgmi.DcgmiDiagnosticError) as caught:
        dcgmi.parse_dcgmi(_read("json_4_4_1_runtime_error_constructed.json"))
    assert caught.value.return_code == -30
    assert "Cannot load plugins" in str(caught.value)


# --- failure texts ----------------------------------------------------------------------------


def test_no_host_engine_is_a_connection_error() -> None:
    text = _read("error_connection_localhost.txt")
    with pytest.raises(dcgmi.DcgmiConnectionError, match="specified host: localhost"):
        dcgmi.parse_dcgmi(text)
    with pytest.raises(dcgmi.DcgmiConnectionError):
        dcgmi.parse_dcgmi_table(text)
    with pytest.raises(dcgmi.DcgmiConnectionError):
        dcgmi.parse_dcgmi_discovery(text)


def test_unable_to_complete_keeps_code_and_system_errors() -> None:
    with pytest.raises(dcgmi.DcgmiDiagnosticError) as caught:
        dcgmi.parse_dcgmi(_read("error_4_4_1_unable_to_complete_entities.txt"))
    assert caught.value.return_code == -30
    assert str(caught.value).splitlines()[1].startswith("Error: Cannot load plugins.")


@pytest.mark.parametrize(
    ("text", "error", "code"),
    [
        (
            "Error: Unable to complete diagnostic for group 0. Return: (-35) The specified group "
            "is empty, and this operation is incompatible with an empty group.",
            dcgmi.DcgmiNoGpusError,
            -35,
        ),
        (
            "Error: Unable to complete diagnostic for group 2. Return: (-21) : Host engine "
            "connection invalid/disconnected\n",
            dcgmi.DcgmiConnectionError,
            -21,
        ),
        (
            "Error: Diagnostic could not be run because the Tesla recommended driver is not "
            "being used.",
            dcgmi.DcgmiUnsupportedError,
            None,
        ),
        (
            "Error: Diagnostic can only be performed on a homogeneous group of GPUs.",
            dcgmi.DcgmiDiagnosticError,
            None,
        ),
        ("Error: No GPUs found in the provided entity list.", dcgmi.DcgmiNoGpusError, None),
        (
            "Error: Health watches not enabled. Please enable watches.",
            dcgmi.DcgmiFailureError,
            None,
        ),
    ],
)
def test_error_texts_from_dcgmi_source(
    text: str, error: type[dcgmi.DcgmiFailureError], code: int | None
) -> None:
    # Inline: the texts dcgmi/Diag.cpp, DcgmiProfile.cpp and Health.cpp print
    with pytest.raises(error) as caught:
        dcgmi.parse_dcgmi(text)
    assert type(caught.value) is error
    assert (caught.value.return_code, caught.value.output) == (code, text)


# --- discovery ----------------------------------------------------------------------------------


def test_discovery_one_gpu_no_switches() -> None:
    result = dcgmi.parse_dcgmi(_read("discovery_t4_one_gpu.txt"))
    assert isinstance(result, dcgmi.DcgmDiscovery)
    (gpu,) = result.gpus
    assert (gpu.entity_id, gpu.name, gpu.pci_bus_id) == (0, "Tesla T4", "00000001:00:00.0")
    assert gpu.uuid == "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
    assert (result.gpu_count, result.nvswitch_ids, result.cpus) == (1, (), ())


def test_discovery_null_names_and_trailing_blanks() -> None:
    result = dcgmi.parse_dcgmi_discovery(_read("discovery_3_1_7_null_names.txt"))
    assert result.gpu_count == 4
    assert [g.name for g in result.gpus] == [None] * 4
    assert result.gpus[3].pci_bus_id == "00000000:DC:00.0"


def test_discovery_cpus_and_listed_fewer_than_counted() -> None:
    result = dcgmi.parse_dcgmi_discovery(_read("discovery_3_3_rtx3090_grace_cpus.txt"))
    assert (result.gpu_count, len(result.gpus)) == (8, 4)
    assert result.gpus[2].name == "NVIDIA GeForce RTX 3090"
    assert [(c.entity_id, c.name, c.cores) for c in result.cpus] == [
        (0, "Grace TH500", "0-19,40-59"),
        (1, "Grace TH500", "20-39,60-79"),
    ]


def test_discovery_all_flag_switches_and_connectx() -> None:
    # Inline, constructed from DCGM 4.6 dcgmi/Query.cpp (DisplayDiscoveredDevices, `-l -a`)
    text = "\n".join(
        [
            "2 GPUs found (All).",
            "+--------+----------------------------------------------------------------------+",
            "| GPU ID | Device Information                                                   |",
            "+--------+----------------------------------------------------------------------+",
            "| 0      | Name: NVIDIA H100 80GB HBM3                                          |",
            "|        | PCI Bus ID: 00000000:18:00.0                                         |",
            "|        | Device UUID: GPU-00000000-0000-0000-0000-000000000000                |",
            "+--------+----------------------------------------------------------------------+",
            "| 1      | Status: Detached                                                     |",
            "|        | Name: NVIDIA H100 80GB HBM3 (last known)                             |",
            "|        | PCI Bus ID: 00000000:2A:00.0 (last known)                            |",
            "|        | Device UUID: GPU-11111111-1111-1111-1111-111111111111                |",
            "+--------+----------------------------------------------------------------------+",
            "2 NvSwitches found.",
            "+-----------+",
            "| Switch ID |",
            "+-----------+",
            "| 8         |",
            "| 9         |",
            "+-----------+",
            "1 ConnectX found.",
            "+----------+",
            "| ConnectX |",
            "+----------+",
            "| 0        |",
            "+----------+",
            "0 CPUs found.",
        ]
    )
    result = dcgmi.parse_dcgmi(text)
    assert isinstance(result, dcgmi.DcgmDiscovery)
    detached = result.gpus[1]
    assert (detached.status, detached.name, detached.pci_bus_id) == (
        "Detached",
        "NVIDIA H100 80GB HBM3",
        "00000000:2A:00.0",
    )
    assert (result.nvswitch_ids, result.connectx_ids, result.cpus) == ((8, 9), (0,), ())


# --- health -------------------------------------------------------------------------------------


def test_health_json_healthy() -> None:
    result = dcgmi.parse_dcgmi(_read("health_json_healthy.json"))
    assert isinstance(result, dcgmi.DcgmHealth)
    assert (result.overall, result.healthy, result.entities) == ("Healthy", True, ())


def test_health_tree_with_wrapped_incident() -> None:
    result = dcgmi.parse_dcgmi(_read("health_tree_thermal_warning_constructed.txt"))
    assert isinstance(result, dcgmi.DcgmHealth)
    (gpu,) = result.entities
    assert (gpu.entity_group, gpu.entity_id, gpu.health) == ("GPU", 2, "Warning")
    (incident,) = gpu.incidents
    assert (incident.system, incident.health) == ("Thermal system", "Warning")
    assert incident.message.startswith("Detected clocks event due to thermal violation in GPU 2")
    assert incident.message.endswith("fans, and any other components.")
    assert not result.healthy


def test_health_json_incidents() -> None:
    # Inline, constructed from DcgmiOutputJson (children/value/overflow) as Health.cpp fills it
    text = (
        '{"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": {"1": {"value": '
        '"Failure", "children": {"Errors": {"children": {"Memory system": {"value": "Failure", '
        '"overflow": ["A DBE has occurred.", "Reset the GPU."]}}}}}}}}, '
        '"header": ["Health Monitor Report"]}'
    )
    result = dcgmi.parse_dcgmi_health(text)
    (gpu,) = result.entities
    assert (gpu.entity_id, gpu.health) == (1, "Failure")
    assert gpu.incidents == (
        dcgmi.DcgmHealthIncident(
            system="Memory system", health="Failure", message="A DBE has occurred. Reset the GPU."
        ),
    )


# --- foreign text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "nvidia_smi_no_devices.txt",
        "nvidia_smi_driver_failed.txt",
        "fi_info_getinfo_61.txt",
        "nccl_all_reduce_h100_16rank.txt",
    ],
)
def test_foreign_outputs_are_parse_errors(name: str) -> None:
    text = (OUTPUTS / name).read_text(encoding="utf-8")
    for parse in (
        dcgmi.parse_dcgmi,
        dcgmi.parse_dcgmi_table,
        dcgmi.parse_dcgmi_discovery,
        dcgmi.parse_dcgmi_health,
    ):
        with pytest.raises(dcgmi.ParseError):
            parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "neither dcgmi diag"),
        ('{"DCGM Diagnostic": {"test_categories": [', "not valid JSON"),
        ('{"health": 1}', "top-level keys: health"),
        ('{"DCGM Diagnostic": {"test_categories": {}}}', "expected a list"),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "x", "tests": [{"name": "t", '
            '"results": [{"entity_id": "zero", "status": "Pass"}]}]}]}}',
            "neither an integer nor a CSV",
        ),
        ("{\n}\n", "top-level keys: $"),
        (
            '{"header": ["Health Monitor Report"], "body": {"Overall Health": {"value": '
            '"Healthy"}, "GPU": {"children": {"gpu0": {"value": "Healthy"}}}}}',
            "entity 'gpu0' is not an id",
        ),
        ("| Overall Health |", "neither dcgmi diag"),
    ],
)
def test_malformed_input_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(dcgmi.ParseError, match=message):
        dcgmi.parse_dcgmi(text)


def test_health_report_without_overall_row() -> None:
    with pytest.raises(dcgmi.ParseError, match="without an 'Overall Health' row"):
        dcgmi.parse_dcgmi_health("| Health Monitor Report |\n| GPU | |\n")
