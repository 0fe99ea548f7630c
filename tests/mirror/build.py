"""Build a whole mirror into a folder, and serve it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.mirror.aptrepo import BuiltRepo, build_repo
from tests.mirror.gpg import throwaway_key
from tests.mirror.rpmrepo import BuiltRpmRepo, build_rpm_repo
from tests.mirror.server import MirrorServer, serve_directory
from tests.mirror.spec import MirrorSpec
from tests.mirror.tarballs import BuiltTarball, build_tarball

KEY_DIR = "_nodeforge-stub-key"


@dataclass(frozen=True)
class Mirror:
    """A built mirror. Paths in `repositories` and `tarballs` are upstream host + path."""

    root: Path
    fingerprint: str
    key_path: Path
    """The public key, ASCII-armored (what NVIDIA's 3bf863cc.pub holds)."""
    keyring_path: Path
    """The same key as a binary keyring, for apt's signed-by."""
    repositories: Mapping[str, BuiltRepo]
    tarballs: Mapping[str, BuiltTarball]
    key_files: tuple[str, ...] = ()
    """Where else the armored public key is published (artifacts' key_url)."""
    rpm_repositories: Mapping[str, BuiltRpmRepo] = field(default_factory=dict)
    url: str | None = None

    @property
    def sha256(self) -> dict[str, str]:
        return {path: built.sha256 for path, built in self.tarballs.items()}

    def served_at(self, url: str) -> Mirror:
        return replace(self, url=url)

    def url_of(self, path: str) -> str:
        if self.url is None:
            raise RuntimeError("the mirror is not served: use `with serve(mirror)`")
        return f"{self.url.rstrip('/')}/{path.lstrip('/')}"

    def apt_source(self, path: str) -> str:
        """sources.list line for the repository at `path`, signed-by the stub keyring."""
        return self.repositories[path.strip("/")].apt_source(self.url_of(""), self.keyring_path)


@dataclass(frozen=True)
class Served:
    mirror: Mirror
    server: MirrorServer


def build_mirror(root: Path, spec: MirrorSpec) -> Mirror:
    """Build `spec` into `root` (served as is) with a throwaway key that is deleted afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    with throwaway_key(spec.key_uid) as key:
        repos = {repo.path: repo for repo in (build_repo(root, r, key) for r in spec.repositories)}
        tarballs = {t.path: t for t in (build_tarball(root, s, key) for s in spec.tarballs)}
        rpm_repos = {
            r.path: r for r in (build_rpm_repo(root, s, key) for s in spec.rpm_repositories)
        }
        key_path = key.export(root / KEY_DIR / "stub-key.asc", armor=True)
        keyring_path = key.export(root / KEY_DIR / "stub-key.gpg", armor=False)
        for published in spec.key_files:
            key.export(root / published.strip("/"), armor=True)
        fingerprint = key.fingerprint
    return Mirror(
        root, fingerprint, key_path, keyring_path, repos, tarballs, spec.key_files, rpm_repos
    )


@contextmanager
def serve(mirror: Mirror) -> Iterator[Served]:
    with serve_directory(mirror.root) as server:
        yield Served(mirror.served_at(server.url), server)


def molecule_env(mirror: Mirror) -> dict[str, str]:
    """What Molecule scenarios read to reach a served mirror: its base URL, the throwaway key's
    fingerprint that signed the repositories and tarballs on it, the tarballs' sha256 (JSON)."""
    return {
        "NODEFORGE_TEST_MIRROR": mirror.url_of(""),
        "NODEFORGE_TEST_MIRROR_FINGERPRINT": mirror.fingerprint,
        "NODEFORGE_TEST_MIRROR_SHA256": json.dumps(mirror.sha256, sort_keys=True),
    }
