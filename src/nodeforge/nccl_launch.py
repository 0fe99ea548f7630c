"""The multi-node nccl-tests command line, for the launchers clusters already have: Open MPI's
mpirun with a hostfile, or Slurm's srun inside (or asking for) an allocation.

The NCCL environment the aws_ofi_nccl layer wrote (`/etc/nodeforge/nccl.env`) travels with the
ranks: mpirun forwards each variable by name (`-x`), srun exports the launching shell's.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Literal

Launcher = Literal["mpirun", "srun"]
LAUNCHERS: tuple[Launcher, ...] = ("mpirun", "srun")
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
HOSTFILE = "/tmp/nodeforge-hostfile"


def parse_env_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile syntax as the layer writes it: NAME="value" lines, # comments."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        env[name.strip()] = value.strip().removeprefix('"').removesuffix('"')
    return env


def launch_line(
    launcher: Launcher,
    *,
    nodes: Sequence[str],
    gpus_per_node: int,
    command: Sequence[str],
    env: Mapping[str, str],
    mpirun: str = MPIRUN,
) -> str:
    """One shell line that starts `command` once per GPU on every node, with `env` set."""
    if not nodes:
        raise ValueError("no nodes to launch on")
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(env.items()))
    program = shlex.join(command)
    ranks = gpus_per_node * len(nodes)
    if launcher == "srun":
        return (
            f"{exports} srun --nodes={len(nodes)} --ntasks={ranks} "
            f"--ntasks-per-node={gpus_per_node} --nodelist={','.join(nodes)} --mpi=pmix "
            f"--cpu-bind=none --export=ALL {program}"
        ).strip()
    hostfile = "\\n".join(f"{node} slots={gpus_per_node}" for node in nodes)
    forwarded = " ".join(f"-x {name}" for name in sorted(env))
    return (
        f"printf '{hostfile}\\n' > {HOSTFILE} && {exports} {mpirun} --allow-run-as-root "
        f"-np {ranks} -N {gpus_per_node} --hostfile {HOSTFILE} "
        "--mca pml ^ucx --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none "
        f"{forwarded} -x LD_LIBRARY_PATH {program}"
    )
