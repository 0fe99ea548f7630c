"""Check a detached signature with gpgv against one ASCII-armored public key.

gpgv is small and on (or one package away from) every Debian and Ubuntu node, gpg is not, and
gpgv reads only binary keyrings: the armor is undone here instead of installing gpg for one
check. Prints gpgv's
status lines ([GNUPG:] VALIDSIG <fingerprint> ...) for the caller to judge.

Usage: verify_signature.py KEY.asc SIGNATURE DATA
"""

import base64
import binascii
import subprocess
import sys
import tempfile

BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
END = "-----END PGP PUBLIC KEY BLOCK-----"


def dearmor(text: str) -> bytes:
    if BEGIN not in text or END not in text:
        raise ValueError("not an ASCII-armored public key")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    # Armor headers ("Comment: ...") hold a colon, base64 never does; "=XXXX" is the CRC24 line.
    lines = [
        line.strip()
        for line in body.splitlines()
        if line.strip() and ":" not in line and not line.strip().startswith("=")
    ]
    return base64.b64decode("".join(lines), validate=True)


def main() -> int:
    key, signature, data = sys.argv[1:4]
    try:
        with open(key, encoding="ascii", errors="replace") as handle:
            keyring = dearmor(handle.read())
    except (OSError, ValueError, binascii.Error) as exc:
        print(f"unusable key {key}: {exc}")
        return 2
    with tempfile.NamedTemporaryFile(suffix=".gpg") as ring:
        ring.write(keyring)
        ring.flush()
        try:
            checked = subprocess.run(
                ["gpgv", "--status-fd", "1", "--keyring", ring.name, signature, data],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
        except OSError as exc:
            print(f"cannot run gpgv: {exc}")
            return 2
    print(checked.stdout, end="")
    return checked.returncode


if __name__ == "__main__":
    sys.exit(main())
