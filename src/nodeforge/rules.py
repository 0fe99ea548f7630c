"""Compatibility rules. Each has an id and returns problems whose message names the fix.

A rule reads one Target (image x profile) and the compatibility data in compat.yml; the rule
holds the logic, the data holds the facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nodeforge.catalog.compat import EfaOs
from nodeforge.errors import InputError
from nodeforge.lock import (
    FRAMEWORK_DISTRIBUTIONS,
    Lock,
    canonical,
    check_lock,
    read_lock,
    wheel_machine,
)
from nodeforge.node_tools import image_tools_lock
from nodeforge.rolevars import Context, derived_var_problem, role_inputs
from nodeforge.target import Target
from nodeforge.versions import Version

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    message: str
    fix: str
    severity: Severity = "error"


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Callable[[Target], Iterator[Problem]]
    layer: str | None = None
    """The rule applies only to images that enable this layer."""

    def applies(self, target: Target) -> bool:
        return self.layer is None or target.layer(self.layer)


def _driver_floor(t: Target) -> Iterator[Problem]:
    need, have = t.profile.driver.min_branch, t.stack.driver.branch
    if have < need:
        yield Problem(
            f"driver branch {have} is older than {t.profile.name}'s floor {need} "
            f"({t.profile.gpu.model} is not supported before R{need})",
            f"use a stack with driver branch {need} or newer",
        )


def _open_modules(t: Target) -> Iterator[Problem]:
    need = t.profile.driver.open_modules
    flavour = t.driver_flavour()
    if need == "required" and flavour != "open":
        yield Problem(
            f"{t.profile.gpu.model} needs the open kernel modules but the stack installs "
            f"the proprietary driver",
            "set the stack's driver.flavour to open (or profile)",
        )
    if need == "unsupported" and flavour == "open":
        yield Problem(
            f"{t.profile.gpu.model} does not support the open kernel modules",
            "set the stack's driver.flavour to proprietary (or profile)",
        )


def _cuda_driver(t: Target) -> Iterator[Problem]:
    branch = t.stack.driver.branch
    max_cuda = t.compat.driver_max_cuda(branch)
    if max_cuda is None:
        yield Problem(
            f"driver branch {branch} is not in compat.yml driver_cuda",
            "add the branch and its CUDA version to compat.yml driver_cuda",
        )
        return
    for text in t.stack.cuda.toolkits:
        toolkit = Version(text)
        if toolkit.major_minor() > max_cuda:
            yield Problem(
                f"CUDA toolkit {toolkit} is newer than driver branch {branch} runs "
                f"(at most CUDA {max_cuda})",
                f"use CUDA {max_cuda} or older, or a driver branch that runs CUDA "
                f"{toolkit.major_minor()}",
            )


def _cuda_sm(t: Target) -> Iterator[Problem]:
    sm = t.profile.sm
    min_cuda = t.compat.sm_min_cuda_for(sm)
    for text in t.stack.cuda.toolkits:
        toolkit = Version(text)
        if min_cuda is None:
            yield Problem(
                f"compute capability {sm} of {t.profile.gpu.model} is not in compat.yml "
                "sm_min_cuda",
                "add it to compat.yml sm_min_cuda with the first CUDA that compiles for it",
            )
            return
        if toolkit < min_cuda:
            yield Problem(
                f"CUDA {toolkit} cannot compile for sm_{sm.major}{sm.minor} "
                f"({t.profile.gpu.model}); it needs CUDA {min_cuda}",
                f"use CUDA {min_cuda} or newer in the stack",
            )
        family = t.compat.cuda_family(toolkit)
        if family is None:
            yield Problem(
                f"CUDA {toolkit.major} is not in compat.yml cuda_families, so its oldest SM "
                "is unknown",
                f"add CUDA {toolkit.major}'s min_sm and min_driver_branch to compat.yml "
                "cuda_families",
            )
        elif sm < Version(family.min_sm):
            yield Problem(
                f"CUDA {toolkit.major} no longer compiles for sm_{sm.major}{sm.minor} "
                f"(oldest is sm_{family.min_sm.replace('.', '')})",
                f"use a CUDA {toolkit.major - 1}.x toolkit for {t.profile.gpu.model}",
            )


def _torch_driver(t: Target) -> Iterator[Problem]:
    frameworks = t.stack.frameworks
    if frameworks is None:
        return
    for variant in frameworks.torch_variants():
        yield from _torch_variant_driver(t, variant)


def _torch_variant_driver(t: Target, name: str) -> Iterator[Problem]:
    if name == "cpu":
        return
    variant = t.compat.torch_variant(name)
    if variant is None:
        yield Problem(
            f"PyTorch variant {name} is not in compat.yml torch_variants",
            f"use a listed variant ({', '.join(v.name for v in t.compat.torch_variants)}) "
            "or add it to compat.yml",
        )
        return
    cuda = Version(variant.cuda)
    branch = t.stack.driver.branch
    max_cuda = t.compat.driver_max_cuda(branch)
    if max_cuda is None or cuda.major_minor() <= max_cuda:
        return
    family = t.compat.cuda_family(cuda)
    if family is not None and cuda.major == max_cuda.major and branch >= family.min_driver_branch:
        yield Problem(
            f"PyTorch {name} (CUDA {cuda}) runs on driver {branch} (CUDA {max_cuda}) only "
            "through minor-version compatibility, without PTX JIT",
            f"use a driver branch that runs CUDA {cuda} natively",
            severity="warning",
        )
        return
    floor = (
        f" (CUDA {cuda.major}.x needs driver {family.min_driver_branch} or newer)" if family else ""
    )
    yield Problem(
        f"PyTorch {name} wheels need CUDA {cuda}, which driver branch {branch} does not "
        f"support{floor}",
        f"use a torch variant for CUDA <= {max_cuda}, or a newer driver branch",
    )


def _torch_sm(t: Target) -> Iterator[Problem]:
    frameworks = t.stack.frameworks
    if frameworks is None:
        return
    for variant in frameworks.torch_variants():
        yield from _torch_variant_sm(t, variant)


def _torch_variant_sm(t: Target, name: str) -> Iterator[Problem]:
    sm = t.profile.sm
    if name == "cpu":
        yield Problem(
            f"PyTorch is the CPU build: the {t.profile.gpu.count} {t.profile.gpu.model} GPUs "
            "go unused by it",
            "use a CUDA variant of torch for GPU work",
            severity="warning",
        )
        return
    variant = t.compat.torch_variant(name)
    if variant is None:
        return  # reported by torch-driver
    built = [Version(v) for v in variant.sm.get(t.image.arch, [])]
    if not any(b.major == sm.major and b.minor <= sm.minor for b in built):
        yield Problem(
            f"PyTorch {variant.name} wheels for {t.image.arch} carry no code for "
            f"sm_{sm.major}{sm.minor} ({t.profile.gpu.model}); built for "
            f"{', '.join(str(b) for b in built) or 'nothing'}",
            "use a variant that covers it (Blackwell needs cu128 or newer; torch >= 2.12 "
            "ships cu130)",
        )


def _locks(t: Target) -> Iterator[Problem]:
    frameworks = t.stack.frameworks
    if frameworks is None:
        return
    arch = t.image.arch
    for name, environment in frameworks.environments.items():
        make = f"`nodeforge lock {t.stack.name} --environment {name} --arch {arch}`"
        relative = environment.locks.get(arch)
        if relative is None:
            yield Problem(
                f"environment {name} of stack {t.stack.name} names no lock for {arch}",
                f"add frameworks.environments.{name}.locks.{arch}: "
                f"locks/{t.stack.name}/{name}-{arch}.txt to the stack, then write it with {make}",
            )
            continue
        path = t.catalog_root / relative
        if not path.is_file():
            yield Problem(
                f"the lock {path} of environment {name} ({arch}) does not exist",
                f"write it with {make} where PyPI (and the variant's PyTorch index) answer",
            )
            continue
        pin = frameworks.torch_of(name)
        try:
            lock = read_lock(path)
            check_lock(
                lock,
                path,
                torch_variant=pin.variant,
                python=frameworks.python,
                torch=t.compat.locked_torch(pin.version, pin.variant),
            )
        except InputError as exc:
            yield Problem(
                f"the lock {path} of environment {name}: {exc.message}",
                f"regenerate it with {make}",
            )
            continue
        yield from _lock_matches(t, name, path, lock, make)


def _lock_matches(t: Target, name: str, path: Path, lock: Lock, make: str) -> Iterator[Problem]:
    """The lock is for this architecture and pins the stack's frameworks. Which stack it was
    made for does not matter: a stack that extends another (a mirror overlay) shares its locks."""
    frameworks = t.stack.frameworks
    assert frameworks is not None
    wheel_arch = wheel_machine(t.image.arch)
    if not lock.header.platform.endswith(f"_{wheel_arch}"):
        yield Problem(
            f"the lock {path} was made for platform {lock.header.platform}, not {wheel_arch}",
            f"regenerate it with {make}",
        )
    versions = lock.versions()
    for framework in frameworks.environments[name].frameworks:
        if framework == "pytorch":
            continue  # check_lock compared torch, label included
        distribution, _ = FRAMEWORK_DISTRIBUTIONS[framework]
        wanted, locked = frameworks.pin(framework), versions.get(canonical(distribution))
        if locked != wanted:
            yield Problem(
                f"the lock {path} pins {distribution} {locked or '(none)'}, the stack {wanted}",
                f"regenerate it with {make}",
            )


def _nccl_ofi(t: Target) -> Iterator[Problem]:
    plugin = t.ofi_nccl_version()
    if plugin is None:
        return
    declared = t.stack.aws_ofi_nccl
    if declared is not None and Version(declared.version) != plugin:
        yield Problem(
            f"EFA installer {t.stack.efa.installer_version if t.stack.efa else '?'} bundles "
            f"aws-ofi-nccl {plugin}, but the stack says {declared.version}",
            f"set aws_ofi_nccl.version to {plugin}, or build {declared.version} from source",
        )
    if t.stack.nccl is None:
        return
    nccl = Version(t.stack.nccl.version)
    floors = [f for f in t.compat.ofi_nccl_floor if Version(f.plugin) <= plugin]
    if floors:
        floor = max(floors, key=lambda f: Version(f.plugin))
        if nccl < Version(floor.min_nccl):
            yield Problem(
                f"NCCL {nccl} is older than aws-ofi-nccl {plugin} supports "
                f"(NCCL {floor.min_nccl} or newer)",
                f"use NCCL {floor.min_nccl} or newer",
            )
    for ceiling in t.compat.ofi_nccl_ceiling:
        if nccl >= Version(ceiling.nccl) and plugin < Version(ceiling.min_plugin):
            yield Problem(
                f"NCCL {nccl} expects aws-ofi-nccl {ceiling.min_plugin} or newer; "
                f"{plugin} falls back to an older plugin interface",
                f"use aws-ofi-nccl {ceiling.min_plugin} or newer (EFA installer 1.50+ bundles it)",
                severity=ceiling.severity,
            )


def _efa_os(t: Target) -> Iterator[Problem]:
    if t.stack.efa is None:
        return
    installer = Version(t.stack.efa.installer_version)

    def supports(row: EfaOs) -> bool:
        return Version(row.first) <= installer and (
            row.last is None or installer <= Version(row.last)
        )

    supported = sorted(f"{r.distribution} {r.version}" for r in t.compat.efa_os if supports(r))
    rows = [
        r
        for r in t.compat.efa_os
        if (r.distribution, r.version) == (t.os.distribution, t.os.version)
    ]
    if not rows:
        yield Problem(
            f"the EFA installer does not support {t.os.distribution} {t.os.version} ({t.os.name})",
            f"build on one of {', '.join(supported)}, or drop the efa layer",
        )
        return
    row = rows[0]
    if not supports(row):
        span = f"{row.first} to {row.last}" if row.last else f"{row.first} and newer"
        yield Problem(
            f"EFA installer {installer} does not support {t.os.name} (supported by {span})",
            f"use an EFA installer in {span}, or one of {', '.join(supported)}",
        )


def _arch(t: Target) -> Iterator[Problem]:
    arch = t.image.arch
    if t.profile.arch != arch:
        yield Problem(
            f"{t.profile.name} is {t.profile.arch} but the image is built for {arch}",
            f"set the image's arch to {t.profile.arch}, or target a {arch} profile",
        )
    if arch not in t.os.architectures:
        yield Problem(
            f"{t.os.name} has no {arch} entry",
            f"use an OS with {arch}, or add {arch} to the OS entry",
        )
    if arch not in t.stack.architectures:
        yield Problem(
            f"stack {t.stack.name} is not built for {arch}",
            f"add {arch} to the stack's architectures once its artifacts exist for it",
        )


def _nvidia_repo(t: Target) -> Iterator[Problem]:
    uses_repo = any(
        t.layer(layer) and source == "nvidia-repo"
        for layer, source in (
            ("nvidia_driver", t.stack.driver.source),
            ("cuda_toolkit", t.stack.cuda.source),
            ("nccl", t.stack.nccl.source if t.stack.nccl else None),
        )
    )
    os_arch = t.os_arch
    if uses_repo and os_arch is not None and os_arch.nvidia_repo is None:
        yield Problem(
            f"NVIDIA publishes no CUDA repository for {t.os.name} {t.image.arch}",
            "use an OS that has one (ubuntu22.04, ubuntu24.04, al2023), or distro packages",
        )
    cuda = t.stack.repositories.get("cuda")
    if uses_repo and t.os.package_family == "dnf" and cuda is not None and cuda.rpm_key is None:
        yield Problem(
            f"stack {t.stack.name}'s repositories.cuda has no rpm_key: NVIDIA signs its rpm "
            f"repositories with another key than its apt ones, and {t.os.name} uses dnf",
            "add repositories.cuda.rpm_key (the key_url and gpg_fingerprint of the rpm key)",
        )


def _fabric_naming(t: Target) -> Iterator[Problem]:
    driver = t.stack.driver
    if not (t.profile.interconnect.fabric_manager or t.profile.interconnect.imex):
        return
    names = t.fabric_packages()
    if names is None:
        yield Problem(
            f"compat.yml fabric_naming has no {t.os.package_family} entry for driver branch "
            f"{driver.branch}",
            "add the package names for that branch to compat.yml fabric_naming",
        )
        return
    for field, declared in (
        ("fabric_manager", driver.fabric_manager_package),
        ("imex", driver.imex_package),
    ):
        if declared is not None and declared != names[field]:
            yield Problem(
                f"driver.{field}_package is '{declared}', but on {t.os.package_family} the "
                f"branch {driver.branch} package is '{names[field]}' (renamed at 580)",
                f"set driver.{field}_package to {names[field]}, or remove it",
            )


def _fabric_layer(t: Target) -> Iterator[Problem]:
    needs = [
        name
        for name, needed in (
            ("fabric manager", t.profile.interconnect.fabric_manager),
            ("NVLSM", t.profile.interconnect.nvlsm),
            ("IMEX", t.profile.interconnect.imex),
        )
        if needed
    ]
    if needs and not t.layer("nvidia_fabric"):
        yield Problem(
            f"{t.profile.name} needs {' and '.join(needs)} but the image does not enable "
            "the nvidia_fabric layer",
            "add nvidia_fabric to the image's layers",
        )


# The stack section each layer installs from; an image that enables the layer needs it.
LAYER_SECTIONS: dict[str, tuple[str, str]] = {
    "nccl": ("nccl", "version, source and nccl-tests"),
    "gdrcopy": ("gdrcopy", "version and source artifact"),
    "efa": ("efa", "installer version and artifact"),
    "aws_ofi_nccl": ("aws_ofi_nccl", "version and source"),
    "python_ml": ("frameworks", "Python, PyTorch and the environments with their locks"),
    "container_runtime": ("container_runtime", "engine, NVIDIA container toolkit version"),
    "enroot": ("enroot", "enroot version and release packages, pyxis"),
}


def _layer_section(t: Target) -> Iterator[Problem]:
    for layer, (section, what) in LAYER_SECTIONS.items():
        if t.layer(layer) and getattr(t.stack, section) is None:
            yield Problem(
                f"the image enables the {layer} layer but stack {t.stack.name} has no "
                f"{section} section ({what})",
                f"add {section} to the stack, or remove the layer from the image",
            )


def _enroot(t: Target) -> Iterator[Problem]:
    enroot = t.stack.enroot
    if enroot is None:
        return  # rule layer-section
    if t.image.arch not in enroot.packages:
        yield Problem(
            f"stack {t.stack.name} names no enroot packages for {t.image.arch}",
            f"add enroot.packages.{t.image.arch} (the release's enroot and enroot+caps .debs)",
        )


def _node_tools_lock(t: Target) -> Iterator[Problem]:
    python, relative = image_tools_lock(t.os.python, t.image.arch)
    path = t.catalog_root / relative
    make = f"`python -m nodeforge.node_tools lock --python {python} --arch {t.image.arch}`"
    if not path.is_file():
        yield Problem(
            f"the lock {path} of the node tools (xid-watch, health-gate) for Python {python} "
            f"on {t.image.arch} does not exist",
            f"write it with {make} where PyPI answers",
        )
        return
    try:
        lock = read_lock(path)
    except InputError as exc:
        yield Problem(f"the node tools' lock {path}: {exc.message}", f"rewrite it with {make}")
        return
    if lock.header.python != python:
        yield Problem(
            f"the node tools' lock {path} was made for Python {lock.header.python}, the image's "
            f"tools run on {python}",
            f"rewrite it with {make}",
        )


def _dcgm(t: Target) -> Iterator[Problem]:
    if t.stack.dcgm is None:
        yield Problem(
            f"stack {t.stack.name} has no dcgm section: the image gets no DCGM, so `dcgmi diag` "
            "cannot run at target stage and that required check fails there",
            "add dcgm.version to the stack (DCGM 4 from NVIDIA's CUDA repository)",
            "warning",
        )


# Layers whose roles have a dnf path (Amazon Linux 2023); docs/al2023.md says what the others lack.
DNF_LAYERS: frozenset[str] = frozenset(
    {"base", "nvidia_driver", "nvidia_fabric", "cuda_toolkit", "gdrcopy", "image_cleanup"}
)


def _dnf_layers(t: Target) -> Iterator[Problem]:
    if t.os.package_family != "dnf":
        return
    apt_only = [layer for layer in t.image.layers if layer not in DNF_LAYERS]
    if apt_only:
        yield Problem(
            f"{t.os.name} uses dnf, and the layers {', '.join(apt_only)} install through apt "
            f"only so far (the dnf ones: {', '.join(sorted(DNF_LAYERS))})",
            "remove those layers from the image, or build it on an apt OS (ubuntu24.04, debian12)",
        )


def _known_bad(t: Target) -> Iterator[Problem]:
    for bad in t.compat.known_bad:
        when = bad.when
        if (
            (when.driver_branches is None or t.stack.driver.branch in when.driver_branches)
            and (when.gpu_models is None or t.profile.gpu.model in when.gpu_models)
            and (when.os is None or t.os.name in when.os)
            and (when.layer is None or t.layer(when.layer))
            and (
                when.efa_installer_below is None
                or (
                    t.stack.efa is not None
                    and Version(t.stack.efa.installer_version) < Version(when.efa_installer_below)
                )
            )
        ):
            yield Problem(f"{bad.message} [{bad.id}; {bad.source}]", bad.fix)


def _derived_vars(t: Target) -> Iterator[Problem]:
    owners = {name: owner for name, (_, owner) in role_inputs(Context(t)).items()}
    for entry in (t.os, t.stack, t.profile, t.image):
        for name in sorted(owners.keys() & entry.vars.keys()):
            message, fix = derived_var_problem(name, owners[name])
            yield Problem(f"{entry.name}: {message}", fix)


def _artifacts(t: Target) -> Iterator[Problem]:
    for name, artifact in sorted(t.stack.artifacts.items()):
        if not artifact.verified:
            yield Problem(
                f"artifact '{name}' of stack {t.stack.name} has no sha256 and no GPG "
                "fingerprint: it would be installed unverified",
                "add its sha256 (or signature fingerprint) to the stack, or pass "
                "--allow-unverified",
            )


RULES: tuple[Rule, ...] = (
    Rule("driver-floor", "driver branch >= the profile's floor", _driver_floor, "nvidia_driver"),
    Rule(
        "open-modules",
        "open kernel modules where the GPU requires them",
        _open_modules,
        "nvidia_driver",
    ),
    Rule(
        "cuda-driver",
        "every CUDA toolkit <= the CUDA the driver runs",
        _cuda_driver,
        "cuda_toolkit",
    ),
    Rule("cuda-sm", "the CUDA toolkit compiles for the profile's SM", _cuda_sm, "cuda_toolkit"),
    Rule(
        "torch-driver",
        "the PyTorch wheel's CUDA is supported by the driver",
        _torch_driver,
        "python_ml",
    ),
    Rule("torch-sm", "the PyTorch wheel carries code for the profile's SM", _torch_sm, "python_ml"),
    Rule(
        "locks",
        "every environment has its lock, made for the stack, the variant, Python and arch",
        _locks,
        "python_ml",
    ),
    Rule("nccl-ofi", "NCCL within what aws-ofi-nccl supports", _nccl_ofi, "aws_ofi_nccl"),
    Rule("efa-os", "the EFA installer supports the OS", _efa_os, "efa"),
    Rule("arch", "OS, stack and profile share one CPU architecture", _arch),
    Rule("nvidia-repo", "NVIDIA publishes a repository for the OS and arch", _nvidia_repo),
    Rule(
        "fabric-naming",
        "fabric manager / IMEX package names match the branch",
        _fabric_naming,
        "nvidia_fabric",
    ),
    Rule("fabric-layer", "NVSwitch / IMEX profiles get the nvidia_fabric layer", _fabric_layer),
    Rule("layer-section", "every enabled layer has its stack section", _layer_section),
    Rule("enroot", "the enroot layer has packages for the image", _enroot, "enroot"),
    Rule(
        "node-tools-lock",
        "the node tools' lock exists for the image's tools Python and architecture",
        _node_tools_lock,
        "gpu_health",
    ),
    Rule("dcgm", "a gpu_health image gets DCGM", _dcgm, "gpu_health"),
    Rule("dnf-layers", "on a dnf OS, only layers that have a dnf path", _dnf_layers),
    Rule("known-bad", "no combination listed in compat.yml known_bad", _known_bad),
    Rule("derived-vars", "no layer's vars set a role input the catalog derives", _derived_vars),
    Rule("artifact-unverified", "every artifact has a sha256 or a GPG fingerprint", _artifacts),
)
