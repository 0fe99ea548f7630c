"""What moved in the apt repositories a stack installs its pinned packages from.

For every package a layer installs at the stack's exact version (the driver's DKMS package, the
CUDA toolkit, cuDNN, NCCL, the NVIDIA container toolkit), whether the repository still serves
that version, and the newest version it serves. A repository is read as apt reads it: its
Release file, checked against its detached signature (the key at the catalog's `key_url`, held
to the pinned fingerprint; Debian's archive keyring for Debian's own archive), then the Packages
indexes the Release lists, each held to the sha256 the Release gives it.

The package names are the ones the roles install (their `vars/main.yml`): one name per pin,
the package that carries the pinned version (tests/test_apt_upstream.py holds the two to each
other).
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from nodeforge.artifacts import check_clearsigned, check_signature
from nodeforge.errors import InputError
from nodeforge.outdated import Finding, Kind
from nodeforge.target import Target

FetchBytes = Callable[[str], bytes | None]
"""GET a URL; None when the server has no such file (404)."""

DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
"""Debian's archive keys, as the debian-archive-keyring package installs them (the roles'
Signed-By for Debian's own archive)."""

_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


@dataclass(frozen=True)
class AptRepository:
    """`url` ends with '/'. No suites: a flat repository (`deb URL /`, NVIDIA's layout)."""

    url: str
    deb_arch: str
    suites: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    key_url: str | None = None
    fingerprint: str | None = None
    """The pinned primary key; None: any key of the keyring the check is given (Debian's)."""

    def release_base(self, suite: str | None) -> str:
        return self.url if suite is None else f"{self.url}dists/{suite}/"

    def index_prefixes(self) -> list[str]:
        """Where each Packages index sits, relative to its Release file."""
        if not self.suites:
            return [""]
        return [f"{component}/binary-{self.deb_arch}/" for component in self.components]


@dataclass(frozen=True)
class AptPin:
    layer: str
    package: str
    version: str
    """The version as the role asks apt for it: exact, or a pattern (595.91.07-*)."""
    repository: AptRepository


def apt_pins(target: Target, inputs: Mapping[str, Any]) -> list[AptPin]:
    """The exact-version packages of the target's apt layers, from its rendered role inputs
    (repository URLs and keys through the mirror, as the roles get them)."""
    if target.os.package_family != "apt":
        return []
    deb_arch = _DEB_ARCH[target.image.arch]
    nvidia = None
    if "nvidia_repo_url" in inputs:
        nvidia = AptRepository(
            inputs["nvidia_repo_url"],
            deb_arch,
            key_url=inputs["nvidia_repo_key_url"],
            fingerprint=inputs["nvidia_repo_gpg_fingerprint"],
        )
    pins: list[AptPin] = []
    if target.layer("nvidia_driver"):
        pins += _driver(target, inputs, deb_arch, nvidia)
    if target.layer("cuda_toolkit"):
        pins += _cuda(target, inputs, deb_arch, nvidia)
    if target.layer("nccl") and inputs.get("nccl_source") == "nvidia-repo" and nvidia:
        version = f"{inputs['nccl_version']}+cuda{inputs['nccl_cuda_version']}"
        pins.append(AptPin("nccl", "libnccl2", version, nvidia))
    if target.layer("container_runtime") and "container_runtime_toolkit_repo_url" in inputs:
        toolkit = AptRepository(
            inputs["container_runtime_toolkit_repo_url"],
            deb_arch,
            key_url=inputs["container_runtime_toolkit_key_url"],
            fingerprint=inputs["container_runtime_toolkit_gpg_fingerprint"],
        )
        version = inputs["container_runtime_toolkit_version"]
        pins.append(AptPin("container_runtime", "nvidia-container-toolkit", version, toolkit))
    return pins


def _debian_archive(target: Target, inputs: Mapping[str, Any], deb_arch: str) -> AptRepository:
    codename = target.os.codename or ""
    return AptRepository(
        inputs["nvidia_driver_distro_archive_url"].rstrip("/") + "/",
        deb_arch,
        suites=(codename, f"{codename}-updates"),
        components=("non-free", "contrib"),
    )


def _driver(
    target: Target, inputs: Mapping[str, Any], deb_arch: str, nvidia: AptRepository | None
) -> list[AptPin]:
    version, flavour = f"{inputs['nvidia_driver_version']}-*", inputs["nvidia_driver_flavour"]
    open_modules = flavour == "open"
    if inputs["nvidia_driver_source"] == "distro":
        package = "nvidia-open-kernel-dkms" if open_modules else "nvidia-kernel-dkms"
        archive = _debian_archive(target, inputs, deb_arch)
        return [AptPin("nvidia_driver", package, version, archive)]
    if nvidia is None:
        return []
    if target.os.distribution == "ubuntu":
        branch = inputs["nvidia_driver_branch"]
        package = f"nvidia-dkms-{branch}-open" if open_modules else f"nvidia-dkms-{branch}"
    else:
        package = "nvidia-kernel-open-dkms" if open_modules else "nvidia-kernel-dkms"
    return [AptPin("nvidia_driver", package, version, nvidia)]


def _cuda(
    target: Target, inputs: Mapping[str, Any], deb_arch: str, nvidia: AptRepository | None
) -> list[AptPin]:
    if inputs["cuda_toolkit_source"] == "distro":
        archive = _debian_archive(target, inputs, deb_arch)
        pattern = f"*~{inputs['cuda_toolkit_default']}-*"
        return [AptPin("cuda_toolkit", "nvidia-cuda-toolkit", pattern, archive)]
    if nvidia is None:
        return []
    pins = [
        AptPin(
            "cuda_toolkit",
            "cuda-toolkit-" + "-".join(toolkit.split(".")[:2]),
            f"{toolkit}-*",
            nvidia,
        )
        for toolkit in inputs["cuda_toolkit_toolkits"]
    ]
    cudnn = inputs.get("cuda_toolkit_cudnn")
    if cudnn:
        cuda_major = inputs["cuda_toolkit_default"].split(".")[0]
        package = f"libcudnn{cudnn.split('.')[0]}-cuda-{cuda_major}"
        pins.append(AptPin("cuda_toolkit", package, f"{cudnn}-*", nvidia))
    return pins


# ------------------------------------------------------------------ reading a repository


def http_get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


class _UnusableError(Exception):
    """The repository cannot be read or trusted: one finding for every pin on it."""

    def __init__(self, kind: Kind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def release_sha256(release: str) -> dict[str, str]:
    """Path -> sha256 of the SHA256 section of a Release file."""
    digests: dict[str, str] = {}
    section = False
    for line in release.splitlines():
        if not line.startswith(" "):
            section = line.rstrip() == "SHA256:"
            continue
        fields = line.split()
        if section and len(fields) == 3:
            digests[fields[2]] = fields[0].lower()
    return digests


def package_versions(index: str) -> dict[str, list[str]]:
    """Package -> the versions a Packages index lists."""
    found: dict[str, list[str]] = {}
    for stanza in index.split("\n\n"):
        fields = dict(
            line.split(":", 1) for line in stanza.splitlines() if ":" in line and line[0] != " "
        )
        name, version = fields.get("Package", "").strip(), fields.get("Version", "").strip()
        if name and version:
            found.setdefault(name, []).append(version)
    return found


def _verified_release(
    repository: AptRepository, base: str, fetch: FetchBytes, keyring: Path
) -> str:
    """The Release file's text, from InRelease as apt prefers it, else Release with its
    detached Release.gpg; only what the signature covers is read."""
    with tempfile.TemporaryDirectory(prefix="nf-apt-") as folder:
        signed, plaintext = Path(folder) / "InRelease", Path(folder) / "Release"
        inline = fetch(f"{base}InRelease")
        if inline is not None:
            signed.write_bytes(inline)
            signer = check_clearsigned(signed, keyring, plaintext)
        else:
            release, signature = fetch(f"{base}Release"), fetch(f"{base}Release.gpg")
            if release is None or signature is None:
                raise _UnusableError("gone", f"{base} has no InRelease, nor Release.gpg")
            plaintext.write_bytes(release)
            (Path(folder) / "Release.gpg").write_bytes(signature)
            signer = check_signature(plaintext, Path(folder) / "Release.gpg", keyring)
        wanted = repository.fingerprint
        if wanted is not None and not signer.signed_by(wanted.replace(" ", "").upper()):
            by = ", ".join(sorted(signer.primaries)) or signer.failure()
            detail = f"{base} is not signed by the pinned {wanted} ({by})"
            raise _UnusableError("unverified", detail)
        if wanted is None and not signer.primaries:
            detail = f"{base} has no valid signature from {keyring} ({signer.failure()})"
            raise _UnusableError("unverified", detail)
        return plaintext.read_text(encoding="utf-8", errors="replace")


def _index(base: str, prefix: str, digests: Mapping[str, str], fetch: FetchBytes) -> str:
    """The first compressed form of the Packages index the Release lists, checked."""
    for name, unpack in (("Packages.xz", lzma.decompress), ("Packages.gz", gzip.decompress)):
        path = f"{prefix}{name}"
        if path not in digests:
            continue
        data = fetch(f"{base}{path}")
        if data is None:
            raise _UnusableError("gone", f"{base}{path} is listed in Release but not served")
        if hashlib.sha256(data).hexdigest() != digests[path]:
            raise _UnusableError("unverified", f"{base}{path} does not match its sha256 in Release")
        return unpack(data).decode("utf-8", "replace")
    plain = f"{prefix}Packages"
    if plain in digests:
        data = fetch(f"{base}{plain}")
        if data is not None and hashlib.sha256(data).hexdigest() == digests[plain]:
            return data.decode("utf-8", "replace")
    return ""  # this component has no index for the architecture


def read_repository(
    repository: AptRepository, fetch: FetchBytes, keyring: Path
) -> dict[str, list[str]]:
    """Package -> versions over every suite and component of the repository."""
    versions: dict[str, list[str]] = {}
    for suite in repository.suites or (None,):
        base = repository.release_base(suite)
        release = _verified_release(repository, base, fetch, keyring)
        digests = release_sha256(release)
        for prefix in repository.index_prefixes():
            for name, listed in package_versions(_index(base, prefix, digests, fetch)).items():
                versions.setdefault(name, []).extend(listed)
    return versions


def _keyring(repository: AptRepository, fetch: FetchBytes, folder: Path) -> Path:
    if repository.key_url is None:
        if not DEBIAN_KEYRING.is_file():
            raise InputError(
                f"{DEBIAN_KEYRING} is needed to check Debian's archive",
                fix="install debian-archive-keyring (apt-get install debian-archive-keyring)",
            )
        return DEBIAN_KEYRING
    key = fetch(repository.key_url)
    if key is None:
        raise _UnusableError("gone", f"the key {repository.key_url} is gone")
    path = folder / "key"
    path.write_bytes(key)
    return path


def check_pins(
    pins: Iterable[AptPin], fetch: FetchBytes, keyring: Path | None = None
) -> list[Finding]:
    """Per pin: gone where no served version matches it, newer where the package has a newer
    version; per repository that cannot be read or trusted, one finding for each of its pins.
    `keyring` replaces the repositories' own keys (a test's, or an air-gapped copy)."""
    by_repository: dict[AptRepository, list[AptPin]] = {}
    for pin in pins:
        by_repository.setdefault(pin.repository, []).append(pin)
    findings: list[Finding] = []
    for repository, its_pins in by_repository.items():
        try:
            with tempfile.TemporaryDirectory(prefix="nf-apt-key-") as folder:
                trusted = keyring or _keyring(repository, fetch, Path(folder))
                versions = read_repository(repository, fetch, trusted)
        except _UnusableError as exc:
            findings += [_finding(exc.kind, p, exc.detail) for p in its_pins]
            continue
        except (OSError, urllib.error.URLError, lzma.LZMAError) as exc:
            findings += [_finding("unreachable", p, f"{repository.url}: {exc}") for p in its_pins]
            continue
        findings += [f for pin in its_pins if (f := _judge(pin, versions.get(pin.package, [])))]
    return findings


def _finding(kind: Kind, pin: AptPin, detail: str) -> Finding:
    pinned = f"{pin.package}={pin.version}"
    return Finding(kind, pin.layer, pin.repository.deb_arch, pin.package, pinned, detail, "apt")


def _judge(pin: AptPin, served: list[str]) -> Finding | None:
    matching = [v for v in served if fnmatchcase(v, pin.version)]
    where = pin.repository.url
    if not matching:
        listed = ", ".join(sorted(served, key=DebianVersion)[-3:]) or "no version at all"
        return _finding("gone", pin, f"{where} serves {listed}")
    newest = max(served, key=DebianVersion)
    if DebianVersion(newest) > DebianVersion(max(matching, key=DebianVersion)):
        detail = f"{newest} is out (the stack pins {pin.version})"
        return _finding("newer", pin, detail)
    return None


# ------------------------------------------------------------------ Debian versions


def _order(char: str) -> int:
    """dpkg's lexical order: '~' before the end, letters before everything else."""
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: alternating non-digit and digit runs."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return ac - bc
            i += i < len(a) and not a[i].isdigit()
            j += j < len(b) and not b[j].isdigit()
        start_i, start_j = i, j
        while i < len(a) and a[i].isdigit():
            i += 1
        while j < len(b) and b[j].isdigit():
            j += 1
        x, y = int(a[start_i:i] or 0), int(b[start_j:j] or 0)
        if x != y:
            return x - y
    return 0


class DebianVersion:
    """A Debian package version ([epoch:]upstream[-revision]), ordered as dpkg orders them."""

    def __init__(self, text: str) -> None:
        epoch, _, rest = text.rpartition(":") if ":" in text else ("0", "", text)
        upstream, dash, revision = rest.rpartition("-")
        if not dash:
            upstream, revision = rest, ""
        self.text = text
        self.epoch = int(epoch) if epoch.isdigit() else 0
        self.upstream = upstream
        self.revision = revision

    def _compare(self, other: DebianVersion) -> int:
        if self.epoch != other.epoch:
            return self.epoch - other.epoch
        return _compare_part(self.upstream, other.upstream) or _compare_part(
            self.revision, other.revision
        )

    def __lt__(self, other: DebianVersion) -> bool:
        return self._compare(other) < 0

    def __gt__(self, other: DebianVersion) -> bool:
        return self._compare(other) > 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DebianVersion) and self._compare(other) == 0

    # unhashable: equal versions can be spelled apart (1.0 and 1.00)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DebianVersion({self.text!r})"
