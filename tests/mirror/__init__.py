"""A local artifact mirror for tests: stub apt repositories and tarballs laid out like upstream,
signed by a throwaway key, served on loopback. A test fixture, never a product default.

    mirror = build_mirror(tmp_path / "mirror", default_spec())
    with serve(mirror) as served:
        overlay = write_overlay(catalog_dir, "p5-ubuntu24.04", served.mirror, tmp_path / "o.yml")
"""

from tests.mirror.apt import IsolatedApt
from tests.mirror.aptrepo import BuiltRepo, RepoSpec, build_repo
from tests.mirror.build import Mirror, Served, build_mirror, molecule_env, serve
from tests.mirror.debs import DebSpec, build_deb
from tests.mirror.gpg import SigningKey, throwaway_key, verify_detached
from tests.mirror.overlay import (
    MirrorGapError,
    Overlay,
    stack_overrides,
    target_placeholders,
    write_image_overlay,
    write_overlay,
    write_overrides,
    write_stack_overlay,
)
from tests.mirror.server import MirrorServer, serve_directory
from tests.mirror.spec import MirrorSpec, add_reference_stacks, default_spec
from tests.mirror.tarballs import BuiltTarball, TarballSpec, build_tarball

__all__ = [
    "BuiltRepo",
    "BuiltTarball",
    "DebSpec",
    "IsolatedApt",
    "Mirror",
    "MirrorGapError",
    "MirrorServer",
    "MirrorSpec",
    "Overlay",
    "RepoSpec",
    "Served",
    "SigningKey",
    "TarballSpec",
    "add_reference_stacks",
    "build_deb",
    "build_mirror",
    "build_repo",
    "build_tarball",
    "default_spec",
    "molecule_env",
    "serve",
    "serve_directory",
    "stack_overrides",
    "target_placeholders",
    "throwaway_key",
    "verify_detached",
    "write_image_overlay",
    "write_overlay",
    "write_overrides",
    "write_stack_overlay",
]
