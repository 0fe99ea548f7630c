"""Compatibility data: the facts the rules compare against, kept as data with their sources."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from nodeforge.catalog.arch import Arch
from nodeforge.catalog.models import Layer, Model, VersionStr
from nodeforge.catalog.placeholders import check_placeholders
from nodeforge.versions import Version


class DriverCuda(Model):
    branch: int
    cuda: VersionStr


class CudaFamily(Model):
    """A CUDA major version: the driver floor for it, and the oldest SM it still compiles for."""

    major: int
    min_driver_branch: int
    min_sm: VersionStr


class SmCuda(Model):
    sm: VersionStr
    min_cuda: VersionStr


class TorchVariant(Model):
    name: str = Field(pattern=r"^cu\d{3}$")
    cuda: VersionStr
    sm: dict[Arch, list[VersionStr]]


class TorchPypi(Model):
    """PyPI's own Linux torch wheels of a minor release carry no local label (2.15.0, not
    2.15.0+cu132): this says which CUDA variant they are."""

    torch: str = Field(pattern=r"^\d+\.\d+$")
    variant: str = Field(pattern=r"^cu\d{3}$")


class OfiNcclFloor(Model):
    """From plugin version `plugin` on, NCCL must be at least `min_nccl`."""

    plugin: VersionStr
    min_nccl: VersionStr


class OfiNcclCeiling(Model):
    """NCCL from `nccl` on needs plugin `min_plugin` or newer for its current net API."""

    nccl: VersionStr
    min_plugin: VersionStr
    severity: Literal["error", "warning"]


class EfaOs(Model):
    distribution: Literal["ubuntu", "debian", "amazon"]
    version: str
    first: VersionStr
    last: VersionStr | None = None


class EfaBundle(Model):
    installer: VersionStr
    aws_ofi_nccl: VersionStr


def _branch_template(value: str) -> str:
    return check_placeholders(value, {"branch"})


BranchTemplate = Annotated[str, AfterValidator(_branch_template)]


class FabricNaming(Model):
    package_family: Literal["apt", "dnf"]
    min_branch: int
    max_branch: int | None
    fabric_manager: BranchTemplate
    imex: BranchTemplate


class KnownBadWhen(Model):
    driver_branches: list[int] | None = None
    gpu_models: list[str] | None = None
    os: list[str] | None = None
    layer: Layer | None = None
    efa_installer_below: VersionStr | None = None
    """Only with an EFA installer older than this (a fix shipped in it)."""

    @model_validator(mode="after")
    def _something(self) -> KnownBadWhen:
        if not any((self.driver_branches, self.gpu_models, self.os, self.layer)):
            raise ValueError("a known-bad entry needs at least one condition")
        return self


class KnownBad(Model):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    when: KnownBadWhen
    message: str
    fix: str
    source: str


class Compat(Model):
    sources: list[str] = Field(min_length=1)
    driver_cuda: list[DriverCuda] = Field(min_length=1)
    cuda_families: list[CudaFamily] = Field(min_length=1)
    sm_min_cuda: list[SmCuda] = Field(min_length=1)
    torch_variants: list[TorchVariant] = Field(min_length=1)
    torch_pypi: list[TorchPypi] = Field(default_factory=list)
    ofi_nccl_floor: list[OfiNcclFloor] = Field(min_length=1)
    ofi_nccl_ceiling: list[OfiNcclCeiling] = Field(default_factory=list)
    efa_os: list[EfaOs] = Field(min_length=1)
    efa_bundles: list[EfaBundle] = Field(default_factory=list)
    fabric_naming: list[FabricNaming] = Field(min_length=1)
    known_bad: list[KnownBad] = Field(default_factory=list)

    def driver_max_cuda(self, branch: int) -> Version | None:
        """The newest CUDA the driver branch runs natively (the highest row at or below it)."""
        rows = [r for r in self.driver_cuda if r.branch <= branch]
        if not rows:
            return None
        return Version(max(rows, key=lambda r: r.branch).cuda)

    def cuda_family(self, cuda: Version) -> CudaFamily | None:
        return next((f for f in self.cuda_families if f.major == cuda.major), None)

    def sm_min_cuda_for(self, sm: Version) -> Version | None:
        row = next((r for r in self.sm_min_cuda if Version(r.sm) == sm), None)
        return Version(row.min_cuda) if row else None

    def torch_variant(self, name: str) -> TorchVariant | None:
        return next((v for v in self.torch_variants if v.name == name), None)

    def pypi_variant(self, torch: str) -> str | None:
        """The CUDA variant of PyPI's unlabelled torch wheels of this release, if listed."""
        minor = ".".join(torch.partition("+")[0].split(".")[:2])
        return next((r.variant for r in self.torch_pypi if r.torch == minor), None)

    def locked_torch(self, version: str, variant: str) -> str:
        """The torch version a lock pins for this variant: PyPI's own build is unlabelled, the
        variant indexes' builds carry the variant (2.13.0+cu130, 2.13.0+cpu)."""
        return version if self.pypi_variant(version) == variant else f"{version}+{variant}"

    def fabric_names(self, family: str, branch: int) -> FabricNaming | None:
        return next(
            (
                n
                for n in self.fabric_naming
                if n.package_family == family
                and n.min_branch <= branch
                and (n.max_branch is None or branch <= n.max_branch)
            ),
            None,
        )

    def efa_bundle(self, installer: Version) -> EfaBundle | None:
        return next((b for b in self.efa_bundles if Version(b.installer) == installer), None)
