"""What the nvidia_repo role leaves in a container. On Debian 13: the stub mirror's key (checked
against the pinned fingerprint) as a keyring, a deb822 source signed by it, the driver branch
pinned, and apt reading the repository through them. On the Amazon Linux 2023 stand-in: the key
in rpm's database, a dnf repository that checks package signatures with it, the driver's
580-open module stream enabled, and dnf offering that stream's packages only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from nodeforge.local.playbook import run_in_container
from nodeforge.probes import file_text

KEYRING = "/etc/apt/keyrings/nodeforge-nvidia-cuda.asc"
SOURCES = "/etc/apt/sources.list.d/nodeforge-nvidia-cuda.sources"
PREFERENCES = "/etc/apt/preferences.d/nodeforge-90-nvidia-driver-branch"
REPO_PATH = "developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
RPM_REPO_PATH = "developer.download.nvidia.com/compute/cuda/repos/amzn2023/x86_64/"
RPM_KEY = "/etc/pki/rpm-gpg/nodeforge-nvidia-cuda.asc"
REPO = Path(__file__).resolve().parents[3]
YUM_REPO = "/etc/yum.repos.d/nodeforge-nvidia-cuda.repo"


def _amazon(host: Any) -> bool:
    return bool(host.system_info.distribution == "amzn")


@pytest.fixture
def apt_host(host: Any) -> Any:
    if _amazon(host):
        pytest.skip("apt host only")
    return host


@pytest.fixture
def dnf_host(host: Any) -> Any:
    if not _amazon(host):
        pytest.skip("dnf host (the Amazon Linux 2023 stand-in) only")
    return host


def _text(host: Any, path: str) -> str:
    text = file_text(host, path)
    assert text is not None, f"{path} is missing"
    return text


def _fields(text: str) -> dict[str, str]:
    return {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in text.splitlines())
        if value and not key.startswith("#")
    }


def test_keyring_is_the_pinned_key(apt_host: Any) -> None:
    host = apt_host
    keyring = host.file(KEYRING)
    assert keyring.mode == 0o644 and keyring.user == "root"
    # gpg read the key in a throwaway home during the converge: root's keyring never learnt it
    assert not host.file("/root/.gnupg").exists
    listing = host.run("GNUPGHOME=$(mktemp -d) gpg --batch --with-colons --show-keys %s", KEYRING)
    assert listing.rc == 0, listing.stderr
    fingerprints = [
        line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:")
    ]
    expected = os.environ.get("NODEFORGE_TEST_MIRROR_FINGERPRINT")
    assert fingerprints and fingerprints[0] == expected


def test_deb822_source_signed_by_the_keyring(apt_host: Any) -> None:
    host = apt_host
    fields = _fields(_text(host, SOURCES))
    assert fields["Types"] == "deb"
    assert fields["URIs"].endswith(REPO_PATH)
    assert fields["Suites"] == "/"
    assert fields["Architectures"] == "amd64"
    assert fields["Signed-By"] == KEYRING


def test_branch_pinned(apt_host: Any) -> None:
    host = apt_host
    fields = _fields(_text(host, PREFERENCES))
    assert fields["Pin"] == "version 580.*"
    assert fields["Pin-Priority"] == "1000"
    assert "nvidia-*" in fields["Package"].split()


def test_apt_reads_the_signed_repository(apt_host: Any) -> None:
    host = apt_host
    # the update ran against the stub repository and its signature verified (an unsigned or
    # wrongly signed source leaves no lists behind)
    policy = host.run("apt-cache policy nvidia-fabricmanager nvidia-open")
    assert policy.rc == 0, policy.stderr
    assert "Candidate: 580.95.05-1" in policy.stdout
    assert REPO_PATH.rstrip("/") in policy.stdout
    # the branch pin applies to the repository's 580 versions
    assert " 1000" in policy.stdout
    lists = host.run("ls /var/lib/apt/lists")
    # apt keeps a repository's InRelease only once its signature verified
    assert any(
        "cuda_repos_debian13_" in name and name.endswith("_InRelease")
        for name in lists.stdout.split()
    ), lists.stdout


def _key_fingerprints(host: Any, path: str) -> list[str]:
    listing = host.run("GNUPGHOME=$(mktemp -d) gpg --batch --with-colons --show-keys %s", path)
    assert listing.rc == 0, listing.stderr
    return [line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:")]


def test_rpm_trusts_the_pinned_key(dnf_host: Any) -> None:
    expected = os.environ.get("NODEFORGE_TEST_MIRROR_FINGERPRINT", "")
    assert _key_fingerprints(dnf_host, RPM_KEY)[:1] == [expected]
    # rpm names an imported key gpg-pubkey-<last 8 hex digits of its key id, lower case>
    imported = dnf_host.run("rpm -q gpg-pubkey --queryformat '%{VERSION}\\n'")
    assert imported.rc == 0, imported.stderr
    assert expected[-8:].lower() in imported.stdout.split()


def test_dnf_repository_checks_signatures(dnf_host: Any) -> None:
    lines = _text(dnf_host, YUM_REPO).splitlines()
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition("=") for line in lines)
        if value
    }
    assert lines[0] == "[nodeforge-nvidia-cuda]"
    assert fields["baseurl"].endswith(RPM_REPO_PATH)
    assert fields["gpgcheck"] == "1"
    assert fields["gpgkey"] == f"file://{RPM_KEY}"
    assert fields["enabled"] == "1"


def _enabled_streams(host: Any) -> list[str]:
    enabled = host.run("dnf --quiet module list --enabled nvidia-driver")
    assert enabled.rc == 0, enabled.stderr
    return [
        line.split()[1] for line in enabled.stdout.splitlines() if line.startswith("nvidia-driver ")
    ]


def test_driver_stream_of_the_branch_enabled(dnf_host: Any) -> None:
    assert _enabled_streams(dnf_host) == ["580-open"]


def _converge(host: Any, branch: int, flavour: str) -> None:
    mirror = os.environ.get("NODEFORGE_TEST_MIRROR")
    if not mirror:
        pytest.skip("needs the served test mirror (NODEFORGE_TEST_MIRROR)")
    repo = f"{mirror}{RPM_REPO_PATH}"
    extra = {
        "nvidia_repo_url": repo,
        "nvidia_repo_key_url": f"{repo}D42D0685.pub",
        "nvidia_repo_gpg_fingerprint": os.environ["NODEFORGE_TEST_MIRROR_FINGERPRINT"],
        "nvidia_repo_driver_branch": branch,
        "nvidia_repo_driver_flavour": flavour,
    }
    playbook = Path(__file__).resolve().parents[1] / "switch.yml"
    result = run_in_container(playbook, host.backend.name, extra, repo_root=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_another_branch_or_flavour_switches_the_stream(dnf_host: Any) -> None:
    try:
        _converge(dnf_host, 575, "proprietary")
        # the 580-open stream was reset first: one stream of the module at a time
        assert _enabled_streams(dnf_host) == ["575-dkms"]
    finally:
        _converge(dnf_host, 580, "open")
    assert _enabled_streams(dnf_host) == ["580-open"]


def test_dnf_offers_only_the_streams_packages(dnf_host: Any) -> None:
    listed = dnf_host.run(
        "dnf --quiet list --available --showduplicates %s %s",
        "kmod-nvidia-open-dkms",
        "kmod-nvidia-latest-dkms",
    )
    assert listed.rc == 0, listed.stderr
    rows = [line.split()[:2] for line in listed.stdout.splitlines() if line.startswith("kmod-")]
    # the 575 branch and the proprietary modules are filtered out with their streams
    assert rows == [["kmod-nvidia-open-dkms.noarch", "3:580.95.05-1.amzn2023"]]


def test_packages_verify_against_the_trusted_key(dnf_host: Any) -> None:
    fetched = dnf_host.run(
        "dnf --quiet download --destdir /tmp/nodeforge-rpm-check nvidia-persistenced"
    )
    assert fetched.rc == 0, fetched.stderr
    checked = dnf_host.run("rpm -K /tmp/nodeforge-rpm-check/nvidia-persistenced-*.rpm")
    dnf_host.run("rm -rf /tmp/nodeforge-rpm-check")
    assert checked.rc == 0, checked.stdout + checked.stderr
    assert "signatures OK" in checked.stdout
