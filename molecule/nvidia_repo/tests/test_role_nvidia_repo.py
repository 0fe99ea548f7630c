"""What the nvidia_repo role leaves in a container: the stub mirror's key (checked against the
pinned fingerprint) as a keyring, a deb822 source signed by it, the driver branch pinned, and
apt reading the repository through them."""

from __future__ import annotations

import os
from typing import Any

from nodeforge.probes import file_text

KEYRING = "/etc/apt/keyrings/nodeforge-nvidia-cuda.asc"
SOURCES = "/etc/apt/sources.list.d/nodeforge-nvidia-cuda.sources"
PREFERENCES = "/etc/apt/preferences.d/nodeforge-90-nvidia-driver-branch"
REPO_PATH = "developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"


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


def test_keyring_is_the_pinned_key(host: Any) -> None:
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


def test_deb822_source_signed_by_the_keyring(host: Any) -> None:
    fields = _fields(_text(host, SOURCES))
    assert fields["Types"] == "deb"
    assert fields["URIs"].endswith(REPO_PATH)
    assert fields["Suites"] == "/"
    assert fields["Architectures"] == "amd64"
    assert fields["Signed-By"] == KEYRING


def test_branch_pinned(host: Any) -> None:
    fields = _fields(_text(host, PREFERENCES))
    assert fields["Pin"] == "version 580.*"
    assert fields["Pin-Priority"] == "1000"
    assert "nvidia-*" in fields["Package"].split()


def test_apt_reads_the_signed_repository(host: Any) -> None:
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
