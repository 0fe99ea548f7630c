"""The validation suite's verdicts, on a tiny fake suite run by pytest itself (pytester) with the
real validation/conftest.py and the nodeforge.report plugin: a required check that skipped is
"not run" and fails the run; only a skip the target declares (`not_applicable`) is a skip; a
measurement without a baseline is listed as unjudged, by baseline and profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeforge.report import SCHEMA_VERSION
from nodeforge.validate import ValidationRun
from tests.conftest import REPO

pytest_plugins = ("pytester",)

PROFILE = "p5.48xlarge"
VARS = {
    "nodeforge": {
        "image": "fake-image",
        "layers": {"base": True, "efa": False},
        "stack": {"name": "fake-stack"},
        "profile": {
            "name": PROFILE,
            "baselines": {
                "nccl_all_reduce_single_node": {
                    "value": None,
                    "unit": "GB/s busbw",
                    "status": "unknown",
                    "source": "none yet",
                    "note": "measure on the instance and record it",
                },
                "nccl_all_reduce_multi_node": {
                    "value": 400.0,
                    "unit": "GB/s busbw",
                    "status": "published",
                    "tolerance": 0.1,
                    "source": "a benchmark",
                },
            },
        },
    }
}
# The node, appended to the real conftest: a fact without GPUs, under a host name the report
# records (testinfra's `host` fixture, overridden).
HOST = """
from types import SimpleNamespace

FACT = {"gpu_count": 0, "nvswitch_count": 0, "switch_management_bridges": 0, "efa_count": 0}


class FakeHost:
    backend = SimpleNamespace(hostname="node-1")

    def run(self, command, *args):
        return SimpleNamespace(rc=0, stdout=json.dumps(FACT), stderr="")


@pytest.fixture
def host():
    return FakeHost()
"""
SUITE = """
import pytest

from nodeforge.report import not_applicable


def test_passes(host):
    assert True


def test_tool_missing_on_the_node(host):
    pytest.skip("dcgmi is not installed on this node")


def test_declared_absent(host, nodeforge):
    not_applicable(f"stack {nodeforge['stack']['name']} builds no pyxis")


@pytest.mark.layer("efa")
def test_disabled_layer(host):
    assert False, "must not run"


@pytest.mark.stage("build")
def test_build_only(host):
    assert True


@pytest.mark.gpu
def test_needs_a_gpu(host):
    assert True
"""
JUDGED = """
def test_unknown_baseline_is_recorded(host, judge):
    (verdict,) = judge("nccl_all_reduce_single_node", [123.4])
    assert verdict.ok


def test_known_baseline_judges(host, judge):
    (verdict,) = judge("nccl_all_reduce_multi_node", [120.0])
    assert verdict.ok, verdict.note
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    conftest = (REPO / "validation" / "conftest.py").read_text(encoding="utf-8")
    pytester.makeconftest(conftest + HOST)
    (pytester.path / "vars.json").write_text(json.dumps(VARS), encoding="utf-8")
    return pytester


def _run(suite: pytest.Pytester, stage: str, *args: str) -> tuple[int, dict[str, Any], str]:
    result = suite.runpytest(
        f"--nodeforge-vars={suite.path / 'vars.json'}",
        f"--stage={stage}",
        f"--nodeforge-report={suite.path / 'report.json'}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    report = json.loads((suite.path / "report.json").read_text(encoding="utf-8"))
    return int(result.ret), report, result.stdout.str()


def _failed_run(ret: int, report: dict[str, Any], report_dir: Path) -> ValidationRun:
    return ValidationRun(
        ok=False,
        returncode=ret,
        report=report,
        junit=report_dir / "validation-target.xml",
        json_report=report_dir / "validation-target.json",
        log=report_dir / "validation-target.log",
    )


def _outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"].split("::")[-1]: c["outcome"] for c in report["checks"]}


def test_target_stage_skip_of_a_required_check_is_not_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=SUITE)
    ret, report, output = _run(suite, "target")
    assert ret == 1
    assert report["schema"] == SCHEMA_VERSION == 3
    assert report["ok"] is False
    assert _outcomes(report) == {
        "test_passes": "passed",
        "test_tool_missing_on_the_node": "not run",
        "test_declared_absent": "skipped",
        "test_disabled_layer": "skipped",
        "test_build_only": "skipped",
        # a missing capability at target stage fails (it did before this plugin decided skips)
        "test_needs_a_gpu": "failed",
    }
    assert report["summary"] == {"passed": 1, "failed": 1, "skipped": 3, "not run": 1}
    not_run = next(c for c in report["checks"] if c["outcome"] == "not run")
    assert not_run["message"] == "dcgmi is not installed on this node"
    assert not_run["host"] == "node-1"
    declared = next(c for c in report["checks"] if c["id"].endswith("test_declared_absent"))
    assert declared["message"] == "stack fake-stack builds no pyxis"
    assert "not_applicable" not in declared["properties"]
    assert "NOT RUN test_suite.py::test_tool_missing_on_the_node: dcgmi is not installed" in output
    assert "1 not run" in output


def test_build_stage_skips_what_the_build_cannot_have(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=SUITE.replace("test_tool_missing_on_the_node", "_unused"))
    ret, report, _ = _run(suite, "build")
    assert ret == 0
    assert report["ok"] is True
    outcomes = _outcomes(report)
    assert outcomes["test_needs_a_gpu"] == "skipped"
    assert outcomes["test_build_only"] == "passed"
    assert report["summary"]["not run"] == 0


def test_the_same_skip_fails_the_build_stage(suite: pytest.Pytester) -> None:
    # a tool missing on the node is not the build stage's to excuse either
    suite.makepyfile(test_suite=SUITE)
    ret, report, _ = _run(suite, "build")
    assert ret == 1
    assert report["ok"] is False
    assert _outcomes(report)["test_tool_missing_on_the_node"] == "not run"


def test_a_module_that_skips_at_import_is_not_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_optional="import pytest\npytest.importorskip('nodeforge_no_such_module')\n"
    )
    ret, report, _ = _run(suite, "target")
    assert ret == 1
    [check] = report["checks"]
    assert check["outcome"] == "not run"
    assert check["phase"] == "collect"
    assert "nodeforge_no_such_module" in check["message"]


def test_not_run_survives_pytest_xdist(suite: pytest.Pytester) -> None:
    # `nodeforge validate --parallel`: the verdict is decided on the worker, written by the
    # controller
    suite.makepyfile(test_suite=SUITE)
    ret, report, _ = _run(suite, "target", "-n", "1")
    assert ret == 1
    assert report["summary"] == {"passed": 1, "failed": 1, "skipped": 3, "not run": 1}


def test_unknown_baseline_is_listed_as_unjudged(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_judged=JUDGED)
    ret, report, output = _run(suite, "target")
    # the known baseline judged 120 against 360 (400 less 10 %), the unknown one judged nothing
    assert ret == 1
    assert _outcomes(report) == {
        "test_unknown_baseline_is_recorded": "passed",
        "test_known_baseline_judges": "failed",
    }
    assert "120.0 GB/s busbw < 360.0" in report["checks"][1]["message"]
    assert report["unjudged"] == [
        {
            "baseline": "nccl_all_reduce_single_node",
            "profile": PROFILE,
            "status": "unknown",
            "measured": [123.4],
            "unit": "GB/s busbw",
            "note": "measure on the instance and record it",
            "check": "test_judged.py::test_unknown_baseline_is_recorded",
            "host": "node-1",
        }
    ]
    assert f"UNJUDGED {PROFILE} nccl_all_reduce_single_node (status unknown)" in output


def test_summary_names_not_run_and_unjudged(suite: pytest.Pytester, tmp_path: Path) -> None:
    suite.makepyfile(test_suite=SUITE, test_judged=JUDGED)
    ret, report, _ = _run(suite, "target", "--hosts=ssh://node-1")
    run = _failed_run(ret, report, tmp_path)
    assert run.counts == {"passed": 2, "failed": 2, "skipped": 3, "not run": 1}
    assert [c["message"] for c in run.not_run()] == ["dcgmi is not installed on this node"]
    text = run.summary()
    row = next(line for line in text.splitlines() if "test_tool_missing_on_the_node" in line)
    assert row.split()[1:4] == ["node-1", "not", "run"]
    assert row.endswith("dcgmi is not installed on this node")
    assert "missing capabilities: gpu" in text
    assert "not run: 1 required check(s) skipped, so the run fails" in text
    assert (
        f"  {PROFILE} nccl_all_reduce_single_node (status unknown): measured 123.4 GB/s busbw "
        "on node-1 by test_unknown_baseline_is_recorded"
    ) in text
    assert (
        "target stage on ssh://node-1: 2 passed, 2 failed, 1 not run, 3 skipped (not "
        "applicable), 1 unjudged"
    ) in text


LOST = """
import testinfra


def test_lost_the_host(host):
    # real ssh to a port where nothing listens: ssh itself fails (exit 255)
    testinfra.get_host("ssh://nobody@127.0.0.1:1").run("true")


def test_found_a_fault(host):
    assert host.run("true").rc == 1, "the node is wrong"
"""


def test_a_check_that_lost_its_host_says_so_and_judged_nothing(
    suite: pytest.Pytester, tmp_path: Path
) -> None:
    suite.makepyfile(test_lost=LOST)
    ret, report, _ = _run(suite, "target")
    assert ret == 1
    checks = {c["id"].split("::")[-1]: c for c in report["checks"]}
    lost, fault = checks["test_lost_the_host"], checks["test_found_a_fault"]
    assert lost["outcome"] == fault["outcome"] == "failed"
    assert lost["unreachable"] == "ssh: connect to host 127.0.0.1 port 1: Connection refused"
    assert fault["unreachable"] is None
    assert "unreachable" not in lost["properties"]
    run = _failed_run(ret, report, tmp_path)
    assert [c["id"] for c in run.unreachable()] == [lost["id"]]
