"""The `--hosts` of `nodeforge validate`: testinfra host URLs, checked before any check runs."""

from __future__ import annotations

from nodeforge.errors import InputError

# testinfra.backend.BACKENDS (tests/test_hosts.py keeps them equal), named here so that the CLI
# need not import testinfra to check a command line.
BACKENDS = frozenset(
    {
        "ansible",
        "chroot",
        "docker",
        "kubectl",
        "local",
        "lxc",
        "openshift",
        "paramiko",
        "podman",
        "safe-ssh",
        "salt",
        "ssh",
        "winrm",
    }
)
# backends whose URL means something without a host: this machine, every inventory host
_NO_HOST_NEEDED = frozenset({"local", "ansible"})


def check_hosts(spec: str) -> list[str]:
    """The comma-separated hosts, or InputError naming the first that testinfra cannot reach.

    testinfra reads a URL without a known backend as an SSH host name, and one it cannot parse
    as no host at all: a typo would otherwise run no check and look like a pass.
    """
    hosts = [host.strip() for host in spec.split(",")]
    for host in hosts:
        scheme, separator, rest = host.partition("://")
        if (
            not separator
            or scheme not in BACKENDS
            or (not rest.strip("/") and scheme not in _NO_HOST_NEEDED)
        ):
            raise InputError(
                f"'{host}' is not a testinfra host URL",
                field="--hosts",
                fix="name each host as podman://CONTAINER, ssh://[USER@]HOST[:PORT] or "
                "ansible://GROUP (comma-separated); backends: " + ", ".join(sorted(BACKENDS)),
            )
    return hosts
