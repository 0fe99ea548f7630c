"""The alert rules and dashboard of monitoring/: promtool's checks and unit tests, the metric
names and labels they use, their Xid lists against the Xid policy, the dashboard's structure.

promtool comes from Debian's `prometheus` package (tools/setup-podman.sh installs it). Without
it the promtool tests skip, or fail where NODEFORGE_REQUIRE_PODMAN=1 (CI, `make test`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeforge.xid_policy import ACTIONS, load_policy
from tests.conftest import REPO

PROMETHEUS = REPO / "monitoring" / "prometheus"
RULES = PROMETHEUS / "nodeforge-gpu-alerts.yml"
RULE_TESTS = PROMETHEUS / "nodeforge-gpu-alerts.test.yml"
DASHBOARD = REPO / "monitoring" / "grafana" / "nodeforge-gpu-health.json"

# The metrics of nodeforge's Xid watcher and boot-time health gate (node_exporter's textfile
# collector adds instance and job).
NODEFORGE_METRICS: dict[str, str] = {
    "nodeforge_gpu_xid_total": "counter",
    "nodeforge_node_health": "gauge",
    "nodeforge_node_action_required": "gauge",
    "nodeforge_health_gate_passed": "gauge",
}
NODEFORGE_LABELS = frozenset({"xid", "action", "gpu"})

# Prometheus' own target health, and node_exporter's textfile collector
# (prometheus/node_exporter collector/textfile.go: node_textfile_scrape_error).
NODE_EXPORTER_METRICS: dict[str, str] = {"up": "gauge", "node_textfile_scrape_error": "gauge"}

# The fields dcgm-exporter exports by default, with the Prometheus type it declares:
# NVIDIA/dcgm-exporter etc/default-counters.csv @ d5e5f510a1b6b393f39a43293ccd9dc985defc79
# (its content unchanged since e61056b94eb98ab6598bd3a7c2a299a482b16a42), uncommented lines
# except the label DCGM_FI_DRIVER_VERSION. etc/dcp-metrics-included.csv at that commit has the
# same fields.
DCGM_DEFAULT_COUNTERS: dict[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    # declared a counter, but DCGM field 449 is a throughput already (dcgm-exporter #417, #658)
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "gauge",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}
# Fields dcgm-exporter exports once its counters file names them: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
# is a commented-out line of default-counters.csv @ d5e5f51; DCGM_FI_DEV_ROW_REMAP_PENDING is
# DCGM field 396 (NVIDIA/go-dcgm pkg/dcgm/const_fields.go @ ec245c09fe3e, the go-dcgm that
# dcgm-exporter's go.mod pins at d5e5f51), in neither CSV.
DCGM_OPT_IN_COUNTERS: dict[str, str] = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "gauge",
}
# The labels dcgm-exporter puts on a GPU's series (internal/pkg/rendermetrics/render_metrics.go
# @ d5e5f51: Hostname became hostname there) and on DCGM_FI_DEV_XID_ERRORS
# (internal/pkg/collector/gpu_collector.go), plus Prometheus' target labels.
DCGM_LABELS = frozenset(
    {"gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID"}
    | {"Hostname", "hostname", "err_code", "err_msg"}
)
TARGET_LABELS = frozenset({"instance", "job"})

KNOWN_METRICS = NODEFORGE_METRICS | NODE_EXPORTER_METRICS | DCGM_DEFAULT_COUNTERS
KNOWN_METRICS |= DCGM_OPT_IN_COUNTERS
COUNTERS = frozenset(name for name, kind in KNOWN_METRICS.items() if kind == "counter")

# Xid 154 names the recovery the driver requires; the code alone does not tell the action.
RECOVERY_ACTION_XID = 154
XID_CODES = range(1, 1024)

# PromQL words that are not metric names: aggregations, keywords, binary set operators.
PROMQL_WORDS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile", "limitk", "limit_ratio", "by", "without", "on"}
    | {"ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2"}
)
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__range", "__range_s"})
PANEL_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in load_rules() if "alert" in rule}


def load_dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def panel_targets() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in load_dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def without_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a dashboard query) selects."""
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", without_strings(expr))
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = set()
    for match in re.finditer(r"\b[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group()
        if word in PROMQL_WORDS or text[match.end() :].lstrip().startswith("("):
            continue  # an aggregation, keyword or function
        names.add(word)
    return names


def require_promtool() -> str:
    path = shutil.which("promtool")
    if path is not None:
        return path
    reason = "promtool not installed (tools/setup-podman.sh installs Debian's prometheus)"
    if os.environ.get("NODEFORGE_REQUIRE_PODMAN") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(load_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_dashboard_queries_are_promql(tmp_path: Path) -> None:
    """Each dashboard query, its Grafana variables filled in, parses as a recording rule."""
    rules = []
    for panel, target in panel_targets():
        expr = target["expr"].replace("${instance:regex}", ".+")
        expr = re.sub(r"\$__(?:rate_)?interval", "5m", expr).replace("$__range", "6h")
        assert "$" not in expr, f"panel {panel['id']}: variable left in {expr}"
        rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8"
    )
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_metric_name_extraction() -> None:
    assert metric_names(
        'sum by (instance, xid) (increase(nodeforge_gpu_xid_total{gpu=~"a|b"}[$__rate_interval]))'
        " > 0 or (up{job='x'} unless on (instance) node_textfile_scrape_error offset 15m) * 60"
    ) == {"nodeforge_gpu_xid_total", "up", "node_textfile_scrape_error"}


def test_every_metric_is_a_known_one() -> None:
    used = {name for rule in load_rules() for name in metric_names(rule["expr"])}
    used_by_dashboard = {
        name for _, target in panel_targets() for name in metric_names(target["expr"])
    }
    unknown = (used | used_by_dashboard) - KNOWN_METRICS.keys()
    assert not unknown, f"not a nodeforge, node_exporter or dcgm-exporter metric: {unknown}"
    assert set(NODEFORGE_METRICS) <= used | used_by_dashboard
    assert {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "nodeforge_node_health",
        "nodeforge_node_action_required",
        "nodeforge_gpu_xid_total",
        "up",
    } <= used_by_dashboard


def test_alerts_use_labels_their_sources_export() -> None:
    known = DCGM_LABELS | NODEFORGE_LABELS | TARGET_LABELS
    for name, rule in alerts().items():
        matched = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", rule["expr"]))
        grouped = re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", rule["expr"])
        grouped_labels = {label.strip() for group in grouped for label in group.split(",")}
        templated = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])))
        assert matched | grouped_labels | templated <= known, name


def test_every_alert_is_labelled_and_says_what_to_do() -> None:
    names = [rule["alert"] for rule in load_rules() if "alert" in rule]
    assert len(names) == len(set(names))
    for name, rule in alerts().items():
        assert name.startswith("Nodeforge"), name
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["labels"].get("action", "application") in ACTIONS, name
        assert rule["annotations"]["summary"].strip(), name
        description = rule["annotations"]["description"]
        assert re.search(r"\b(replace|reboot|reset|restart|fix|check)\b", description, re.I), name


def test_counters_are_read_through_rate_or_increase() -> None:
    for name, rule in alerts().items():
        expr = without_strings(rule["expr"])
        for counter in COUNTERS & metric_names(rule["expr"]):
            assert re.search(rf"\b(?:rate|increase)\(\s*{counter}\b", expr), (name, counter)
            compared = rf"\b{counter}\s*(?:\{{[^}}]*\}})?\s*(?:[<>]=?|==|!=)"
            assert not re.search(compared, expr), f"{name} compares raw {counter}"


def dcgm_xid_codes(expr: str) -> set[int]:
    """The Xid codes for which DCGM_FI_DEV_XID_ERRORS{...} > 0 selects a series."""
    codes: set[int] = set()
    for selector in re.findall(r"DCGM_FI_DEV_XID_ERRORS\s*\{([^}]*)\}", expr):
        matchers = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', selector)
        assert matchers and all(label == "err_code" for label, _, _ in matchers), selector

        def selects(code: int, matchers: list[tuple[str, str, str]] = matchers) -> bool:
            for _, op, value in matchers:
                if op in {"=~", "!~"}:
                    hit = re.fullmatch(value, str(code)) is not None
                else:
                    hit = value == str(code)
                if hit != (op in {"=~", "="}):
                    return False
            return True

        codes |= {code for code in XID_CODES if selects(code)}
    return codes


def test_dcgm_xid_alerts_follow_the_xid_policy() -> None:
    policy = load_policy()
    judged = {
        xid: entry.action
        for xid, entry in policy.entries.items()
        if entry.nonfatal_action is None and xid != RECOVERY_ACTION_XID
    }
    unlisted = set(XID_CODES) - set(policy.entries)
    assert policy.default.action == "reboot_node"
    expected = {
        "NodeforgeDcgmXidReplaceNode": ("replace_node", set()),
        "NodeforgeDcgmXidRebootNode": ("reboot_node", unlisted),
        "NodeforgeDcgmXidResetGpu": ("reset_gpu", set()),
    }
    rules = alerts()
    for name, (action, extra) in expected.items():
        codes = {xid for xid, judged_action in judged.items() if judged_action == action} | extra
        assert dcgm_xid_codes(rules[name]["expr"]) == codes, name
        assert rules[name]["labels"]["action"] == action, name
    selected = [dcgm_xid_codes(rules[name]["expr"]) for name in expected]
    for first, second in itertools.combinations(selected, 2):
        assert not first & second


def test_each_alert_fires_and_stays_quiet_in_the_unit_tests() -> None:
    document = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    assert document["rule_files"] == [RULES.name]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in document["tests"]:
        series = [item["series"] for item in case["input_series"]]
        for check in case["alert_rule_test"]:
            name, expected = check["alertname"], check.get("exp_alerts") or []
            fires |= {name} if expected else set()
            metrics = metric_names(alerts()[name]["expr"])
            inputs = [s for s in series if metric_names(s) & metrics]
            # quiet: an evaluation that expects nothing, or series of its metrics that must not fire
            quiet |= {name} if not expected or len(inputs) > len(expected) else set()
    assert fires == set(alerts()), set(alerts()) - fires
    assert quiet == set(alerts()), set(alerts()) - quiet


def test_dashboard_variables() -> None:
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    instance = variables["instance"]
    assert instance["type"] == "query"
    assert instance["datasource"] == PANEL_DATASOURCE
    assert "label_values(" in json.dumps(instance["query"])
    assert instance["multi"] and instance["includeAll"]


def test_dashboard_structure() -> None:
    dashboard = load_dashboard()
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        where = f"panel {panel['id']} ({panel.get('title')})"
        assert isinstance(panel["type"], str) and panel["type"], where
        assert panel["datasource"] == PANEL_DATASOURCE, where
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "xywh"), where
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, where
        covered = set(
            itertools.product(
                range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
            )
        )
        assert not covered & cells, f"{where} overlaps another panel"
        cells |= covered
        targets = panel["targets"]
        assert targets, where
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in targets:
            assert target["expr"].strip(), where
            assert target.get("datasource", PANEL_DATASOURCE) == PANEL_DATASOURCE, where
            assert re.search(r"\$\{?instance\b", target["expr"]), f"{where}: not filtered by node"
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= variables | GRAFANA_BUILTINS, f"{where}: {used - variables}"
