"""Probes read the node's own tools; here with canned command output."""

from __future__ import annotations

from dataclasses import dataclass

from nodeforge.probes import held_packages


@dataclass
class _Result:
    rc: int
    stdout: str
    stderr: str = ""


class _Host:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, command: str, *args: str) -> _Result:
        assert (command, args) == ("dpkg --get-selections", ())
        return _Result(0, self.stdout)


def test_held_packages_drop_the_architecture() -> None:
    selections = (
        "libcuda1:amd64\t\t\t\t\thold\n"
        "linux-image-cloud-amd64\t\t\t\thold\n"
        "nvidia-smi\t\t\t\t\tinstall\n"
    )
    assert held_packages(_Host(selections)) == {"libcuda1", "linux-image-cloud-amd64"}
