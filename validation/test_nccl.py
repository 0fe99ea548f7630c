"""NCCL smoke at target stage: all_reduce_perf on one node and across nodes, number and path.

nccl-tests comes from the nccl layer (its prefix in `nccl_tests_prefix`); across nodes it is
launched by the EFA installer's Open MPI with a hostfile of the --hosts, or by Slurm's srun
(`--launcher srun`), never a home-made launcher, with the NCCL environment of the aws_ofi_nccl
layer. Thresholds and message sizes are the profile's baselines.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.acceptance import message_bytes, nccl_path_problems
from nodeforge.nccl_launch import launch_line, parse_env_file
from nodeforge.parsers.nccl_tests import busbw_at, parse_nccl_debug, parse_nccl_tests
from nodeforge.probes import file_text
from nodeforge.report import not_applicable

pytestmark = [pytest.mark.gpu, pytest.mark.layer("nccl"), pytest.mark.stage("target")]
NCCL_ENV = "/etc/nodeforge/nccl.env"


def _binary(resolved: dict[str, Any]) -> str:
    return f"{resolved.get('nccl_tests_prefix', '/opt/nccl-tests')}/bin/all_reduce_perf"


def _judge(
    output: str,
    name: str,
    size: int,
    judge: Any,
    record_property: Any,
    *,
    expect_efa: bool,
    gdr: bool,
) -> None:
    result = parse_nccl_tests(output)
    path = parse_nccl_debug(output)
    assert result.passed, (
        f"all_reduce_perf reported wrong values (out of bounds {result.out_of_bounds})"
    )
    (verdict,) = judge(name, [busbw_at(result, size)])
    record_property("busbw", verdict.properties())
    record_property("nccl_version", path.nccl_version)
    record_property("network", path.network)
    assert nccl_path_problems(path, expect_efa=expect_efa, require_gdr=gdr) == []
    assert verdict.ok, verdict.note


def test_single_node_all_reduce(
    host: Any,
    resolved: dict[str, Any],
    nodeforge: dict[str, Any],
    judge: Any,
    record_property: Any,
) -> None:
    profile = nodeforge["profile"]
    name = "nccl_all_reduce_single_node"
    baseline = profile["baselines"][name]
    size = message_bytes(baseline["message_size"])
    run = host.run(
        "NCCL_DEBUG=INFO %s -b %s -e %s -g %s -c 1 -n 20",
        _binary(resolved),
        str(size),
        str(size),
        str(profile["gpu"]["count"]),
    )
    assert run.rc == 0, run.stderr
    _judge(run.stdout, name, size, judge, record_property, expect_efa=False, gdr=False)


@pytest.mark.multinode
@pytest.mark.efa
def test_multi_node_all_reduce(
    host: Any,
    resolved: dict[str, Any],
    judge: Any,
    record_property: Any,
    pytestconfig: pytest.Config,
) -> None:
    nodes = [h.split("://", 1)[-1] for h in pytestconfig.getoption("hosts").split(",") if h]
    if host.backend.hostname != nodes[0]:
        not_applicable("launched once, from the first host")
    profile = resolved["nodeforge"]["profile"]
    name = "nccl_all_reduce_multi_node"
    baseline = profile["baselines"][name]
    size = message_bytes(baseline["message_size"])
    env = {**parse_env_file(file_text(host, NCCL_ENV) or ""), "NCCL_DEBUG": "INFO"}
    sizes = ["-b", str(size), "-e", str(size)]
    run = host.run(
        launch_line(
            pytestconfig.getoption("--launcher"),
            nodes=nodes,
            gpus_per_node=profile["gpu"]["count"],
            command=[_binary(resolved), *sizes, "-g", "1", "-c", "1", "-n", "20"],
            env=env,
        )
    )
    assert run.rc == 0, run.stderr
    gdr = profile["network"]["gpudirect_rdma"] == "required"
    _judge(run.stdout, name, size, judge, record_property, expect_efa=True, gdr=gdr)
