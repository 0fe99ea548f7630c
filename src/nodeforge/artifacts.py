"""Preflight: download the artifacts a build needs and verify them before anything is installed.

A tampered download or a dead mirror must stop a build in seconds, with a message naming the
artifact, rather than an hour later inside an Ansible task on a half-built image.

Only the standard library fetches (urllib), so that the preflight adds no dependency; gpg does
the signature check, in a throwaway GNUPGHOME that holds only the key the caller hands over.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nodeforge.catalog.models import Artifact
from nodeforge.errors import InputError
from nodeforge.target import Target

Progress = Callable[[str], None]

BACKOFF_S = 0.5
"""First pause between attempts; doubles after each. A module constant so tests can shorten it."""

_CHUNK = 1 << 20
_MIRROR_FIX = "start the mirror or check the mirror: setting in --vars FILE"
_SCHEMES = ("http", "https")


class _TransientError(Exception):
    """Worth another attempt: the connection failed, timed out, or the server answered 5xx."""


class _HttpRefusedError(Exception):
    """The server answered and said no (404, 403...): asking again will not change that."""


# ------------------------------------------------------------------ which artifacts


def artifacts_for(target: Target) -> dict[str, Artifact]:
    """The stack's artifacts that the image's enabled layers download, by artifact name."""
    stack = target.stack
    ofi = stack.aws_ofi_nccl
    # The installer-bundled aws-ofi-nccl downloads nothing of its own, even if an artifact is
    # named: only a source build fetches the plugin's tarball.
    enroot = stack.enroot
    refs: dict[str, list[str | None]] = {
        "efa": [stack.efa.artifact if stack.efa else None],
        "gdrcopy": [stack.gdrcopy.artifact if stack.gdrcopy else None],
        "aws_ofi_nccl": [ofi.artifact if ofi and ofi.source == "source" else None],
        "nccl": [stack.nccl.tests_artifact if stack.nccl else None],
        "enroot": [
            *(enroot.packages.get(target.image.arch, []) if enroot else []),
            enroot.pyxis.artifact if enroot and enroot.pyxis else None,
        ],
    }
    return {
        ref: stack.artifacts[ref]
        for layer, layer_refs in refs.items()
        for ref in layer_refs
        if ref is not None and target.layer(layer)
    }


# ------------------------------------------------------------------ mirror


def fetch_key(
    name: str, url: str, dest_dir: Path, *, retries: int = 3, timeout: float = 30
) -> Path:
    """The public key of an artifact's signer, as `dest_dir/<name>.key`.

    Downloaded as it is: it is trusted only through the fingerprint the stack pins, which the
    signature check compares against.
    """
    _require_http(url, f"artifact '{name}' key")
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{name}.key"
    with _Part(dest) as part:
        _download(name, url, part, retries=retries, timeout=timeout, progress=None)
        _install(part, dest)
    return dest


def check_mirror(url: str, timeout: float = 5) -> None:
    """Raise InputError unless something answers at `url`; any HTTP status counts as up."""
    _require_http(url, f"mirror {url}")
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        exc.close()  # an error status is still an answer: the mirror is up
        return
    except (OSError, http.client.HTTPException) as exc:
        raise InputError(
            f"mirror {url} does not answer ({_reason(exc)})", fix=_MIRROR_FIX
        ) from None


# ------------------------------------------------------------------ fetch and verify


def fetch_and_verify(
    name: str,
    artifact: Artifact,
    url: str,
    signature_url: str | None,
    dest_dir: Path,
    *,
    keyring: Path | None = None,
    retries: int = 3,
    timeout: float = 30,
    progress: Progress | None = None,
) -> Path:
    """Download `url` (the artifact's URL, resolved for the target and mirror) into `dest_dir`
    and verify it against the artifact's sha256 and/or pinned signing key.

    `retries` counts attempts after the first. A file already in place that still verifies is
    reused without a request. Returns `dest_dir/<basename of url>`; raises InputError naming the
    artifact on any failure, leaving nothing unverified in `dest_dir`.
    """
    _require_http(url, f"artifact '{name}'")
    dest = dest_dir / _basename(name, url)
    # Checked before any download: a missing key should not cost a transfer to find out.
    pin = _signature_pin(name, artifact, signature_url, keyring)
    if _reusable(dest, artifact, pin):
        return dest
    # A stale or corrupt copy goes now, so that the final name never holds an unverified file,
    # whatever happens to the download.
    dest.unlink(missing_ok=True)
    _signature_of(dest).unlink(missing_ok=True)

    def fetch(source: str, part: Path) -> str:
        return _download(name, source, part, retries=retries, timeout=timeout, progress=progress)

    dest_dir.mkdir(parents=True, exist_ok=True)
    with _Part(dest) as part:
        _say(progress, f"downloading {name} from {url}")
        _check_sha256(name, artifact, url, fetch(url, part))
        if pin is not None:
            with _Part(_signature_of(dest)) as signature:
                fetch(pin.url, signature)
                _verify_signature(name, url, part, signature, pin)
                # The signature lands first: a data file in place always has its signature.
                _install(signature, _signature_of(dest))
        _install(part, dest)
    _say(progress, f"verified {name}: {dest}")
    return dest


@dataclass(frozen=True)
class _SignaturePin:
    """A signed artifact's check: its pinned primary key, the public key file, the signature."""

    fingerprint: str
    keyring: Path
    url: str


def _signature_pin(
    name: str, artifact: Artifact, signature_url: str | None, keyring: Path | None
) -> _SignaturePin | None:
    if artifact.gpg_fingerprint is None:
        return None
    if signature_url is None:
        raise InputError(
            f"artifact '{name}' pins a gpg_fingerprint but has no signature_url",
            field=f"artifacts.{name}.signature_url",
            fix="add the URL of the detached signature to the artifact in the stack",
        )
    _require_http(signature_url, f"artifact '{name}'")
    return _SignaturePin(artifact.gpg_fingerprint, _require_keyring(name, keyring), signature_url)


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def _require_http(url: str, what: str) -> None:
    # s3:// URLs are valid in the catalog but urllib cannot fetch them; a mirror rewrites them.
    if urlsplit(url).scheme not in _SCHEMES:
        raise InputError(
            f"{what}: cannot download {url} (only http:// and https:// are fetched)",
            fix="serve it from a mirror: set mirror: in --vars FILE",
        )


def _basename(name: str, url: str) -> str:
    base = urlsplit(url).path.rstrip("/").rpartition("/")[2]
    if base in ("", ".", ".."):
        raise InputError(
            f"artifact '{name}': {url} names no file",
            field=f"artifacts.{name}.url",
            fix="point the url at the file itself",
        )
    return base


def _require_keyring(name: str, keyring: Path | None) -> Path:
    if keyring is None:
        raise InputError(
            f"artifact '{name}' is verified by its signature, and the signer's public key is "
            "needed to check it",
            fix="pass the exported public key of the pinned gpg_fingerprint as the keyring",
        )
    if not keyring.is_file():
        raise InputError(
            f"artifact '{name}': the public key file does not exist",
            file=keyring,
            fix="export the signer's public key there (gpg --export --armor FINGERPRINT)",
        )
    return keyring


def _signature_of(dest: Path) -> Path:
    """Where a verified signature is kept, so that a reused file can be checked offline."""
    return dest.with_name(dest.name + ".sig")


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _reusable(dest: Path, artifact: Artifact, pin: _SignaturePin | None) -> bool:
    """A file in place still verifies: by sha256 when pinned, else by its kept signature.

    An artifact with neither is always fetched again: nothing could tell a stale copy.
    """
    if not dest.is_file():
        return False
    if artifact.sha256 != "unknown":
        return _sha256_of(dest) == artifact.sha256
    signature = _signature_of(dest)
    if pin is None or not signature.is_file():
        return False
    return check_signature(dest, signature, pin.keyring).signed_by(pin.fingerprint)


class _Part:
    """A temporary file beside `dest` (same file system, so the final rename is atomic),
    removed on exit unless it was installed."""

    def __init__(self, dest: Path) -> None:
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
        self.path = Path(name)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc_info: object) -> None:
        self.path.unlink(missing_ok=True)


def _install(part: Path, dest: Path) -> None:
    # mkstemp creates 0600; an artifact is a public download that Ansible later copies.
    part.chmod(0o644)
    os.replace(part, dest)


def _check_sha256(name: str, artifact: Artifact, url: str, digest: str) -> None:
    if artifact.sha256 in ("unknown", digest):
        return
    raise InputError(
        f"artifact '{name}': sha256 mismatch (expected {artifact.sha256}, got {digest}) from {url}",
        fix="the download is not the pinned file: if the mirror serves it, refresh the mirror "
        "from upstream; if upstream replaced the file, find out why before changing the sha256 "
        "in the stack",
    )


# ------------------------------------------------------------------ download


def _download(
    name: str, url: str, part: Path, *, retries: int, timeout: float, progress: Progress | None
) -> str:
    """Fetch `url` into `part`, with retries; the sha256 of what arrived."""
    attempts = max(retries, 0) + 1
    for attempt in range(1, attempts + 1):
        try:
            return _attempt(url, part, timeout)
        except _HttpRefusedError as exc:
            raise InputError(
                f"artifact '{name}': cannot download {url} ({exc})",
                fix="check that the mirror holds this file, or the artifact's url in the stack",
            ) from None
        except _TransientError as exc:
            if attempt == attempts:
                raise InputError(
                    f"artifact '{name}': cannot download {url} ({exc})", fix=_MIRROR_FIX
                ) from None
            pause = BACKOFF_S * 2 ** (attempt - 1)
            _say(progress, f"{name}: {exc}; retrying in {pause:g} s ({attempt}/{attempts - 1})")
            time.sleep(pause)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _attempt(url: str, part: Path, timeout: float) -> str:
    digest = hashlib.sha256()
    # Truncate: a failed attempt may have left part of the file.
    with _open(url, timeout) as response, part.open("wb") as out:
        while chunk := _read(response):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _open(url: str, timeout: float) -> Any:
    """urlopen, with its failures sorted into worth-retrying and final. The response is a
    context manager that closes the connection."""
    try:
        return urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        status = f"HTTP {exc.code} {exc.reason}"
        if exc.code >= 500:
            raise _TransientError(status) from None
        raise _HttpRefusedError(status) from None
    except (OSError, http.client.HTTPException) as exc:
        raise _TransientError(_reason(exc)) from None


def _read(response: Any) -> bytes:
    # Reads are wrapped apart from writes: a full disk is not a network fault to retry.
    try:
        chunk: bytes = response.read(_CHUNK)
    except (OSError, http.client.HTTPException) as exc:
        raise _TransientError(_reason(exc)) from None
    return chunk


def _reason(exc: BaseException) -> str:
    """'Connection refused', 'timed out', not '<urlopen error [Errno 111] ...>'."""
    if isinstance(exc, urllib.error.URLError):
        if isinstance(exc.reason, str):
            return exc.reason
        exc = exc.reason
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, http.client.IncompleteRead):
        return "connection closed mid-transfer"
    return str(exc) or type(exc).__name__


# ------------------------------------------------------------------ signature


class Signer:
    """What gpg said about a detached signature: the status lines, and the primary keys of the
    valid signatures in it (a signature file may hold several)."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.primaries: set[str] = set()
        for line in status.splitlines():
            fields = line.split()
            if fields[:2] == ["[GNUPG:]", "VALIDSIG"] and len(fields) > 2:
                # VALIDSIG <sig-key fpr> ... <primary-key fpr>: the pin names the primary key,
                # while the signature may come from one of its subkeys.
                self.primaries.add((fields[11] if len(fields) > 11 else fields[2]).upper())

    def signed_by(self, fingerprint: str) -> bool:
        return fingerprint in self.primaries

    def failure(self) -> str:
        for keyword in ("BADSIG", "EXPKEYSIG", "REVKEYSIG", "NO_PUBKEY", "ERRSIG", "NODATA"):
            if f"[GNUPG:] {keyword}" in self.status:
                return keyword
        return "no valid signature"


def _verify_signature(name: str, url: str, data: Path, signature: Path, pin: _SignaturePin) -> None:
    signer = check_signature(data, signature, pin.keyring)
    if signer.signed_by(pin.fingerprint):
        return
    if not signer.primaries:
        problem = f"signature check failed ({signer.failure()})"
    else:
        keys = ", ".join(sorted(signer.primaries))
        problem = f"signed by key {keys}, not the pinned {pin.fingerprint}"
    raise InputError(
        f"artifact '{name}': {problem} for {url}",
        fix="the download or its signature is not the publisher's: refresh the mirror from "
        "upstream, and check that the keyring holds the key of the pinned gpg_fingerprint",
    )


def check_signature(data: Path, signature: Path, keyring: Path) -> Signer:
    """gpg's verdict on a detached signature of `data`, trusting `keyring` alone."""
    return _gpg_verdict(keyring, ["--verify", str(signature), str(data)])


def check_clearsigned(message: Path, keyring: Path, plaintext: Path) -> Signer:
    """gpg's verdict on a clearsigned message (apt's InRelease); what the signature covers,
    and nothing around it, goes to `plaintext`."""
    return _gpg_verdict(keyring, ["--yes", "--output", str(plaintext), "--decrypt", str(message)])


def _gpg_verdict(keyring: Path, command: list[str]) -> Signer:
    gpg = shutil.which("gpg")
    if gpg is None:
        raise InputError(
            "gpg is needed to verify signed artifacts", fix="install gnupg (apt-get install gpg)"
        )
    # A fresh home holding only `keyring`: the user's own keys must not vouch for a download.
    # It sits in the system temp folder because gpg-agent's socket path must stay short.
    home = Path(tempfile.mkdtemp(prefix="nf-verify-"))
    try:
        base = [gpg, "--homedir", str(home), "--batch", "--no-tty", "--quiet"]
        imported = _run([*base, "--import", str(keyring)])
        if imported.returncode != 0:
            raise InputError(
                f"gpg cannot read the public key: {imported.stderr.strip()}",
                file=keyring,
                fix="pass a key exported with gpg --export (armored or binary)",
            )
        verify = _run([*base, "--status-fd", "1", *command])
        # The exit status is not the verdict: only VALIDSIG from the pinned key counts.
        return Signer(verify.stdout)
    finally:
        gpgconf = shutil.which("gpgconf")
        if gpgconf is not None:
            _run([gpgconf, "--homedir", str(home), "--kill", "all"])
        shutil.rmtree(home, ignore_errors=True)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LC_ALL": "C"}
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60, env=env)
