"""Typed catalog entries. Unknown keys and wrong types are rejected; every file is one entry."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from nodeforge.catalog.arch import Arch
from nodeforge.catalog.placeholders import check_placeholders
from nodeforge.versions import Version

Unknown = Literal["unknown"]

Layer = Literal[
    "base",
    "nvidia_driver",
    "nvidia_fabric",
    "cuda_toolkit",
    "gdrcopy",
    "efa",
    "aws_ofi_nccl",
    "nccl",
    "python_ml",
    "container_runtime",
    "enroot",
    "gpu_health",
    "image_cleanup",
]
"""Every layer, in the order the playbooks apply them (`nodeforge.roles` of the resolved vars).
Adding one: this entry, its role and Molecule scenario, rolevars.LAYER_INPUTS, its validation
file and its README row."""

LAYERS: tuple[Layer, ...] = get_args(Layer)

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_VAR_NAME = re.compile(r"^[a-z][a-z0-9_]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
_PCI_ID = re.compile(r"^0x[0-9a-f]{4}$")
URL_PLACEHOLDERS = frozenset({"nvidia_repo", "arch", "deb_arch"})


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError("use lower-case letters, digits, '.', '_' or '-' (at most 64 characters)")
    return value


def _version(value: str) -> str:
    Version(value)
    return value


def _sha256(value: str) -> str:
    if value != "unknown" and not _SHA256.match(value):
        raise ValueError(
            "expected 64 lower-case hex digits, or 'unknown' where no checksum is known"
        )
    return value


def _fingerprint(value: str) -> str:
    compact = value.replace(" ", "").upper()
    if not _FINGERPRINT.match(compact):
        raise ValueError("expected a 40-hex-digit OpenPGP fingerprint (spaces allowed)")
    return compact


def _url_scheme(value: str) -> str:
    if not value.startswith(("https://", "http://", "s3://")):
        raise ValueError("expected an https://, http:// or s3:// URL")
    return value


def _url(value: str) -> str:
    return check_placeholders(_url_scheme(value), URL_PLACEHOLDERS)


def _plain_url(value: str) -> str:
    """A URL used as it is (a mirror's base): no placeholders, no braces."""
    return check_placeholders(_url_scheme(value), ())


def _pci_id(value: str) -> str:
    if not _PCI_ID.match(value):
        raise ValueError("expected a PCI id such as 0x2330 (lower-case hex)")
    return value


RESERVED_VARS = frozenset({"nodeforge", "nodeforge_manifest", "nodeforge_mode"})
"""The keys `nodeforge render` writes itself: the catalog facts, the manifest, the mode."""


def _var_name(key: str) -> str:
    if not _VAR_NAME.match(key):
        raise ValueError(f"variable name '{key}' must be snake_case, e.g. nvidia_driver_branch")
    if key in RESERVED_VARS:
        raise ValueError(f"'{key}' is reserved for the catalog facts: rename the variable")
    return key


Name = Annotated[str, AfterValidator(_name)]
VersionStr = Annotated[str, AfterValidator(_version)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
Fingerprint = Annotated[str, AfterValidator(_fingerprint)]
Url = Annotated[str, AfterValidator(_url)]
PlainUrl = Annotated[str, AfterValidator(_plain_url)]
PciId = Annotated[str, AfterValidator(_pci_id)]
Vars = dict[Annotated[str, AfterValidator(_var_name)], Any]


def unique(value: list[Any]) -> list[Any]:
    """A list validator: no item twice."""
    seen: set[Any] = set()
    for item in value:
        if item in seen:
            raise ValueError(f"'{item}' is listed twice")
        seen.add(item)
    return value


class Model(BaseModel):
    # no NaN or infinity: `.inf` GiB of memory passes every comparison a rule makes
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------- profiles


class Gpu(Model):
    model: str
    architecture: Literal["ampere", "ada", "hopper", "blackwell"]
    count: int = Field(ge=1, le=64)
    memory_gib: float = Field(gt=0, le=65536)
    compute_capability: VersionStr
    pci_device_ids: list[PciId] = Field(min_length=1)


class Cpu(Model):
    vendor: str
    vcpus: Annotated[int, Field(ge=1, le=65536)] | Unknown
    memory_gib: Annotated[float, Field(gt=0, le=1 << 24)] | Unknown


class Interconnect(Model):
    nvswitch: bool
    nvlink_generation: Annotated[int, Field(ge=1, le=64)] | None
    nvlinks_per_gpu: Annotated[int, Field(ge=1, le=1024)] | None
    fabric_manager: bool
    nvlsm: bool
    imex: bool

    @model_validator(mode="after")
    def _consistent(self) -> Interconnect:
        if self.fabric_manager and not self.nvswitch:
            raise ValueError("fabric_manager needs nvswitch: fabric manager drives NVSwitches")
        if self.nvlsm and not self.fabric_manager:
            raise ValueError("nvlsm runs beside fabric manager: set fabric_manager too")
        return self


class Network(Model):
    """What validation expects of the node; the launch layout comes from EC2
    (nodeforge.aws.netlayout), and promote holds efa_interfaces to EC2's number."""

    bandwidth_gbps: int = Field(ge=1, le=1_000_000)
    efa_interfaces: int = Field(ge=0, le=256)
    gpudirect_rdma: Literal["required", "optional"]


class DriverRequirement(Model):
    min_branch: int = Field(ge=1, le=9999)
    open_modules: Literal["required", "recommended", "optional", "unsupported"]
    gsp_firmware: bool = True


class Baseline(Model):
    """A validation threshold with its provenance; `status: unknown` says nobody has measured it."""

    value: Annotated[float, Field(gt=0)] | None
    unit: str
    status: Literal["published", "measured", "advisory", "unknown"]
    source: str
    message_size: str | None = None
    nodes: Annotated[int, Field(ge=1, le=100_000)] | None = None
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    note: str | None = None

    @model_validator(mode="after")
    def _known(self) -> Baseline:
        if (self.status == "unknown") != (self.value is None):
            raise ValueError("value must be null exactly when status is 'unknown'")
        return self


class Baselines(Model):
    nccl_all_reduce_single_node: Baseline
    nccl_all_reduce_multi_node: Baseline
    bf16_matmul_tflops_per_gpu: Baseline
    device_memcpy_gbps_per_gpu: Baseline


class Profile(Model):
    name: Name
    description: str
    arch: Arch
    gpu: Gpu
    cpu: Cpu
    interconnect: Interconnect
    network: Network
    nvme_gb: Annotated[int, Field(ge=0, le=1 << 30)] | Unknown
    driver: DriverRequirement
    baselines: Baselines
    sources: list[str] = Field(min_length=1)
    vars: Vars = Field(default_factory=dict)

    @property
    def sm(self) -> Version:
        return Version(self.gpu.compute_capability)


# ---------------------------------------------------------------- operating systems


class AmiLookup(Model):
    """Where Packer finds the source AMI: an SSM parameter, or owners plus a name filter."""

    ssm_parameter: str | None = None
    owners: list[str] | None = None
    name_filter: str | None = None
    source: str

    @model_validator(mode="after")
    def _one_way(self) -> AmiLookup:
        by_ssm = self.ssm_parameter is not None
        by_filter = self.owners is not None or self.name_filter is not None
        if by_ssm == by_filter:
            raise ValueError("give either ssm_parameter, or owners and name_filter")
        if by_filter and not (self.owners and self.name_filter):
            raise ValueError("owners and name_filter go together: Packer requires owners")
        return self


class Kernel(Model):
    image_package: str
    headers_packages: list[str] = Field(min_length=1)


class OsArch(Model):
    source_ami: AmiLookup
    kernel: Kernel
    nvidia_repo: str | None


class OsEntry(Model):
    name: Name
    distribution: Literal["ubuntu", "debian", "amazon"]
    version: str
    codename: str | None
    package_family: Literal["apt", "dnf"]
    default_user: str
    python: VersionStr
    root_device: str
    architectures: dict[Arch, OsArch] = Field(min_length=1)
    sources: list[str] = Field(min_length=1)
    vars: Vars = Field(default_factory=dict)


# ---------------------------------------------------------------- stacks


class Artifact(Model):
    """A download: checksum and/or signature; `sha256: unknown` states that none is known."""

    url: Url
    sha256: Sha256
    gpg_fingerprint: Fingerprint | None = None
    signature_url: Url | None = None
    key_url: Url | None = None
    """Where the signer publishes its public key; trusted only through gpg_fingerprint."""
    source: str

    @model_validator(mode="after")
    def _signature_parts(self) -> Artifact:
        if self.gpg_fingerprint is not None and (
            self.signature_url is None or self.key_url is None
        ):
            raise ValueError("gpg_fingerprint needs signature_url and key_url to be checked")
        return self

    @property
    def verified(self) -> bool:
        return self.sha256 != "unknown" or self.gpg_fingerprint is not None


class RepositoryKey(Model):
    """The signing key of a repository's rpm form, where the vendor signs it with another key
    than the apt one."""

    key_url: Url
    gpg_fingerprint: Fingerprint
    source: str


class AptRepository(Model):
    """An apt/dnf repository; packages are verified by its signing key."""

    url: Url
    key_url: Url
    gpg_fingerprint: Fingerprint
    source: str
    rpm_key: RepositoryKey | None = None
    """Replaces key_url and gpg_fingerprint on a dnf OS: NVIDIA signs its rpm repositories
    (amzn2023, rhel*) with D42D0685, its apt ones with 3bf863cc."""


class Driver(Model):
    branch: int = Field(ge=1, le=9999)
    version: VersionStr
    flavour: Literal["open", "proprietary", "profile"]
    """`profile`: open modules unless the profile's GPUs do not support them."""
    source: Literal["nvidia-repo", "distro"]
    fabric_manager_package: str | None = None
    """Set only to override the name derived from compat.yml fabric_naming (checked against it)."""
    imex_package: str | None = None

    @model_validator(mode="after")
    def _branch_matches(self) -> Driver:
        if Version(self.version).major != self.branch:
            raise ValueError(f"version {self.version} is not on branch {self.branch}")
        return self


class Cuda(Model):
    toolkits: Annotated[list[VersionStr], AfterValidator(unique)] = Field(min_length=1)
    default: VersionStr
    cudnn: VersionStr | None = None
    source: Literal["nvidia-repo", "distro"]

    @model_validator(mode="after")
    def _default_listed(self) -> Cuda:
        if self.default not in self.toolkits:
            raise ValueError(f"default {self.default} is not one of toolkits")
        return self


class Nccl(Model):
    version: VersionStr
    source: Literal["nvidia-repo", "distro", "source"]
    tests_version: VersionStr | None = None
    tests_artifact: str | None = None


class Efa(Model):
    installer_version: VersionStr
    artifact: str


class AwsOfiNccl(Model):
    version: VersionStr
    source: Literal["efa-installer", "source"]
    artifact: str | None = None


class Gdrcopy(Model):
    version: VersionStr
    artifact: str


class ContainerRuntime(Model):
    engine: Literal["containerd", "docker"] = "containerd"
    toolkit_version: str = Field(pattern=r"^\d+\.\d+\.\d+(~[0-9A-Za-z.]+)?-[0-9A-Za-z.+~]+$")
    """The NVIDIA container toolkit's apt version (1.18.0-1), its four packages pinned together."""


class Pyxis(Model):
    version: VersionStr
    artifact: str
    """The source tarball, built on the node against its Slurm's spank.h."""


class Enroot(Model):
    """enroot from NVIDIA's release packages, and pyxis (its Slurm plugin) built from source."""

    version: VersionStr
    packages: dict[Arch, list[str]] = Field(min_length=1)
    """Per architecture, the artifacts of the release's .debs: enroot, then enroot+caps if any."""
    pyxis: Pyxis | None = None


class Dcgm(Model):
    """NVIDIA DCGM 4 from the CUDA repository: its core and the package for the stack's CUDA
    major (datacenter-gpu-manager-4-cuda<major>), both at this version."""

    version: VersionStr
    """The upstream version (4.4.2); the role pins the repository's package version to it."""


class PythonPackage(Model):
    version: VersionStr


class PyTorch(Model):
    version: VersionStr
    variant: str = Field(pattern=r"^(cu\d{3}|cpu)$")


Framework = Literal["pytorch", "megatron_core", "transformers", "accelerate", "vllm", "sglang"]
"""The pinned frameworks of a stack, by their field name under `frameworks`."""

_LOCK_PATH = re.compile(
    r"^locks/([A-Za-z0-9_-][A-Za-z0-9._-]*/)*[A-Za-z0-9_-][A-Za-z0-9._-]*\.txt$"
)


_NAME_MAX = 255
"""Bytes in one file or folder name on Linux file systems (ext4, xfs: NAME_MAX)."""


def _lock_path(value: str) -> str:
    if not _LOCK_PATH.match(value):
        raise ValueError(
            "expected a .txt file under locks/ in this catalog, such as "
            "locks/hopper/training-x86_64.txt (no '..', no absolute path)"
        )
    longest = max(value.split("/"), key=len)
    if len(longest.encode()) > _NAME_MAX:
        raise ValueError(
            f"a name of {len(longest.encode())} bytes in the path: file systems allow "
            f"{_NAME_MAX} per file or folder name"
        )
    return value


# Relative to the catalog directory, so that a catalog (and its locks) can move as one folder.
LockPath = Annotated[str, AfterValidator(_lock_path)]


class PythonEnvironment(Model):
    """One virtual environment of the python_ml layer, installed from a hash-checked lock."""

    frameworks: Annotated[list[Framework], AfterValidator(unique)] = Field(min_length=1)
    locks: dict[Arch, LockPath] = Field(default_factory=dict)
    """The lock per architecture (`nodeforge lock` writes it); none yet: the layer refuses it."""
    pytorch: PyTorch | None = None
    """This environment's torch where it is not the stack's: vLLM and SGLang pin torch exactly."""

    @model_validator(mode="after")
    def _own_torch(self) -> PythonEnvironment:
        # each environment carries its own torch: vLLM pins torch, so they cannot share one
        if "pytorch" not in self.frameworks:
            raise ValueError("frameworks must list pytorch: every environment has its own torch")
        return self


class Frameworks(Model):
    python: VersionStr
    pytorch: PyTorch
    vllm: PythonPackage | None = None
    sglang: PythonPackage | None = None
    megatron_core: PythonPackage | None = None
    transformers: PythonPackage | None = None
    accelerate: PythonPackage | None = None
    environments: dict[Name, PythonEnvironment] = Field(default_factory=dict)

    def pin(self, framework: Framework) -> str:
        """The pinned version of a framework the stack sets (checked by the validator)."""
        if framework == "pytorch":
            return self.pytorch.version
        package: PythonPackage | None = getattr(self, framework)
        assert package is not None
        return package.version

    def torch_of(self, environment: str) -> PyTorch:
        """The torch an environment installs: its own pin, else the stack's."""
        return self.environments[environment].pytorch or self.pytorch

    def torch_variants(self) -> list[str]:
        """The variant of every torch the stack installs, the stack's own first, each once."""
        torches = [self.pytorch, *(e.pytorch for e in self.environments.values() if e.pytorch)]
        return list(dict.fromkeys(torch.variant for torch in torches))

    @model_validator(mode="after")
    def _pinned(self) -> Frameworks:
        for name, environment in self.environments.items():
            for framework in environment.frameworks:
                if framework != "pytorch" and getattr(self, framework) is None:
                    raise ValueError(
                        f"environment '{name}' lists {framework}, which has no version: "
                        f"set frameworks.{framework}.version"
                    )
        return self


class Stack(Model):
    name: Name
    description: str
    extends: Name | None = None
    architectures: Annotated[list[Arch], AfterValidator(unique)] = Field(min_length=1)
    driver: Driver
    cuda: Cuda
    nccl: Nccl | None = None
    """None where the distribution packages no NCCL (Debian 12): the nccl layer is then refused."""
    efa: Efa | None = None
    aws_ofi_nccl: AwsOfiNccl | None = None
    gdrcopy: Gdrcopy | None = None
    frameworks: Frameworks | None = None
    container_runtime: ContainerRuntime | None = None
    enroot: Enroot | None = None
    dcgm: Dcgm | None = None
    """None where NVIDIA's repository cannot serve the image (Debian 12's local default):
    gpu_health then installs the watcher, the gate and node_exporter without DCGM."""
    repositories: dict[Name, AptRepository] = Field(default_factory=dict)
    artifacts: dict[Name, Artifact] = Field(default_factory=dict)
    sources: list[str] = Field(min_length=1)
    vars: Vars = Field(default_factory=dict)

    @model_validator(mode="after")
    def _artifact_refs(self) -> Stack:
        refs = {
            "efa.artifact": self.efa.artifact if self.efa else None,
            "aws_ofi_nccl.artifact": self.aws_ofi_nccl.artifact if self.aws_ofi_nccl else None,
            "gdrcopy.artifact": self.gdrcopy.artifact if self.gdrcopy else None,
            "nccl.tests_artifact": self.nccl.tests_artifact if self.nccl else None,
            "enroot.pyxis.artifact": self.enroot.pyxis.artifact
            if self.enroot and self.enroot.pyxis
            else None,
        }
        if self.enroot:
            refs |= {
                f"enroot.packages.{arch}[{i}]": ref
                for arch, names in self.enroot.packages.items()
                for i, ref in enumerate(names)
            }
        for field, ref in refs.items():
            if ref is not None and ref not in self.artifacts:
                raise ValueError(f"{field} names artifact '{ref}', which is not under artifacts")
        if (
            self.aws_ofi_nccl
            and self.aws_ofi_nccl.source == "source"
            and not self.aws_ofi_nccl.artifact
        ):
            raise ValueError("aws_ofi_nccl.source 'source' needs aws_ofi_nccl.artifact")
        if self.container_runtime and "nvidia_container_toolkit" not in self.repositories:
            raise ValueError(
                "container_runtime needs repositories.nvidia_container_toolkit (the toolkit's "
                "apt repository and key)"
            )
        return self


# ---------------------------------------------------------------- images


# gp3's provisioning limits (EC2 API reference, CreateVolume): IOPS 3,000 to 80,000 and at most
# 500 per GiB; throughput 125 to 2,000 MiB/s and at most 0.25 MiB/s per provisioned IOPS.
_GP3_BASELINE_IOPS = 3000
_GP3_IOPS_PER_GIB = 500
_GP3_MIBPS_PER_IOPS = 0.25


class Build(Model):
    builder_instance_type: str
    volume_size_gib: int = Field(ge=8, le=16384)
    volume_iops: int | None = Field(default=None, ge=3000, le=80000)
    """gp3 IOPS of the builder's root volume (default: gp3's 3,000)."""
    volume_throughput_mibps: int | None = Field(default=None, ge=125, le=2000)
    """gp3 throughput of the builder's root volume (default: gp3's 125 MiB/s)."""
    region: str

    @model_validator(mode="after")
    def _gp3_limits(self) -> Build:
        iops = self.volume_iops or _GP3_BASELINE_IOPS
        if self.volume_iops and iops > _GP3_IOPS_PER_GIB * self.volume_size_gib:
            raise ValueError(
                f"volume_iops {iops} is more than gp3 allows for {self.volume_size_gib} GiB "
                f"({_GP3_IOPS_PER_GIB} per GiB): lower it or raise volume_size_gib"
            )
        throughput = self.volume_throughput_mibps
        if throughput and throughput > iops * _GP3_MIBPS_PER_IOPS:
            raise ValueError(
                f"volume_throughput_mibps {throughput} needs at least "
                f"{int(throughput / _GP3_MIBPS_PER_IOPS)} volume_iops on gp3 "
                f"(0.25 MiB/s per IOPS; it has {iops})"
            )
        return self


class Image(Model):
    name: Name
    description: str
    extends: Name | None = None
    os: Name
    arch: Arch
    stack: Name
    profiles: Annotated[list[Name], AfterValidator(unique)] = Field(min_length=1)
    layers: Annotated[list[Layer], AfterValidator(unique)] = Field(min_length=1)
    build: Build
    vars: Vars = Field(default_factory=dict)


class Common(Model):
    """Catalog-wide defaults: the first layer of the resolved vars."""

    vars: Vars = Field(default_factory=dict)
