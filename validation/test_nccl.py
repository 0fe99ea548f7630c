"""NCCL smoke at target stage: all_reduce_perf on one node and across nodes, number and path.

nccl-tests comes from the nccl layer (its prefix in `nccl_tests_prefix`); across nodes it is
launched by the EFA installer's Open MPI with a hostfile of the --hosts, never a home-made
launcher. Thresholds and message sizes are the profile's baselines.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeforge.acceptance import baseline_verdict, message_bytes, nccl_path_problems
from nodeforge.parsers.nccl_tests import busbw_at, parse_nccl_debug, parse_nccl_tests

pytestmark = [pytest.mark.gpu, pytest.mark.layer("nccl"), pytest.mark.stage("target")]
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"


def _binary(resolved: dict[str, Any]) -> str:
    return f"{resolved.get('nccl_tests_prefix', '/opt/nccl-tests')}/bin/all_reduce_perf"


def _judge(
    output: str, baseline: dict[str, Any], record_property: Any, *, expect_efa: bool, gdr: bool
) -> None:
    result = parse_nccl_tests(output)
    path = parse_nccl_debug(output)
    assert result.passed, (
        f"all_reduce_perf reported wrong values (out of bounds {result.out_of_bounds})"
    )
    verdict = baseline_verdict(busbw_at(result, message_bytes(baseline["message_size"])), baseline)
    record_property("busbw", verdict.properties())
    record_property("nccl_version", path.nccl_version)
    record_property("network", path.network)
    assert nccl_path_problems(path, expect_efa=expect_efa, require_gdr=gdr) == []
    assert verdict.ok, verdict.note


def test_single_node_all_reduce(
    host: Any, resolved: dict[str, Any], nodeforge: dict[str, Any], record_property: Any
) -> None:
    profile = nodeforge["profile"]
    baseline = profile["baselines"]["nccl_all_reduce_single_node"]
    size = message_bytes(baseline["message_size"])
    run = host.run(
        "NCCL_DEBUG=INFO %s -b %s -e %s -g %s -c 1 -n 20",
        _binary(resolved),
        str(size),
        str(size),
        str(profile["gpu"]["count"]),
    )
    assert run.rc == 0, run.stderr
    _judge(run.stdout, baseline, record_property, expect_efa=False, gdr=False)


@pytest.mark.multinode
@pytest.mark.efa
def test_multi_node_all_reduce(
    host: Any,
    resolved: dict[str, Any],
    nodeforge: dict[str, Any],
    record_property: Any,
    pytestconfig: pytest.Config,
) -> None:
    nodes = [h.split("://", 1)[-1] for h in pytestconfig.getoption("hosts").split(",") if h]
    if host.backend.hostname != nodes[0]:
        pytest.skip("launched once, from the first host")
    profile = nodeforge["profile"]
    baseline = profile["baselines"]["nccl_all_reduce_multi_node"]
    size = message_bytes(baseline["message_size"])
    gpus = profile["gpu"]["count"]
    hostfile = "\\n".join(f"{node} slots={gpus}" for node in nodes)
    run = host.run(
        f"printf '{hostfile}\\n' > /tmp/nodeforge-hostfile && {MPIRUN} --allow-run-as-root "
        f"-np {gpus * len(nodes)} -N {gpus} --hostfile /tmp/nodeforge-hostfile "
        "--mca pml ^ucx --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none "
        f"-x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH {_binary(resolved)} "
        f"-b {size} -e {size} -g 1 -c 1 -n 20"
    )
    assert run.rc == 0, run.stderr
    gdr = profile["network"]["gpudirect_rdma"] == "required"
    _judge(run.stdout, baseline, record_property, expect_efa=True, gdr=gdr)
