"""A real Slurm cluster in systemd containers, for the live-node tests: Debian's slurmctld, slurmd
and munge added to the local image (committed once per local image), one controller and compute
nodes booted from it, each with its own hostname (the Slurm node name), all on loopback ports
that were free when the cluster started (host networking: the containers share the host's).
For the same reason each container's node_exporter listens on a port of its own choosing: on
9100, every node but the first would fail it, and with it the health check after a change."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from nodeforge.local.podman import SystemdContainer, image_exists
from nodeforge.local.podman import run as podman
from tests.integration.conftest import image_id

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
CONTROLLER = "nf-slurmctl"
EXPORTER_DROP_IN = """[Service]
ExecStart=
ExecStart=/usr/bin/prometheus-node-exporter $ARGS --web.listen-address=127.0.0.1:0
"""
_STATE = "/var/lib/slurm/slurmctld"


def slurm_image(base: str) -> str:
    """The image `base` with Slurm's daemons and munge installed (not enabled: the cluster
    starts the daemon each container plays). One munge key for all: the package made it."""
    base_id = image_id(base)
    assert base_id is not None, f"{base} is not built"
    setup = hashlib.sha256(f"{PACKAGES}{EXPORTER_DROP_IN}".encode()).hexdigest()
    ref = f"localhost/nodeforge-test/slurm-node:{base_id[:12]}-{setup[:8]}"
    if image_exists(ref):
        return ref
    with SystemdContainer(base) as box:
        drop_ins = "/etc/systemd/system/prometheus-node-exporter.service.d"
        box.exec(["mkdir", "-p", drop_ins])
        box.exec(["sh", "-c", f"cat > {drop_ins}/any-port.conf <<'EOF'\n{EXPORTER_DROP_IN}EOF"])
        box.exec(["apt-get", "update", "-q"])
        box.exec(
            ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
             "--no-install-recommends", *PACKAGES]
        )  # fmt: skip
        box.exec(["systemctl", "disable", "slurmctld.service", "slurmd.service"])
        box.exec(["apt-get", "clean"])
        podman(["commit", "-q", box.name, ref])
    return ref


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def slurm_conf(nodes: list[str], ports: list[int]) -> str:
    controller_port, *node_ports = ports
    lines = [
        "ClusterName=nodeforge-test",
        f"SlurmctldHost={CONTROLLER}(127.0.0.1)",
        f"SlurmctldPort={controller_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        # containers: no cgroup tree of their own to track jobs in
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "ReturnToService=2",
        "SlurmdSpoolDir=/var/spool/slurmd",
        f"StateSaveLocation={_STATE}",
        *(
            f"NodeName={node} NodeAddr=127.0.0.1 Port={port} CPUs=1 State=UNKNOWN"
            for node, port in zip(nodes, node_ports, strict=True)
        ),
        "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    controller: SystemdContainer
    nodes: dict[str, SystemdContainer]
    """Slurm node name (the container's hostname) -> its container."""

    @property
    def names(self) -> list[str]:
        return list(self.nodes)

    def container(self, node: str) -> str:
        return self.nodes[node].name

    def state(self, node: str) -> str:
        """sinfo's state of a node, without the `*` it shows for a moment after an update
        (slurmctld pings the node again). Slurm keeps a resumed node's last reason: the state
        says whether it is drained."""
        shown = self.controller.exec(["sinfo", "-h", "-N", "-n", node, "-o", "%T"])
        return shown.stdout.strip().rstrip("*")

    def reason(self, node: str) -> str:
        return self.controller.exec(["sinfo", "-h", "-N", "-n", node, "-o", "%E"]).stdout.strip()

    def wait_for(self, state: str, nodes: list[str], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while (seen := {n: self.state(n) for n in nodes}) != dict.fromkeys(nodes, state):
            assert time.monotonic() < deadline, f"nodes not {state} in {timeout:.0f} s: {seen}"
            time.sleep(1.0)

    def submit(self, node: str, seconds: int) -> str:
        """A batch job of `sleep SECONDS` on the node, running when this returns; its id."""
        submitted = self.controller.exec(
            ["sbatch", "--parsable", "-w", node, "--wrap", f"sleep {seconds}"]
        )
        job = submitted.stdout.strip()
        self.wait_for("allocated", [node])
        return job

    def log(self) -> str:
        """What slurmctld wrote to the journal."""
        return self.controller.exec(["journalctl", "-u", "slurmctld", "--no-pager"]).stdout


@contextmanager
def slurm_cluster(image: str, nodes: list[str], folder: Path) -> Iterator[SlurmCluster]:
    """The controller and the nodes booted, every node idle; everything removed on exit."""
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(nodes, _free_ports(len(nodes) + 1)))
    cgroup = folder / "cgroup.conf"
    cgroup.write_text("CgroupPlugin=disabled\n")
    mounts = [(conf, "/etc/slurm/slurm.conf"), (cgroup, "/etc/slurm/cgroup.conf")]
    with ExitStack() as stack:
        controller = stack.enter_context(
            SystemdContainer(image, hostname=CONTROLLER, read_only_mounts=mounts)
        )
        controller.exec(["install", "-d", "-o", "slurm", _STATE])
        controller.exec(["systemctl", "start", "slurmctld.service"])
        cluster = SlurmCluster(controller, {})
        for name in nodes:
            node = SystemdContainer(image, hostname=name, read_only_mounts=mounts)
            cluster.nodes[name] = stack.enter_context(node)
            node.exec(["systemctl", "start", "slurmd.service"])
        cluster.wait_for("idle", nodes)
        yield cluster
