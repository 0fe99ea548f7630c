"""The multi-node nccl-tests line for mpirun and srun: ranks, placement and the NCCL env."""

from __future__ import annotations

import shlex

import pytest

from nodeforge.nccl_launch import launch_line, parse_env_file

ENV_FILE = """# Ansible managed
# NCCL with aws-ofi-nccl 1.22.0
NCCL_NET="AWS Libfabric"
NCCL_NET_PLUGIN="ofi"
NCCL_SOCKET_IFNAME="^docker,lo,veth"
"""
COMMAND = ["/opt/nccl-tests/bin/all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "1"]


def test_env_file_as_the_layer_writes_it() -> None:
    assert parse_env_file(ENV_FILE) == {
        "NCCL_NET": "AWS Libfabric",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
    }


def test_mpirun_hostfile_ranks_and_forwarded_env() -> None:
    line = launch_line(
        "mpirun",
        nodes=["node-a", "node-b"],
        gpus_per_node=8,
        command=COMMAND,
        env=parse_env_file(ENV_FILE),
    )
    setup, launch = line.split(" && ", 1)
    assert setup == "printf 'node-a slots=8\\nnode-b slots=8\\n' > /tmp/nodeforge-hostfile"
    words = shlex.split(launch)
    assert words[:3] == [
        "NCCL_NET=AWS Libfabric",
        "NCCL_NET_PLUGIN=ofi",
        "NCCL_SOCKET_IFNAME=^docker,lo,veth",
    ]
    mpirun = words.index("/opt/amazon/openmpi/bin/mpirun")
    assert words[mpirun + 1 : mpirun + 8] == [
        "--allow-run-as-root", "-np", "16", "-N", "8", "--hostfile", "/tmp/nodeforge-hostfile",
    ]  # fmt: skip
    forwarded = [words[i + 1] for i, word in enumerate(words) if word == "-x"]
    assert forwarded == ["NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "LD_LIBRARY_PATH"]
    assert words[-len(COMMAND) :] == COMMAND


def test_srun_allocation_shape_and_exported_env() -> None:
    line = launch_line(
        "srun",
        nodes=["p5-1", "p5-2", "p5-3"],
        gpus_per_node=8,
        command=COMMAND,
        env={"NCCL_DEBUG": "INFO"},
    )
    words = shlex.split(line)
    assert words[0] == "NCCL_DEBUG=INFO"
    assert words[1] == "srun"
    assert {"--nodes=3", "--ntasks=24", "--ntasks-per-node=8", "--nodelist=p5-1,p5-2,p5-3"} <= set(
        words
    )
    assert "--mpi=pmix" in words and "--export=ALL" in words
    assert words[-len(COMMAND) :] == COMMAND


def test_no_nodes() -> None:
    with pytest.raises(ValueError, match="no nodes"):
        launch_line("srun", nodes=[], gpus_per_node=8, command=COMMAND, env={})
