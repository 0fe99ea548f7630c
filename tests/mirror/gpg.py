"""A throwaway OpenPGP signing key, generated per fixture build in a temporary GNUPGHOME."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STUB_UID = "nodeforge test stub (throwaway key, never trust) <stub@nodeforge.invalid>"


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet", *args],
        input=stdin,
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"gpg {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


@dataclass(frozen=True)
class SigningKey:
    """The secret key lives in `home` only while the `throwaway_key` context is open."""

    home: Path
    fingerprint: str

    def _sign(self, mode: str, source: Path, target: Path, *, armor: bool) -> Path:
        args = ["--local-user", self.fingerprint, "--digest-algo", "SHA512", "--yes"]
        args += ["--armor"] if armor else []
        _gpg(self.home, *args, "--output", str(target), mode, str(source))
        return target

    def detach_sign(self, source: Path, target: Path, *, armor: bool = False) -> Path:
        return self._sign("--detach-sign", source, target, armor=armor)

    def clearsign(self, source: Path, target: Path) -> Path:
        return self._sign("--clearsign", source, target, armor=False)

    def export(self, target: Path, *, armor: bool) -> Path:
        """The public key: ASCII-armored, or a binary keyring that apt's signed-by accepts."""
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(
            _gpg(self.home, *(["--armor"] if armor else []), "--export", self.fingerprint)
        )
        return target


@contextmanager
def throwaway_key(uid: str = STUB_UID) -> Iterator[SigningKey]:
    """Generate an ed25519 key without passphrase; kill its agent and delete it on exit.

    The home sits in the system temp folder: gpg-agent's socket path must stay short.
    """
    home = Path(tempfile.mkdtemp(prefix="nf-gpg-"))
    home.chmod(0o700)
    try:
        _gpg(
            home,
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--quick-gen-key",
            uid,
            "ed25519",
            "sign",
            "never",
        )
        yield SigningKey(home, _fingerprint(home))
    finally:
        subprocess.run(
            ["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False
        )
        shutil.rmtree(home, ignore_errors=True)


def _fingerprint(home: Path) -> str:
    for line in _gpg(home, "--with-colons", "--list-secret-keys").decode().splitlines():
        fields = line.split(":")
        if fields[0] == "fpr":
            return fields[9]
    raise RuntimeError("gpg generated no key")


def verify_detached(public_key: Path, signature: Path, data: Path) -> str | None:
    """`gpg --verify` against only `public_key`; the signer's fingerprint, or None if invalid."""
    home = Path(tempfile.mkdtemp(prefix="nf-gpgv-"))
    home.chmod(0o700)
    try:
        _gpg(home, "--import", str(public_key))
        command = ["gpg", "--homedir", str(home), "--batch", "--status-fd", "1", "--verify"]
        result = subprocess.run(
            [*command, str(signature), str(data)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            return None
        for line in result.stdout.splitlines():
            if line.startswith("[GNUPG:] VALIDSIG "):
                return line.split()[2]
        return None
    finally:
        subprocess.run(
            ["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False
        )
        shutil.rmtree(home, ignore_errors=True)
