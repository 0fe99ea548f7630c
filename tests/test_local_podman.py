"""SystemdContainer's removal on a machine where `podman rm` does not always succeed at once:
it tries again, checks that the container is gone, and says so when it is not."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeforge.local import podman


def fake_podman(monkeypatch: pytest.MonkeyPatch, *, gone_after_rm: int) -> list[list[str]]:
    """Replace `podman.run`: the container boots at once and disappears after `gone_after_rm`
    calls of `rm` (never when 0), each of which fails while it is still there."""
    calls: list[list[str]] = []
    removals = 0

    def run(args: Sequence[str], **_options: object) -> subprocess.CompletedProcess[str]:
        nonlocal removals
        calls.append(list(args))
        returncode, out, err = 0, "", ""
        if args[0] == "exec":
            out = "running\n"
        elif args[0] == "rm":
            removals += 1
            if not gone_after_rm or removals < gone_after_rm:
                returncode, err = 2, "Error: cleaning up storage: device or resource busy"
        elif args[:2] == ["container", "exists"]:
            returncode = 1 if gone_after_rm and removals >= gone_after_rm else 0
        return subprocess.CompletedProcess(list(args), returncode, out, err)

    monkeypatch.setattr(podman, "run", run)
    monkeypatch.setattr("nodeforge.local.podman.time.sleep", lambda _seconds: None)
    return calls


def removals(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if c[0] == "rm"]


def test_a_failed_rm_is_tried_again_until_the_container_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = fake_podman(monkeypatch, gone_after_rm=2)
    with podman.SystemdContainer("img", name="c1"):
        pass
    assert removals(calls) == [["rm", "-f", "-t", "5", "c1"], ["rm", "-f", "-t", "10", "c1"]]


def test_a_container_that_stays_is_an_error_naming_it_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = fake_podman(monkeypatch, gone_after_rm=0)
    with pytest.raises(podman.PodmanError) as info, podman.SystemdContainer("img", name="c1"):
        pass
    assert len(removals(calls)) == 3
    assert "device or resource busy" in str(info.value)
    assert "podman rm -f c1" in str(info.value)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, ValueError])
def test_the_error_in_flight_is_the_one_raised(
    monkeypatch: pytest.MonkeyPatch, raised: type[BaseException]
) -> None:
    """A leftover container must not hide why the build stopped (Ctrl-C included)."""
    fake_podman(monkeypatch, gone_after_rm=0)
    with pytest.raises(raised), podman.SystemdContainer("img", name="c1"):
        raise raised()


def test_read_only_mounts_reach_podman_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = fake_podman(monkeypatch, gone_after_rm=1)
    bundle = tmp_path / "ca.crt"
    with podman.SystemdContainer("img", name="c1", read_only_mounts=[(bundle, "/run/x/ca.crt")]):
        pass
    [started] = [c for c in calls if c[0] == "run"]
    assert f"--volume={bundle}:/run/x/ca.crt:ro" in started
    assert started.index(f"--volume={bundle}:/run/x/ca.crt:ro") < started.index("img")
