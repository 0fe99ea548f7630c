"""What the enroot role leaves in a container (image mode): enroot and enroot+caps at the
release, held, the capabilities the +caps package grants; the settings drop-in beside the
untouched packaged enroot.conf; the state folders, and the runtime folder made by tmpfiles.d;
pyxis built against Debian 12's Slurm and loaded by it (srun --help lists its options); the
build record; no download or build folder. And inputs that must stop the role (no Slurm headers,
a package whose sha256 does not match) before it changes a thing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeforge.local.playbook import expect_failure, run_in_container
from nodeforge.probes import file_text

REPO = Path(__file__).resolve().parents[3]
VERSION = "4.2.1"
PACKAGES = ["enroot", "enroot+caps"]
RELEASE = f"github.com/NVIDIA/enroot/releases/download/v{VERSION}"
PYXIS = "0.24.0"
TARBALL = f"github.com/NVIDIA/pyxis/archive/refs/tags/v{PYXIS}.tar.gz"
PLUGIN = "/usr/local/lib/slurm/spank_pyxis.so"
PYXIS_CONF = "/etc/slurm/plugstack.conf.d/pyxis.conf"
RECORD = "/usr/local/share/pyxis/nodeforge-build.json"
DROPIN = "/etc/enroot/enroot.conf.d/50-nodeforge.conf"
WORK_DIR = "/var/tmp/nodeforge-enroot"


def _dpkg(host: Any) -> dict[str, str]:
    shown = host.run(
        "dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Status}\\n' %s %s",
        *PACKAGES,
    )
    return {line.split()[0]: " ".join(line.split()[1:]) for line in shown.stdout.splitlines()}


def test_packages_installed_at_the_release(host: Any) -> None:
    assert _dpkg(host) == dict.fromkeys(PACKAGES, f"{VERSION}-1 installed")


def test_packages_held(host: Any) -> None:
    held = host.run("apt-mark showhold").stdout.split()
    assert set(PACKAGES) <= set(held), held


def test_dependencies_came_from_the_archive(host: Any) -> None:
    for dependency in ("jq", "squashfs-tools", "zstd"):
        assert host.package(dependency).is_installed, dependency


def test_enroot_answers_the_release(host: Any) -> None:
    assert host.check_output("enroot version").strip() == VERSION


def test_caps_package_granted_its_capabilities(host: Any) -> None:
    caps = host.run("getcap /usr/bin/enroot-mksquashovlfs /usr/bin/enroot-aufs2ovlfs")
    assert caps.rc == 0, caps.stderr
    assert "enroot-mksquashovlfs cap_sys_admin=ep" in caps.stdout, caps.stdout
    assert "enroot-aufs2ovlfs cap_sys_admin,cap_mknod=ep" in caps.stdout, caps.stdout


def test_settings_drop_in(host: Any) -> None:
    text = file_text(host, DROPIN)
    assert text is not None, f"{DROPIN} missing"
    settings = dict(
        line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert settings["ENROOT_RUNTIME_PATH"] == "/run/enroot/user-$(id -u)"
    assert settings["ENROOT_DATA_PATH"] == "/var/enroot/data/user-$(id -u)"
    assert settings["ENROOT_CACHE_PATH"] == "/var/enroot/cache/group-$(id -g)"
    assert settings["ENROOT_TEMP_PATH"] == "/var/enroot/tmp"


def test_packaged_configuration_untouched(host: Any) -> None:
    # dpkg --verify names every packaged file whose content changed since it was unpacked
    verify = host.run("dpkg --verify enroot")
    assert verify.rc == 0 and verify.stdout.strip() == "", verify.stdout


@pytest.mark.parametrize("folder", ["/var/enroot", "/var/enroot/cache", "/var/enroot/data"])
def test_state_folders_shared_with_the_sticky_bit(host: Any, folder: str) -> None:
    assert host.file(folder).is_directory
    assert host.file(folder).mode == 0o1777


def test_runtime_folder_made_at_boot(host: Any) -> None:
    # What systemd-tmpfiles-setup.service does at boot, for this one file.
    host.run("rm -rf /run/enroot")
    made = host.run("systemd-tmpfiles --create /etc/tmpfiles.d/nodeforge-enroot.conf")
    assert made.rc == 0, made.stderr
    assert host.file("/run/enroot").is_directory
    assert host.file("/run/enroot").mode == 0o1777


def test_plugin_installed_and_configured(host: Any) -> None:
    assert host.file(PLUGIN).is_file
    conf = [
        line
        for line in (file_text(host, PYXIS_CONF) or "").splitlines()
        if line and not line.startswith("#")
    ]
    assert conf == [f"required {PLUGIN} runtime_path=/run/pyxis"]
    plugstack = file_text(host, "/etc/slurm/plugstack.conf") or ""
    assert "include /etc/slurm/plugstack.conf.d/*.conf" in plugstack.splitlines()


def test_slurm_loads_pyxis(host: Any) -> None:
    help_text = host.run("srun --help")
    assert help_text.rc == 0, help_text.stderr
    assert "--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH" in help_text.stdout
    assert "[pyxis] the image to use for the container" in help_text.stdout


def test_record_names_what_the_build_used(host: Any) -> None:
    record = json.loads(file_text(host, RECORD) or "{}")
    slurm = host.run("dpkg-query --show --showformat='${Version}' libslurm-dev").stdout
    assert record["version"] == PYXIS
    assert record["slurm_include_dir"] == "/usr/include"
    # Debian's 22.05.8-4+deb12u3 is Slurm 22.05.8 (slurm_version.h: 0x160508)
    assert slurm.startswith(record["slurm"] + "-"), (record, slurm)
    served = os.environ.get("NODEFORGE_TEST_MIRROR_SHA256")
    if served:
        assert record["sha256"] == json.loads(served)[TARBALL]


def test_no_download_or_build_folder_left(host: Any) -> None:
    assert not host.file(WORK_DIR).exists


def _deb(name: str) -> str:
    return f"{RELEASE}/{name}_{VERSION}-1_amd64.deb"


def _role_vars(deb_sha256: str | None = None, **role_vars: Any) -> dict[str, Any]:
    """The role's inputs as the converge's, from the served mirror, with `role_vars` on top;
    `deb_sha256` replaces the served sha256 of every package."""
    mirror = os.environ.get("NODEFORGE_TEST_MIRROR")
    served = os.environ.get("NODEFORGE_TEST_MIRROR_SHA256")
    if not mirror or not served:
        pytest.skip("needs the served test mirror (NODEFORGE_TEST_MIRROR)")
    sha256 = json.loads(served)
    return {
        "enroot_version": VERSION,
        "enroot_packages": [
            {"url": f"{mirror}{_deb(name)}", "sha256": deb_sha256 or sha256[_deb(name)]}
            for name in PACKAGES
        ],
        "enroot_pyxis_version": PYXIS,
        "enroot_pyxis_url": f"{mirror}{TARBALL}",
        "enroot_pyxis_sha256": sha256[TARBALL],
        "enroot_slurm_include_dir": "/usr/include",
        "enroot_slurm_plugstack_conf": "/etc/slurm/plugstack.conf",
        "enroot_slurm_srun": "/usr/bin/srun",
        **role_vars,
    }


# negative.yml applies the role alone, with the variables given on the command line.
ROLE_PLAYBOOK = Path(__file__).resolve().parents[1] / "negative.yml"


def _negative(host: Any, deb_sha256: str | None = None, **role_vars: Any) -> str:
    """Run the role against the scenario's container; it must fail. Its output."""
    extra = _role_vars(deb_sha256, **role_vars)
    return expect_failure(ROLE_PLAYBOOK, host.backend.name, extra, repo_root=REPO)


def _installed(host: Any) -> dict[str, str]:
    """What a failed run must leave exactly as it was."""
    return {
        "dpkg": host.run(
            "dpkg-query --show --showformat='${Version} ${db-fsys:Last-Modified}\\n' %s %s",
            *PACKAGES,
        ).stdout,
        "plugin": host.run("sha256sum %s", PLUGIN).stdout,
        "record": file_text(host, RECORD) or "",
        "pyxis.conf": file_text(host, PYXIS_CONF) or "",
    }


def test_missing_slurm_headers_stop_in_preflight(host: Any) -> None:
    before = _installed(host)
    output = _negative(host, enroot_slurm_include_dir="/opt/slurm/include")
    assert "/opt/slurm/include/slurm/spank.h is not there" in output, output
    assert "set enroot_pyxis to false" in output, output
    assert "Install | download" not in output  # before anything is fetched
    assert _installed(host) == before


def test_checksum_mismatch_stops_before_apt(host: Any) -> None:
    before = _installed(host)
    output = _negative(host, deb_sha256="0" * 64, enroot_force_reinstall=True)
    assert "did not match" in output and "0" * 64 in output, output
    assert "Install | each package" not in output  # apt never saw the file
    assert _installed(host) == before
    assert not host.file(WORK_DIR).exists


def _unpacked(host: Any) -> list[tuple[str, int]]:
    """Each package's version and when dpkg last unpacked it (epoch seconds)."""
    listed = host.run(
        "dpkg-query --show --showformat='${Version} ${db-fsys:Last-Modified}\\n' %s %s", *PACKAGES
    )
    return [(version, int(when)) for version, when in map(str.split, listed.stdout.splitlines())]


def test_force_reinstall_reinstalls_at_the_same_version(host: Any) -> None:
    before = _unpacked(host)
    run = run_in_container(
        ROLE_PLAYBOOK,
        host.backend.name,
        _role_vars(enroot_force_reinstall=True),
        repo_root=REPO,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    after = _unpacked(host)
    assert [v for v, _ in after] == [v for v, _ in before] == [VERSION + "-1"] * len(PACKAGES)
    # apt left them as they were; dpkg unpacked each again
    assert all(a > b for (_, a), (_, b) in zip(after, before, strict=True)), (before, after)
