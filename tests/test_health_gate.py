"""The boot-time GPU health gate, on canned nvidia-smi, systemctl, procfs and sysfs answers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodeforge.cli import main
from nodeforge.health_gate import (
    DRIVER_VERSION_FILE,
    GPU_QUERY,
    INFINIBAND_DIR,
    PRODUCT_NAME,
    REMAP_QUERY,
    Expectation,
    GateResult,
    run_gate,
)
from tests.conftest import REPO

OUTPUTS = REPO / "tests" / "fixtures" / "outputs"
SMI = OUTPUTS / "nvidia_smi"
P5 = "p5.48xlarge"
DRIVER = "595.91.07"
P5_BUS_IDS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")
EXPECT = {
    P5: {
        "gpu_count": 8,
        "gpu_model": "H100",
        "driver_version": DRIVER,
        "efa_interfaces": 32,
        "fabric_manager": True,
        "imex": False,
    },
    "g6.xlarge": {
        "gpu_count": 1,
        "gpu_model": "L4",
        "driver_version": DRIVER,
        "efa_interfaces": 0,
        "fabric_manager": False,
        "imex": False,
    },
}
EXPECTATIONS = {name: Expectation.model_validate(entry) for name, entry in EXPECT.items()}


def gpu_csv(count: int = 8, name: str = "NVIDIA H100 80GB HBM3", driver: str = DRIVER) -> str:
    lines = ["index, name, pci.bus_id, driver_version"]
    lines += [f"{i}, {name}, 00000000:{P5_BUS_IDS[i]}:00.0, {driver}" for i in range(count)]
    return "\n".join(lines) + "\n"


def remap_csv(pending: str = "No", failure: str = "No") -> str:
    lines = ["gpu_bus_id, remapped_rows.pending, remapped_rows.failure"]
    lines += [
        f"00000000:{bus}:00.0, {pending if bus == '97' else 'No'}, {failure}" for bus in P5_BUS_IDS
    ]
    return "\n".join(lines) + "\n"


def module_version(version: str = DRIVER) -> str:
    return (
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
        "(dvs-builder@U22-I3-AE18-23-3)  Thu Jan  8 00:00:00 UTC 2026\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )


@dataclass
class FakeRunner:
    answers: dict[tuple[str, ...], tuple[int, str, str]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(tuple(argv))
        return self.answers.get(tuple(argv), (127, "", f"{argv[0]}: command not found"))


@dataclass
class FakeFiles:
    texts: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)

    def read_text(self, path: str) -> str:
        if path not in self.texts:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.texts[path]

    def list_dir(self, path: str) -> list[str]:
        if path not in self.dirs:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.dirs[path]


def systemctl(unit: str) -> tuple[str, ...]:
    return ("systemctl", "is-active", unit)


def healthy_p5() -> tuple[FakeRunner, FakeFiles]:
    runner = FakeRunner(
        {
            GPU_QUERY: (0, gpu_csv(), ""),
            REMAP_QUERY: (0, remap_csv(), ""),
            systemctl("nvidia-fabricmanager.service"): (0, "active\n", ""),
            systemctl("nvidia-imex.service"): (3, "inactive\n", ""),
        }
    )
    efa = [f"rdmap{79 + i}s0" for i in range(32)]
    files = FakeFiles(
        texts={PRODUCT_NAME: f"{P5}\n", DRIVER_VERSION_FILE: module_version()},
        dirs={INFINIBAND_DIR: efa},
    )
    return runner, files


def gate(runner: FakeRunner, files: FakeFiles, xid_state: str | None = None) -> GateResult:
    return run_gate(EXPECTATIONS, runner=runner, files=files, xid_state=xid_state)


def failed(result: GateResult) -> dict[str, str]:
    return {check.name: check.reason for check in result.checks if not check.passed}


def test_a_healthy_p5_passes() -> None:
    runner, files = healthy_p5()
    result = gate(runner, files, xid_state="/run/nodeforge/xid-state.json")
    assert result.passed, failed(result)
    assert result.instance_type == P5
    assert [c.name for c in result.checks] == [
        "instance type",
        "gpus",
        "driver",
        "fabric manager",
        "imex",
        "efa",
        "row remapping",
        "xid",
    ]
    assert systemctl("nvidia-imex.service") not in runner.calls  # not expected: not asked


def test_seven_gpus_fail() -> None:
    runner, files = healthy_p5()
    runner.answers[GPU_QUERY] = (0, gpu_csv(count=7), "")
    assert failed(gate(runner, files)) == {"gpus": "7 GPUs found, 8 expected"}


def test_b200_where_h100_expected_fails() -> None:
    runner, files = healthy_p5()
    runner.answers[GPU_QUERY] = (0, gpu_csv(name="NVIDIA B200"), "")
    reasons = failed(gate(runner, files))
    assert list(reasons) == ["gpus"]
    assert "H100 expected: 00000000:53:00.0 is NVIDIA B200" in reasons["gpus"]


def test_loaded_module_other_than_installed_driver_fails() -> None:
    runner, files = healthy_p5()
    files.texts[DRIVER_VERSION_FILE] = module_version("595.45")
    assert failed(gate(runner, files)) == {
        "driver": f"kernel module 595.45 loaded, {DRIVER} installed (expected)"
    }


def test_nvidia_smi_reporting_another_driver_fails() -> None:
    runner, files = healthy_p5()
    runner.answers[GPU_QUERY] = (0, gpu_csv(driver="595.45.04"), "")
    assert failed(gate(runner, files)) == {
        "driver": f"kernel module {DRIVER} loaded, nvidia-smi reports 595.45.04"
    }


def test_the_proprietary_module_banner_is_read() -> None:
    runner, files = healthy_p5()
    files.texts[DRIVER_VERSION_FILE] = (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Thu Jan  8 00:00:00 UTC 2026\n"
    )
    assert gate(runner, files).passed


def test_fabric_manager_inactive_fails() -> None:
    runner, files = healthy_p5()
    runner.answers[systemctl("nvidia-fabricmanager.service")] = (3, "inactive\n", "")
    assert failed(gate(runner, files)) == {
        "fabric manager": "nvidia-fabricmanager.service is inactive, expected active"
    }


def test_imex_is_checked_where_expected() -> None:
    runner, files = healthy_p5()
    expectations = {P5: replace_expectation(imex=True)}
    result = run_gate(expectations, runner=runner, files=files)
    assert failed(result) == {"imex": "nvidia-imex.service is inactive, expected active"}


def replace_expectation(**changes: object) -> Expectation:
    return Expectation.model_validate({**EXPECT[P5], **changes})


def test_thirty_one_efa_devices_fail() -> None:
    runner, files = healthy_p5()
    files.dirs[INFINIBAND_DIR] = [*files.dirs[INFINIBAND_DIR][:31], "mlx5_0"]  # not an EFA
    assert failed(gate(runner, files)) == {
        "efa": f"31 EFA devices in {INFINIBAND_DIR}, 32 expected"
    }


def test_no_efa_expected_passes_without_looking() -> None:
    runner = FakeRunner(
        {
            GPU_QUERY: (0, gpu_csv(count=1, name="NVIDIA L4"), ""),
            REMAP_QUERY: (
                0,
                "gpu_bus_id, remapped_rows.pending, remapped_rows.failure\n"
                "00000000:31:00.0, [N/A], [N/A]\n",
                "",
            ),
        }
    )
    files = FakeFiles(texts={PRODUCT_NAME: "g6.xlarge", DRIVER_VERSION_FILE: module_version()})
    result = gate(runner, files)
    assert result.passed, failed(result)


def test_a_pending_remap_fails() -> None:
    runner, files = healthy_p5()
    runner.answers[REMAP_QUERY] = (0, remap_csv(pending="Yes"), "")
    assert failed(gate(runner, files)) == {
        "row remapping": "00000000:97:00.0: remap pending (reset the GPU)"
    }


def test_the_real_remap_sample_names_pending_and_failed_gpus() -> None:
    runner, files = healthy_p5()
    sample = (SMI / "remapped_rows_pending_failure_constructed.csv").read_text(encoding="utf-8")
    runner.answers[REMAP_QUERY] = (0, sample, "")
    reason = failed(gate(runner, files))["row remapping"]
    assert reason == (
        "00000000:3B:00.0: remap pending (reset the GPU); "
        "00000000:4C:00.0: remapping failed (replace the GPU)"
    )


@pytest.mark.parametrize("action", ["replace_node", "reboot_node"])
def test_a_reboot_or_replace_xid_fails(action: str) -> None:
    runner, files = healthy_p5()
    state = "/run/nodeforge/xid-state.json"
    reason = "Xid 79 (GPU has fallen off the bus) on 00000000:97:00.0: GPU has fallen off the bus."
    files.texts[state] = json.dumps({"action": action, "reason": reason, "xid": 79})
    result = gate(runner, files, xid_state=state)
    assert failed(result) == {"xid": f"{action}: {reason}"}
    assert result.first_reason == f"xid: {action}: {reason}"


def test_a_reset_gpu_xid_before_the_reboot_passes() -> None:
    runner, files = healthy_p5()
    files.texts["/s"] = json.dumps({"action": "reset_gpu", "reason": "Xid 48"})
    assert gate(runner, files, xid_state="/s").passed


@pytest.mark.parametrize("text", ["{", "[]", '{"action": "unplug"}'])
def test_an_unreadable_xid_state_fails_closed(text: str) -> None:
    runner, files = healthy_p5()
    files.texts["/s"] = text
    assert failed(gate(runner, files, xid_state="/s")) == {"xid": "/s holds no known Xid action"}


def test_nvidia_smi_without_driver_fails_with_the_parsers_message() -> None:
    runner, files = healthy_p5()
    text = (OUTPUTS / "nvidia_smi_driver_failed.txt").read_text(encoding="utf-8")
    runner.answers[GPU_QUERY] = (9, text, "")
    runner.answers[REMAP_QUERY] = (9, text, "")
    del files.texts[DRIVER_VERSION_FILE]  # no module loaded: procfs has no nvidia folder
    reasons = failed(gate(runner, files))
    message = "nvidia-smi could not communicate with the NVIDIA driver (driver not loaded)"
    assert reasons == {
        "gpus": message,
        "driver": f"no NVIDIA kernel module loaded ({DRIVER_VERSION_FILE} missing)",
        "row remapping": message,
    }


def test_missing_nvidia_smi_fails() -> None:
    runner, files = healthy_p5()
    del runner.answers[GPU_QUERY]
    assert failed(gate(runner, files))["gpus"] == (
        "nvidia-smi exited 127: nvidia-smi: command not found"
    )


def test_the_real_h100_query_sample_is_read() -> None:
    sample = (SMI / "query_gpu_header_590_h100.csv").read_text(encoding="utf-8")
    runner, files = healthy_p5()
    runner.answers[GPU_QUERY] = (0, sample, "")
    files.texts[DRIVER_VERSION_FILE] = module_version("590.48.01")
    expectations = {P5: replace_expectation(gpu_count=1, driver_version="590.48.01")}
    result = run_gate(expectations, runner=runner, files=files)
    assert result.passed, failed(result)


def test_an_unknown_instance_type_fails() -> None:
    runner, files = healthy_p5()
    files.texts[PRODUCT_NAME] = "PowerEdge XE9680\n"
    result = gate(runner, files)
    assert not result.passed
    assert result.first_reason == (
        "instance type: 'PowerEdge XE9680' is not in the expect file "
        "(it has: g6.xlarge, p5.48xlarge)"
    )
    assert runner.calls == []


def test_no_dmi_product_name_fails() -> None:
    runner, files = healthy_p5()
    del files.texts[PRODUCT_NAME]
    assert "pass --instance-type" in (gate(runner, files).first_reason or "")


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeRunner, FakeFiles]:
    runner, files = healthy_p5()
    monkeypatch.setattr("nodeforge.commands.health_gate.SubprocessRunner", lambda: runner)
    monkeypatch.setattr("nodeforge.commands.health_gate.LocalFiles", lambda _root: files)
    return runner, files


def write_expect(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.usefixtures("node")
def test_cli_json_on_a_healthy_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = write_expect(tmp_path, EXPECT)
    assert main(["health-gate", "--expect", str(expect), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["passed"] is True
    assert document["instance_type"] == P5
    assert document["reason"] is None
    assert [c["status"] for c in document["checks"]] == ["passed"] * 8


def test_cli_text_names_the_first_failure(
    node: tuple[FakeRunner, FakeFiles], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner, files = node
    runner.answers[GPU_QUERY] = (0, gpu_csv(count=7), "")
    state = tmp_path / "xid.json"
    state.write_text('{"action": "replace_node", "reason": "Xid 79"}', encoding="utf-8")
    files.texts[str(state)] = state.read_text(encoding="utf-8")
    expect = write_expect(tmp_path, EXPECT)
    code = main(
        ["health-gate", "--expect", str(expect), "--instance-type", P5, "--xid-state", str(state)]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].split() == ["check", "result", "reason"]
    assert out.endswith("health gate: FAILED: gpus: 7 GPUs found, 8 expected\n")
    assert "replace_node: Xid 79" in out


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({P5: {**EXPECT[P5], "gpu_count": "8"}}, "p5.48xlarge.gpu_count"),
        ({P5: {k: v for k, v in EXPECT[P5].items() if k != "imex"}}, "p5.48xlarge.imex"),
        ({P5: {**EXPECT[P5], "gpus": 8}}, "p5.48xlarge.gpus"),
        ({P5: {**EXPECT[P5], "driver_version": "latest"}}, "p5.48xlarge.driver_version"),
        ([1, 2], "(top level)"),
    ],
)
def test_cli_refuses_a_malformed_expect_file(
    node: tuple[FakeRunner, FakeFiles],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    document: object,
    field: str,
) -> None:
    expect = write_expect(tmp_path, document)
    assert main(["health-gate", "--expect", str(expect)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"nodeforge: error: {expect}: field '{field}': ")
    assert "Traceback" not in captured.err
    assert node[0].calls == []


@pytest.mark.parametrize("text", ["", "{not json", "[" * 100000])
@pytest.mark.usefixtures("node")
def test_cli_refuses_an_expect_file_that_is_not_json(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(text, encoding="utf-8")
    assert main(["health-gate", "--expect", str(expect)]) == 2
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.usefixtures("node")
def test_cli_refuses_a_missing_expect_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["health-gate", "--expect", str(tmp_path / "none.json")]) == 2
    assert "cannot read the file" in capsys.readouterr().err


def test_cli_root_reads_proc_and_sys_under_another_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runner, files = healthy_p5()
    monkeypatch.setattr("nodeforge.commands.health_gate.SubprocessRunner", lambda: runner)
    root = tmp_path / "host"
    for path, text in files.texts.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(text, encoding="utf-8")
    for path, names in files.dirs.items():
        for name in names:
            (root / path.lstrip("/") / name).mkdir(parents=True)
    expect = write_expect(tmp_path, EXPECT)

    assert main(["health-gate", "--expect", str(expect), "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_type"] == P5

    # the watcher's state file is read where it is, not under the stand-in tree
    state = tmp_path / "xid-state.json"
    state.write_text('{"action": "replace_node", "reason": "Xid 79"}', encoding="utf-8")
    monkeypatch.setenv("NODEFORGE_HOST_ROOT", str(root))
    assert main(["health-gate", "--expect", str(expect), "--xid-state", str(state), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "xid: replace_node: Xid 79"

    (root / INFINIBAND_DIR.lstrip("/") / "rdmap79s0").rmdir()
    assert main(["health-gate", "--expect", str(expect), "--json"]) == 1
    assert "EFA" in json.loads(capsys.readouterr().out)["reason"]
