"""A build target (one image for one profile) and the facts derived from its catalog entries.

Rules and render both read these derivations, so a check and the vars it vouches for cannot
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nodeforge.catalog.compat import Compat
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Image, OsArch, OsEntry, Profile, Stack
from nodeforge.catalog.placeholders import fill
from nodeforge.errors import InputError
from nodeforge.versions import Version


@dataclass(frozen=True)
class Target:
    image: Image
    os: OsEntry
    stack: Stack
    profile: Profile
    compat: Compat
    catalog_root: Path
    """The catalog the target comes from: its locks are files under it."""

    @property
    def os_arch(self) -> OsArch | None:
        return self.os.architectures.get(self.image.arch)

    def layer(self, name: str) -> bool:
        return name in self.image.layers

    def driver_flavour(self) -> Literal["open", "proprietary"]:
        flavour = self.stack.driver.flavour
        if flavour != "profile":
            return flavour
        return "proprietary" if self.profile.driver.open_modules == "unsupported" else "open"

    def fabric_packages(self) -> dict[str, str] | None:
        """Fabric manager and IMEX package names for this OS family and driver branch; the
        role installs them at the driver's exact version."""
        driver = self.stack.driver
        naming = self.compat.fabric_names(self.os.package_family, driver.branch)
        if naming is None:
            return None
        branch = str(driver.branch)
        return {
            "fabric_manager": fill(naming.fabric_manager, {"branch": branch}),
            "imex": fill(naming.imex, {"branch": branch}),
        }

    def ofi_nccl_version(self) -> Version | None:
        """The aws-ofi-nccl the node gets: the installer's bundled one, or the source build's."""
        plugin = self.stack.aws_ofi_nccl
        if plugin is None:
            return None
        if plugin.source == "efa-installer" and self.stack.efa is not None:
            bundle = self.compat.efa_bundle(Version(self.stack.efa.installer_version))
            if bundle is not None:
                return Version(bundle.aws_ofi_nccl)
        return Version(plugin.version)

    def pinned_versions(self) -> dict[str, str]:
        """The stack's pins for the enabled layers, by component: the bill of materials that
        AMI tags and the local build's summary both report."""
        stack = self.stack
        pins: dict[str, str | None] = {
            "driver": f"{stack.driver.version} {self.driver_flavour()}"
            if self.layer("nvidia_driver")
            else None,
            "cuda": " ".join(stack.cuda.toolkits) if self.layer("cuda_toolkit") else None,
            "nccl": stack.nccl.version if self.layer("nccl") and stack.nccl else None,
            "efa-installer": stack.efa.installer_version
            if self.layer("efa") and stack.efa
            else None,
            "aws-ofi-nccl": str(ofi)
            if self.layer("aws_ofi_nccl") and (ofi := self.ofi_nccl_version())
            else None,
            "gdrcopy": stack.gdrcopy.version if self.layer("gdrcopy") and stack.gdrcopy else None,
            "enroot": stack.enroot.version if self.layer("enroot") and stack.enroot else None,
            "pyxis": stack.enroot.pyxis.version
            if self.layer("enroot") and stack.enroot and stack.enroot.pyxis
            else None,
            "pytorch": f"{stack.frameworks.pytorch.version}+{stack.frameworks.pytorch.variant}"
            if self.layer("python_ml") and stack.frameworks
            else None,
        }
        return {component: pin for component, pin in pins.items() if pin is not None}


def targets(catalog: Catalog, images: list[str] | None = None) -> list[Target]:
    """Every (image, profile) pair of the named images, or of all images."""
    names = images if images else sorted(catalog.images)
    chosen = [image_of(catalog, name) for name in names]
    return [
        target_for(catalog, image.name, profile) for image in chosen for profile in image.profiles
    ]


def image_of(catalog: Catalog, name: str) -> Image:
    """The catalog's image of that name, or InputError with the names there are."""
    if name not in catalog.images:
        raise InputError(
            f"unknown image '{name}'",
            file=catalog.root,
            fix=f"use one of: {', '.join(sorted(catalog.images))} (nodeforge list)",
        )
    return catalog.images[name]


def stack_of(catalog: Catalog, name: str) -> Stack:
    """The catalog's stack of that name, or InputError with the names there are."""
    if name not in catalog.stacks:
        raise InputError(
            f"no stack '{name}'",
            file=catalog.root / "stacks",
            fix=f"pick one of: {', '.join(sorted(catalog.stacks))}",
        )
    return catalog.stacks[name]


def target_for(catalog: Catalog, image_name: str, profile_name: str | None) -> Target:
    image = image_of(catalog, image_name)
    if profile_name is None:
        if len(image.profiles) != 1:
            raise InputError(
                f"image '{image_name}' targets several profiles",
                file=catalog.file_of("images", image_name),
                field="profiles",
                fix=f"pass --profile with one of: {', '.join(image.profiles)}",
            )
        profile_name = image.profiles[0]
    if profile_name not in image.profiles:
        raise InputError(
            f"profile '{profile_name}' is not a target of image '{image_name}'",
            file=catalog.file_of("images", image_name),
            field="profiles",
            fix=f"pass --profile with one of: {', '.join(image.profiles)}, or add it to the image",
        )
    return Target(
        image=image,
        os=catalog.os[image.os],
        stack=catalog.stacks[image.stack],
        profile=catalog.profiles[profile_name],
        compat=catalog.compat,
        catalog_root=catalog.root,
    )
