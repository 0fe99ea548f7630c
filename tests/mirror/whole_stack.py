"""The whole stack in one image: every layer of the catalog model, composed on Debian 12 and
installed from a served test mirror, for `nodeforge build --target local` (tests and bench).

The image extends the embedded default and takes the mirror's reference stack (hopper-2026.11,
tests/fixtures/stacks/) through its mirror overlay (upstream URLs, stub keys and checksums).
Three things differ from a GPU image, each because of what these machines can reach:

- Debian 12, not 13: the one CPU build of torch on hand is for CPython 3.11 (Debian 12's
  python3); PyPI's Linux x86_64 torch wheels are CUDA builds of several GB, and
  download.pytorch.org is out of reach.
- The train environment installs the CI lock (torch CPU and the stack's pins), copied into
  the catalog under its own path: a build that read the shipped catalog's locks would fail.
  pip reads it from `<mirror>/pypi.org/simple`, which the mirror serves beside the packages.
- enroot without pyxis: pyxis compiles against Slurm's headers, and no layer installs Slurm.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from nodeforge.catalog.models import LAYERS
from tests.mirror.build import Mirror, Served, build_mirror, serve
from tests.mirror.enroot import ENROOT_RELEASE
from tests.mirror.overlay import STUB_SOURCE, write_overrides, write_stack_overlay
from tests.mirror.pypi import CI_LOCK, build_index, served_locks
from tests.mirror.spec import ENROOT, add_reference_stacks, default_spec

IMAGE = "whole-stack-debian12"
PROFILE = "p5.48xlarge"
STACK = "hopper-2026.11"
LOCK = "locks/whole-stack/train-x86_64.txt"


def add_pypi(mirror: Mirror) -> None:
    """The wheels of the CI lock and the node tools' lock under `<mirror>/pypi.org/` (simple/
    and files/), as a mirror of PyPI lays them out for `mirror:`; call before serving."""
    build_index(mirror.root / "pypi.org", served_locks())


def _enroot(mirror: Mirror) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stack's enroot section (no pyxis) and the artifacts it names."""
    artifacts: dict[str, Any] = {}
    for name, package in (("enroot_deb", "enroot"), ("enroot_caps_deb", "enroot+caps")):
        path = ENROOT_RELEASE.format(version=ENROOT, package=package, arch="amd64")
        artifacts[name] = {
            "url": f"https://{path}",
            "sha256": mirror.sha256[path],
            "source": STUB_SOURCE,
        }
    section = {"version": ENROOT, "packages": {"x86_64": list(artifacts)}}
    return section, artifacts


def write_whole_stack(catalog_dir: Path, mirror: Mirror, vars_file: Path) -> Path:
    """Add the image, its stack overlay and its lock to the catalog copy; write the --vars file
    that points every download at the served mirror. Returns the --vars file."""
    if mirror.url is None:
        raise RuntimeError("serve the mirror first: the --vars file needs its URL")
    add_reference_stacks(catalog_dir)
    stack_file = write_stack_overlay(catalog_dir, STACK, mirror)
    stack = yaml.safe_load(stack_file.read_text(encoding="utf-8"))
    enroot, enroot_artifacts = _enroot(mirror)
    # the parent's pins stay (extends merges); the interpreter and torch build are those on hand
    stack["frameworks"] = {
        "python": "3.11",
        "pytorch": {"version": "2.13.0", "variant": "cpu"},
        "environments": {
            "train": {
                "frameworks": ["pytorch", "megatron_core", "transformers", "accelerate"],
                "locks": {"x86_64": LOCK},
            }
        },
    }
    stack["enroot"] = enroot
    stack["artifacts"] = {**stack.get("artifacts", {}), **enroot_artifacts}
    stack_file.write_text(yaml.safe_dump(stack, sort_keys=False), encoding="utf-8")
    lock = catalog_dir / LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CI_LOCK, lock)
    image = {
        "name": IMAGE,
        "description": "Every layer in one image, from the test mirror",
        "extends": "local-debian13",
        "os": "debian12",
        "stack": stack["name"],
        "profiles": [PROFILE],
        "layers": list(LAYERS),
        # byte-compiling torch's tree is most of the environment's install time; an image
        # built for real keeps the default
        "vars": {"python_ml_compile_bytecode": False},
    }
    (catalog_dir / f"{IMAGE}.yml").write_text(yaml.safe_dump(image), encoding="utf-8")
    return write_overrides(vars_file, mirror.url)


@contextmanager
def served_whole_stack(root: Path, catalog: Path) -> Iterator[tuple[Path, Path, Served]]:
    """(catalog copy, --vars file, served mirror) under `root`, with the whole-stack image in
    a copy of `catalog`, while the block runs."""
    copy = root / "images"
    shutil.copytree(catalog, copy)
    mirror = build_mirror(root / "mirror", default_spec())
    add_pypi(mirror)
    with serve(mirror) as served:
        yield copy, write_whole_stack(copy, served.mirror, root / "mirror-vars.yml"), served
