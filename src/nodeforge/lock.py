"""Locks of the python_ml layer's environments: requirements files in pip's hash-checking mode.

One lock per stack, environment and architecture, installed with
`pip install --require-hashes --no-deps -r LOCK`. A header of `# key: value` comment lines
records what it was locked for; pip reads them as comments, the python_ml role's preflight and
the validation suite read them as facts:

    # nodeforge lock 1: written by `nodeforge lock`, do not edit by hand
    # stack: hopper-2026.11
    # environment: train
    # python: 3.11
    # platform: manylinux_2_34_x86_64
    # torch-variant: cpu
    # index-url: https://pypi.org/simple
    # find-links: /opt/wheels
    # locked: 2026-12-03T10:00:00Z
    # overrides: python 3.11 (stack 3.12), torch-variant cpu (stack cu126)
    accelerate==1.16.0 \\
        --hash=sha256:180885b6...

`lock_environment` resolves with pip itself (`pip install --dry-run --report`), for the target's
interpreter and platform rather than the host's, and takes each file's sha256 from the report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodeforge.catalog.arch import Arch
from nodeforge.catalog.compat import Compat
from nodeforge.catalog.models import Framework, Frameworks, Stack
from nodeforge.errors import InputError

FORMAT = 1
LOCKED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""The `# locked:` time, UTC."""
MAGIC = f"# nodeforge lock {FORMAT}: written by `nodeforge lock`, do not edit by hand"

FRAMEWORK_DISTRIBUTIONS: dict[Framework, tuple[str, str]] = {
    "pytorch": ("torch", "torch"),
    "megatron_core": ("megatron-core", "megatron.core"),
    "transformers": ("transformers", "transformers"),
    "accelerate": ("accelerate", "accelerate"),
    "vllm": ("vllm", "vllm"),
    "sglang": ("sglang", "sglang"),
}
"""Each framework's distribution name (in the lock) and the module it is imported as."""

PYPI = "https://pypi.org/simple"
PYTORCH_INDEX = "https://download.pytorch.org/whl"
# The oldest glibc among the supported OS entries (Amazon Linux 2023: 2.34); Debian 12 has
# 2.36 and Ubuntu 24.04 2.39, so a wheel for 2.34 runs everywhere the stack is built.
DEFAULT_GLIBC = (2, 34)
_WHEEL_ARCH: dict[Arch, str] = {"x86_64": "x86_64", "arm64": "aarch64"}
# pip option variables that change what resolves; the lock must not depend on the host's pip
# configuration, so these are dropped (transport settings such as PIP_CERT stay).
_RESOLUTION_ENV = re.compile(
    r"^PIP_(INDEX_URL|EXTRA_INDEX_URL|FIND_LINKS|NO_INDEX|CONSTRAINT|REQUIREMENT|PRE|"
    r"ONLY_BINARY|NO_BINARY|PREFER_BINARY|UPGRADE|USER|TARGET|PREFIX|CONFIG_FILE)$"
)
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")
_HEADER = re.compile(r"^# ([a-z-]+): (.*)$")
_MANYLINUX = re.compile(r"^manylinux_(2)_(\d+)_(\w+)$")


def canonical(name: str) -> str:
    """PEP 503 normalized project name: how pip and importlib.metadata compare names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def variant_cuda(variant: str) -> str | None:
    """torch.version.cuda of a wheel variant: cu126 -> 12.6, cu130 -> 13.0, cpu -> None."""
    if variant == "cpu":
        return None
    digits = variant.removeprefix("cu")
    return f"{int(digits[:-1])}.{digits[-1]}"


def wheel_machine(arch: Arch) -> str:
    """The machine part of a wheel's platform tag: x86_64, aarch64."""
    return _WHEEL_ARCH[arch]


def default_platform(arch: Arch) -> str:
    return f"manylinux_{DEFAULT_GLIBC[0]}_{DEFAULT_GLIBC[1]}_{wheel_machine(arch)}"


def expand_platform(platform: str) -> list[str]:
    """The wheel tags a system of this platform runs, newest first: manylinux_2_34_x86_64
    stands for every manylinux tag down to manylinux2014; other tags stand for themselves.

    pip does not expand a `--platform manylinux_2_X` to the older tags itself, so without the
    list it would miss every wheel built for an older glibc (most of PyPI).
    """
    match = _MANYLINUX.match(platform)
    if match is None:
        return [platform]
    major, newest, machine = int(match[1]), int(match[2]), match[3]
    tags = [f"manylinux_{major}_{minor}_{machine}" for minor in range(newest, 16, -1)]
    return [*tags, f"manylinux2014_{machine}"]


class LockHeader(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stack: str
    environment: str
    python: str = Field(pattern=r"^3\.\d+$")
    platform: str
    torch_variant: str | None = Field(default=None, pattern=r"^(cu\d{3}|cpu)$")
    """None in a lock without torch (the node tools' environment, nodeforge.node_tools)."""
    index_urls: list[str] = Field(min_length=1)
    find_links: list[str] = Field(default_factory=list)
    locked: str
    overrides: str | None = None


class Locked(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    hashes: list[str] = Field(min_length=1)


@dataclass(frozen=True)
class Lock:
    header: LockHeader
    requirements: tuple[Locked, ...]

    def versions(self) -> dict[str, str]:
        """Canonical name -> version, as `pip list` compares them."""
        return {canonical(r.name): r.version for r in self.requirements}


_HEADER_KEYS = {
    "stack": "stack",
    "environment": "environment",
    "python": "python",
    "platform": "platform",
    "torch-variant": "torch_variant",
    "index-url": "index_urls",
    "find-links": "find_links",
    "locked": "locked",
    "overrides": "overrides",
}
_LIST_FIELDS = {"index_urls", "find_links"}


def render_lock(lock: Lock) -> str:
    header = lock.header.model_dump()
    lines = [MAGIC]
    for key, field in _HEADER_KEYS.items():
        value = header[field]
        if field in _LIST_FIELDS:
            value = " ".join(value)
        if value:
            lines.append(f"# {key}: {value}")
    for req in sorted(lock.requirements, key=lambda r: canonical(r.name)):
        hashes = [f"    --hash=sha256:{h}" for h in sorted(req.hashes)]
        lines.append(" \\\n".join([f"{canonical(req.name)}=={req.version}", *hashes]))
    return "\n".join(lines) + "\n"


def read_lock(path: Path) -> Lock:
    """Parse a lock; InputError names the file, the line and the fix on anything malformed."""
    fix = "regenerate it with `nodeforge lock STACK --environment NAME`"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the lock: {exc.strerror}", file=path, fix=fix) from None
    lines = text.splitlines()
    if not lines or lines[0] != MAGIC:
        raise InputError(f"not a nodeforge lock (first line is not '{MAGIC}')", file=path, line=1)
    header: dict[str, Any] = {}
    requirements: list[Locked] = []
    logical: list[tuple[int, str]] = []
    for number, raw in enumerate(lines[1:], start=2):
        if match := _HEADER.match(raw):
            key, value = match.groups()
            if key not in _HEADER_KEYS:
                raise InputError(f"unknown header key '{key}'", file=path, line=number, fix=fix)
            field = _HEADER_KEYS[key]
            header[field] = value.split() if field in _LIST_FIELDS else value
            continue
        if not raw.strip() or raw.startswith("#"):
            continue
        if logical and logical[-1][1].endswith("\\"):
            logical[-1] = (logical[-1][0], logical[-1][1][:-1] + " " + raw.strip())
        else:
            logical.append((number, raw.strip()))
    for number, entry in logical:
        requirements.append(_requirement(entry, path, number, fix))
    try:
        parsed = LockHeader.model_validate(header)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = next(k for k, f in _HEADER_KEYS.items() if f == first["loc"][0])
        raise InputError(
            first["msg"] if first["type"] != "missing" else "header line is missing",
            file=path,
            field=f"# {key}",
            fix=fix,
        ) from None
    names = [canonical(r.name) for r in requirements]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise InputError(f"'{duplicate}' is locked twice", file=path, fix=fix)
    if not requirements:
        raise InputError("the lock has no requirements", file=path, fix=fix)
    return Lock(parsed, tuple(requirements))


def _requirement(entry: str, path: Path, line: int, fix: str) -> Locked:
    spec, *options = entry.split()
    match = _REQUIREMENT.match(spec)
    if match is None:
        raise InputError(f"'{spec}' is not pinned as name==version", file=path, line=line, fix=fix)
    hashes = []
    for option in options:
        found = _HASH.match(option)
        if found is None:
            raise InputError(
                f"'{option}' is not a --hash=sha256:<64 hex digits> option",
                file=path,
                line=line,
                fix=fix,
            )
        hashes.append(found.group(1))
    if not hashes:
        raise InputError(
            f"{match.group(1)} has no --hash: pip's hash-checking mode refuses it",
            file=path,
            line=line,
            fix=fix,
        )
    return Locked(name=match.group(1), version=match.group(2), hashes=hashes)


def check_lock(lock: Lock, path: Path, *, torch_variant: str, python: str, torch: str) -> None:
    """The lock was made for this torch variant and interpreter and pins exactly this torch
    (Compat.locked_torch), else InputError with the fix.

    Both the header and the pinned torch must say the variant: a lock resolved against the wrong
    index carries another torch whatever its header claims.
    """
    fix = (
        f"regenerate the lock for torch variant {torch_variant} and Python {python} "
        f"(`nodeforge lock {lock.header.stack} --environment {lock.header.environment}`), "
        "or point the stack at the lock made for it"
    )
    if lock.header.torch_variant != torch_variant:
        raise InputError(
            f"lock is for torch variant {lock.header.torch_variant}, the stack wants "
            f"{torch_variant}",
            file=path,
            field="# torch-variant",
            fix=fix,
        )
    if lock.header.python != python:
        raise InputError(
            f"lock is for Python {lock.header.python}, the stack wants {python}",
            file=path,
            field="# python",
            fix=fix,
        )
    locked = lock.versions().get("torch")
    if locked != torch:
        raise InputError(
            f"the locked torch is {locked or 'missing'}, the stack wants {torch} "
            f"(torch variant {torch_variant})",
            file=path,
            field="torch",
            fix=fix,
        )


# ---------------------------------------------------------------- resolving


class LockFailedError(Exception):
    """pip could not resolve the environment; nothing was written."""


@dataclass(frozen=True)
class LockRequest:
    """What to lock: one environment of a stack for one interpreter and platform."""

    stack: str
    frameworks: Frameworks
    environment: str
    arch: Arch
    python: str
    torch_variant: str
    torch: str
    """The exact torch the lock pins (Compat.locked_torch): 2.15.0 from PyPI, 2.13.0+cpu."""
    platform: str
    index_urls: tuple[str, ...]
    find_links: tuple[str, ...] = ()
    as_of: datetime | None = None
    """Resolve from what the indexes held then (a lock's `# locked:` time reproduces it)."""

    def requirements(self) -> list[str]:
        frameworks = self.frameworks
        specs = []
        for framework in frameworks.environments[self.environment].frameworks:
            distribution, _ = FRAMEWORK_DISTRIBUTIONS[framework]
            version = self.torch if framework == "pytorch" else frameworks.pin(framework)
            specs.append(f"{distribution}=={version}")
        return specs

    def overrides(self) -> str | None:
        frameworks = self.frameworks
        variant = frameworks.torch_of(self.environment).variant
        notes = []
        if self.python != frameworks.python:
            notes.append(f"python {self.python} (stack {frameworks.python})")
        if self.torch_variant != variant:
            notes.append(f"torch-variant {self.torch_variant} (stack {variant})")
        return ", ".join(notes) or None


def index_urls_for(torch: str) -> tuple[str, ...]:
    """Where a locked torch comes from, then PyPI for the rest: a labelled build (2.13.0+cpu)
    from its variant's PyTorch index, PyPI's own build from PyPI alone. One index per
    environment: `==2.15.0` also matches 2.15.0+cu130, so a variant index beside PyPI could
    serve another file than the one locked."""
    _, _, label = torch.partition("+")
    return (f"{PYTORCH_INDEX}/{label}", PYPI) if label else (PYPI,)


def request_for(
    stack: Stack,
    environment: str,
    arch: Arch,
    compat: Compat,
    *,
    python: str | None = None,
    torch_variant: str | None = None,
    platform: str | None = None,
    index_urls: tuple[str, ...] = (),
    find_links: tuple[str, ...] = (),
    as_of: datetime | None = None,
    stack_file: Path | None = None,
) -> LockRequest:
    """The stack's own values, with the caller's overrides on top."""
    if stack.frameworks is None or environment not in stack.frameworks.environments:
        known = ", ".join(stack.frameworks.environments) if stack.frameworks else ""
        raise InputError(
            f"stack {stack.name} has no environment '{environment}'"
            + (f" (it has: {known})" if known else ""),
            file=stack_file,
            field="frameworks.environments",
            fix="add it under frameworks.environments in the stack, or pick one it has",
        )
    pin = stack.frameworks.torch_of(environment)
    variant = torch_variant or pin.variant
    torch = compat.locked_torch(pin.version, variant)
    return LockRequest(
        stack=stack.name,
        frameworks=stack.frameworks,
        environment=environment,
        arch=arch,
        python=python or stack.frameworks.python,
        torch_variant=variant,
        torch=torch,
        platform=platform or default_platform(arch),
        index_urls=index_urls or index_urls_for(torch),
        find_links=find_links,
        as_of=as_of,
    )


class Resolvable(Protocol):
    """What pip resolves: requirements for one interpreter and platform, from indexes."""

    @property
    def stack(self) -> str: ...
    @property
    def environment(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def index_urls(self) -> tuple[str, ...]: ...
    @property
    def find_links(self) -> tuple[str, ...]: ...
    @property
    def as_of(self) -> datetime | None: ...
    def requirements(self) -> list[str]: ...


def pip_command(request: Resolvable, report: Path, target: Path) -> list[str]:
    """pip resolving for the target interpreter and platform, wheels only, nothing installed."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--disable-pip-version-check",
        "--no-input",
        # pip accepts foreign --platform/--python-version only with --target, even on a dry run
        "--target",
        str(target),
        "--report",
        str(report),
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        request.python,
        "--abi",
        f"cp{request.python.replace('.', '')}",
        "--index-url",
        request.index_urls[0],
    ]
    for url in request.index_urls[1:]:
        command += ["--extra-index-url", url]
    for link in request.find_links:
        command += ["--find-links", link]
    if request.as_of is not None:
        command += ["--uploaded-prior-to", request.as_of.strftime(LOCKED_FORMAT)]
    for tag in expand_platform(request.platform):
        command += ["--platform", tag]
    return command + request.requirements()


def pip_environment() -> dict[str, str]:
    """The caller's environment without pip's resolution settings and config files."""
    env = {k: v for k, v in os.environ.items() if not _RESOLUTION_ENV.match(k)}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def locked_from_report(report: dict[str, Any]) -> tuple[Locked, ...]:
    """Each file pip chose, with the sha256 from the index (or computed for a local file)."""
    locked = []
    for item in report["install"]:
        metadata = item["metadata"]
        archive = item["download_info"].get("archive_info") or {}
        sha256 = (archive.get("hashes") or {}).get("sha256")
        if sha256 is None:
            raise LockFailedError(
                f"pip reported no sha256 for {metadata['name']} "
                f"({item['download_info']['url']}): the index gives no hash "
                "and the file is not local"
            )
        locked.append(Locked(name=metadata["name"], version=metadata["version"], hashes=[sha256]))
    return tuple(locked)


def resolve(request: Resolvable) -> tuple[Locked, ...]:
    """Every file pip would install for the request, each with its sha256; nothing downloaded
    but metadata. LockFailedError with pip's verdict when it does not resolve."""
    with tempfile.TemporaryDirectory(prefix="nodeforge-lock-") as tmp:
        report_path = Path(tmp) / "report.json"
        result = subprocess.run(
            pip_command(request, report_path, Path(tmp) / "target"),
            env=pip_environment(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            # pip's verdict, not its retry chatter; no hash is invented for what did not resolve
            said = [line for line in lines if line.startswith("ERROR")] or lines[-4:]
            raise LockFailedError(
                f"pip could not resolve {request.stack}/{request.environment} for "
                f"Python {request.python} {request.platform} from "
                f"{' '.join(request.index_urls + request.find_links)}: " + " | ".join(said)
            )
        report = json.loads(report_path.read_text(encoding="utf-8"))
    return locked_from_report(report)


def resolved_header(request: Resolvable, now: datetime | None, **more: Any) -> LockHeader:
    """The header of a lock resolved for `request`, at its as-of time or now; `more` adds
    fields only some requests have (torch_variant, overrides)."""
    return LockHeader(
        stack=request.stack,
        environment=request.environment,
        python=request.python,
        platform=request.platform,
        index_urls=list(request.index_urls),
        find_links=list(request.find_links),
        locked=(request.as_of or now or datetime.now(UTC)).strftime(LOCKED_FORMAT),
        **more,
    )


def lock_environment(request: LockRequest, *, now: datetime | None = None) -> Lock:
    locked = resolve(request)
    lock = Lock(
        resolved_header(
            request, now, torch_variant=request.torch_variant, overrides=request.overrides()
        ),
        locked,
    )
    try:
        check_lock(
            lock,
            Path("(resolved)"),
            torch_variant=request.torch_variant,
            python=request.python,
            torch=request.torch,
        )
    except InputError as exc:
        raise LockFailedError(f"the indexes gave the wrong torch: {exc.message}") from None
    return lock
