"""containers.podman's podman connection with Ansible's pipelining.

The collection turns pipelining off because `podman exec` without `--interactive` gives the
command no standard input, which is where a pipelined module arrives. With it on the calls that
send input, each task runs its module in one `podman exec` instead of four (make a temporary
directory, copy the module, run it, remove the directory): a local build of local-debian13
converges and re-converges about a third faster. The rest is the collection's plugin.

Used by the local builds (nodeforge.local) and by every Molecule scenario
(.config/molecule/config.yml, provisioner.connection_options); ansible.cfg puts this folder on
Ansible's connection plugin path.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.containers.podman.plugins.connection import podman

# Ansible reads a plugin's options from this literal (it parses the file, it does not run it):
# the collection's plugin reads the same four.
DOCUMENTATION = """
    name: nodeforge_podman
    short_description: Run tasks in a running podman container, with pipelining
    description:
      - containers.podman.podman with Ansible's pipelining, through podman exec --interactive.
    options:
      remote_addr:
        description: The name or ID of the container.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: The user (name or UID) that runs the commands in the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments for every podman command.
        default: ''
        ini:
          - section: defaults
            key: podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
        vars:
          - name: ansible_podman_extra_args
      podman_executable:
        description: The podman executable.
        default: podman
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
        vars:
          - name: ansible_podman_executable
"""


class Connection(podman.Connection):  # type: ignore[misc]
    transport = "nodeforge_podman"
    has_pipelining = True

    def _podman(
        self,
        cmd: str | list[str],
        cmd_args: list[Any] | None = None,
        in_data: bytes | None = None,
        use_container_id: bool = True,
    ) -> tuple[int, bytes, bytes]:
        if in_data is not None and isinstance(cmd, list) and cmd[:1] == ["exec"]:
            cmd = ["exec", "--interactive", *cmd[1:]]
        result: tuple[int, bytes, bytes] = super()._podman(cmd, cmd_args, in_data, use_container_id)
        return result
