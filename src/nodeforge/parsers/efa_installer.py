"""The AWS EFA installer (`aws-efa-installer`, `efa_installer.sh`): its record and its console.

Formats read, learned from the installer script itself (`efa_installer.sh`, the copy of
2019-2022 in the public code index: its `write_package_file`, heredocs and `echo`s) and from
public captures (tests/fixtures/outputs/efa/SOURCES.md):

- the installed-packages record `/opt/amazon/efa_installed_packages` (older installers:
  `/opt/amazon/efa/installed_packages`), as `write_package_file` writes it:

      # EFA installer version: 1.22.0
      # Debug packages installed: no
      # Packages installed:
      efa-config-1.13-1.el8.noarch libfabric-aws-1.17.0-1.el8.x86_64 ...   (RPM file names)
      efa_1.16.0-1.amzn1_amd64 libfabric1-aws_1.16.0~amzn3.0_amd64 ...     (Debian file names)

  The list is one line (`${INSTALLED_PKGS[*]}`); one name per line, as the test stand-in in
  tests/mirror/efa.py writes it, reads the same. A shell prompt before `cat`'s output is skipped.
- the console output of `efa_installer.sh`: the `= Starting Amazon Elastic Fabric Adapter
  Installation Script =` / `= EFA Installer Version: X =` banner, `== Installing EFA
  dependencies ==` style steps, `Installing <package file>`, `X already installed`, `skipping X
  because of minimal installation`, `X is verified to install Y`, the `efa_test.sh` ping test
  (`Starting server...`, `Error: fi_pingpong test returned N.`), the closing box (`EFA
  installation complete.` with `- Please logout/login|reboot to complete the installation.` and
  `- Libfabric was installed in /opt/amazon/efa`, or `EFA installation is complete and an EFA
  device has been detected but a ping test failed.`), uninstall (`EFA uninstall complete.`) and
  the failures: `Error: ... exiting`, `Unsupported operating system.`, the CentOS 8 end-of-life
  notice, `The kernel header of the current kernel version cannot be installed`, the SLES
  out-of-tree module notice, `Error: unknown package found: ...`, the Ubuntu kernel without
  `ib_uverbs`, `Reboot is needed!`.
  Lines may carry a build log's prefix (Docker BuildKit `#7 5.039 `, `8.773 `, Packer
  `builder:     `, ImageBuilder `2025-10-22 15:29:46.825000<TAB>Stdout: `); the messages are
  found anywhere in the line.
"""

from __future__ import annotations

import re
from typing import Literal

from nodeforge.parsers.record import Record


class ParseError(ValueError):
    """Text that is neither the installer's package record nor its console output."""


class InstalledPackage(Record):
    """One entry of the record: a package file name split into name, version and arch."""

    raw: str
    name: str
    version: str | None = None
    arch: str | None = None


class InstalledPackages(Record):
    installer_version: str
    debug_packages: bool | None
    packages: tuple[InstalledPackage, ...]

    def package(self, name: str) -> InstalledPackage | None:
        return next((p for p in self.packages if p.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.packages)


Status = Literal["success", "test_failed", "failed", "uninstalled", "incomplete"]


class InstallerRun(Record):
    """What one `efa_installer.sh` run printed.

    `status`: `success` (the `EFA installation complete.` box), `test_failed` (installed, but
    the ping test failed: the installer exits 1), `failed` (stopped on an error, `reason` says
    which), `uninstalled`, or `incomplete` (the log ends before any of these).
    """

    installer_version: str | None
    status: Status
    reason: str | None
    reboot_required: bool
    relogin_required: bool
    efa_device_detected: bool | None
    steps: tuple[str, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    packages: tuple[str, ...]
    skipped_packages: tuple[str, ...]
    installed_paths: tuple[tuple[str, str], ...]

    @property
    def succeeded(self) -> bool:
        return self.status == "success"


# --- the installed-packages record -----------------------------------------------------------

_RECORD_VERSION = re.compile(r"#\s*EFA installer version:\s*(\S+)")
_RECORD_DEBUG = re.compile(r"#\s*Debug packages installed:\s*(yes|no)\b", re.IGNORECASE)
_PACKAGE_TOKEN = re.compile(r"^[A-Za-z0-9][\w+.~:-]*$")
_RPM_ARCH = re.compile(r"^(.+)\.(x86_64|aarch64|noarch|i686|ppc64le|s390x)$")
_RPM_NVR = re.compile(r"^(.+?)-(\d[^-]*-[^-]+)$")


def split_package(token: str) -> InstalledPackage:
    """`libfabric-aws-1.17.0-1.el8.x86_64` (RPM), `efa_1.16.0-1.amzn1_amd64` (Debian) or a name."""
    # The RPM arch goes first: `x86_64` itself holds the `_` that splits Debian names.
    if rpm := _RPM_ARCH.match(token):
        return _rpm(token, rpm.group(1), rpm.group(2))
    if "_" in token:
        name, version, *rest = token.split("_", 2)
        arch = rest[0] if rest else None
        return InstalledPackage(raw=token, name=name, version=version, arch=arch)
    return _rpm(token, token, None)


def _rpm(token: str, base: str, arch: str | None) -> InstalledPackage:
    if m := _RPM_NVR.match(base):
        return InstalledPackage(raw=token, name=m.group(1), version=m.group(2), arch=arch)
    return InstalledPackage(raw=token, name=base, arch=arch)


def parse_installed_packages(text: str) -> InstalledPackages:
    """Parse the installer's record (`cat /opt/amazon/efa_installed_packages`)."""
    lines = text.splitlines()
    found = next(
        ((i, m.group(1)) for i, line in enumerate(lines) if (m := _RECORD_VERSION.search(line))),
        None,
    )
    if found is None:
        raise ParseError("no '# EFA installer version:' line: not an EFA installer package record")
    start, version = found
    debug: bool | None = None
    packages: list[InstalledPackage] = []
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("#"):
            if m := _RECORD_DEBUG.search(line):
                debug = m.group(1).lower() == "yes"
            continue
        tokens = line.split()
        # A prompt or other text after cat's output ends the list.
        if not all(_PACKAGE_TOKEN.match(token) for token in tokens):
            break
        packages.extend(split_package(token) for token in tokens)
    return InstalledPackages(
        installer_version=version, debug_packages=debug, packages=tuple(packages)
    )


# --- the console output ----------------------------------------------------------------------

_LOG_PREFIXES = (
    re.compile(r"^#\d+ \d+(?:\.\d+)? ?"),  # docker buildx --progress=plain, with the step
    re.compile(r"^\d+\.\d+(?: |$)"),  # BuildKit lines quoted without their step
    re.compile(
        r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
        r"\s*(?:(?:stdout|stderr)\s*:)?\s*",
        re.IGNORECASE,
    ),
    re.compile(r"^\s*(?:==> )?[\w.-]+:(?:\s{2,}|$)"),  # Packer: `builder:     output`
    re.compile(r"^\s*(?:==> )?[\w-]+\.[\w.-]+: "),  # Packer 1.5+: `amazon-ebs.name: output`
)

_VERSION = re.compile(r"= EFA Installer Version: (\S+) =")
_BANNER = "Starting Amazon Elastic Fabric Adapter Installation Script"
_STEP = re.compile(r"(?:^|\s)== (.+?) ==$")
_COMPLETE = re.compile(r"(?:^|\s)EFA installation complete\.")
_PING_FAILED = re.compile(r"EFA installation is complete and an EFA device has|ping test failed")
_UNINSTALLED = re.compile(r"EFA uninstall complete\.")
_ERROR = re.compile(r"(?:^|\s)Error: (.*)$")
_WARNING = re.compile(r"(?:^|\s)(?:Warning|WARNING|warning): (.*)$")
_INSTALLING = re.compile(r"(?:^|\s)Installing (?:\S*/)?(\S+?)\.(?:rpm|deb)\b")
_VERIFIED = re.compile(r"(?:^|\s)(\S+) is verified to install (\S+)")
_ALREADY = re.compile(r"(?:^|\s)(\S+) (?:is )?already installed$")
_MINIMAL_SKIP = re.compile(r"(?:^|\s)skipping (\S+) because of minimal installation")
_INSTALLED_IN = re.compile(r"(?:^|\s)- (.+?) was installed in (\S+)$")
_RELOGIN = re.compile(r"Please logout/login to complete the installation")
_REBOOT = re.compile(
    r"Reboot is needed!|Please reboot to complete the installation"
    r"|system will be rebooted|\$ sudo reboot$"
)
_NO_DEVICE = re.compile(r"EFA device not detected, skipping test")
_TESTING = re.compile(r"== Testing EFA device ==")

# Messages after which the installer exits non-zero; each names the failure itself.
_FATAL = (
    re.compile(r"Error: .*exiting\.?$"),
    re.compile(r"Error: unknown package found: .*"),
    re.compile(r"Error: fi_pingpong test returned \d+\.?"),
    re.compile(r"Unsupported operating system\."),
    re.compile(r"EFA installer with version .* does not support .*"),
    re.compile(r"The kernel header of the current kernel version cannot be installed.*"),
    re.compile(r"kernel headers were not detected and are required to build the efa kernel.*"),
    re.compile(r"SUSE Linux Enterprise Server does not load out of tree kernel modules.*"),
    re.compile(r"An EFA kernel driver on this operating system for the Arm architecture.*"),
    re.compile(r"Your Ubuntu AMI launches with a kernel which does not include the ib_uverbs.*"),
    re.compile(r"Please cd into the installer directory\."),
    re.compile(r"Installer version is not defined in env\.sh"),
    re.compile(r"EFA uninstall encountered errors.*"),
)
# Lines that show the installer carried on, so an `Error:` before them was not fatal.
_PROGRESS = (_STEP, _INSTALLING, _VERIFIED, _ALREADY, _MINIMAL_SKIP, _COMPLETE, _PING_FAILED)
_PROGRESS_TEXT = ("Reloading EFA kernel module", "Updating boot ramdisk", "Starting server...")


def _strip_log_prefix(line: str) -> str:
    for prefix in _LOG_PREFIXES:
        if m := prefix.match(line):
            return line[m.end() :]
    return line


def _clean(line: str) -> str:
    # Terminal-wrapped captures pad the wrap with runs of spaces.
    return " ".join(line.split())


def _is_progress(line: str) -> bool:
    return any(p.search(line) for p in _PROGRESS) or any(t in line for t in _PROGRESS_TEXT)


def _failure_reason(lines: list[str]) -> str | None:
    """The installer's fatal message, else an `Error:` line it did not carry on after."""
    for line in lines:
        for pattern in _FATAL:
            if m := pattern.search(line):
                return _clean(m.group(0))
    last_progress = max((i for i, line in enumerate(lines) if _is_progress(line)), default=-1)
    trailing = [line for line in lines[last_progress + 1 :] if _ERROR.search(line)]
    return _clean(_strip_log_prefix(trailing[0])) if trailing else None


def _status(lines: list[str], reason: str | None) -> Status:
    text = "\n".join(lines)
    if _UNINSTALLED.search(text):
        return "uninstalled"
    if _PING_FAILED.search(text):
        return "test_failed"
    if any(_COMPLETE.search(line) for line in lines):
        return "success"
    return "failed" if reason is not None else "incomplete"


def _findall(pattern: re.Pattern[str], lines: list[str], group: int = 1) -> tuple[str, ...]:
    return tuple(_clean(m.group(group)) for line in lines if (m := pattern.search(line)))


def _is_installer_text(lines: list[str]) -> bool:
    text = "\n".join(lines)
    return bool(
        _BANNER in text
        or _VERSION.search(text)
        or _COMPLETE.search(text)
        or _PING_FAILED.search(text)
        or _UNINSTALLED.search(text)
        or any(p.search(text) for p in _FATAL)
        or re.search(r"== [^=\n]*EFA[^=\n]* ==", text)
    )


def parse_installer_output(output: str) -> InstallerRun:
    """Parse the console output of one `efa_installer.sh` (or `efa_test.sh`) run."""
    lines = [_strip_log_prefix(raw.rstrip()) for raw in output.splitlines()]
    if not _is_installer_text(lines):
        raise ParseError(
            "no EFA installer banner, step, completion or error message: not efa_installer.sh "
            "output"
        )
    reason = _failure_reason(lines)
    status = _status(lines, reason)
    if status == "test_failed":
        reason = reason or "EFA installed but the ping test failed"
    elif status in ("success", "uninstalled", "incomplete"):
        reason = None
    versions = _findall(_VERSION, lines)
    return InstallerRun(
        installer_version=versions[0] if versions else None,
        status=status,
        reason=reason,
        reboot_required=any(_REBOOT.search(line) for line in lines),
        relogin_required=any(_RELOGIN.search(line) for line in lines),
        efa_device_detected=_device_detected(lines),
        steps=_findall(_STEP, lines),
        errors=_findall(_ERROR, lines),
        warnings=_findall(_WARNING, lines),
        packages=_findall(_INSTALLING, lines) + _findall(_VERIFIED, lines),
        skipped_packages=_findall(_ALREADY, lines) + _findall(_MINIMAL_SKIP, lines),
        installed_paths=tuple(
            (_clean(m.group(1)), m.group(2)) for line in lines if (m := _INSTALLED_IN.search(line))
        ),
    )


def _device_detected(lines: list[str]) -> bool | None:
    if any(_NO_DEVICE.search(line) for line in lines):
        return False
    if any(_TESTING.search(line) for line in lines):
        return True
    return None
