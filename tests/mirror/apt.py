"""Run the host's apt-get against mirror repositories only, touching no host apt state."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path


class IsolatedApt:
    """apt-get with its own sources list, lists, cache and an empty trusted keyring set, so that
    only a source's `signed-by=` key can make a repository trusted."""

    def __init__(self, workdir: Path, sources: Sequence[str]) -> None:
        self.workdir = workdir
        for sub in ("lists/partial", "cache/archives/partial", "trusted.gpg.d", "downloads"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.sourcelist = workdir / "sources.list"
        self.sourcelist.write_text("".join(f"{line}\n" for line in sources), encoding="utf-8")
        self.downloads = workdir / "downloads"

    def options(self) -> list[str]:
        settings = {
            "Dir::Etc::sourcelist": str(self.sourcelist),
            "Dir::Etc::sourceparts": "-",
            "Dir::Etc::trusted": str(self.workdir / "trusted.gpg"),
            "Dir::Etc::trustedparts": str(self.workdir / "trusted.gpg.d"),
            "Dir::State::Lists": str(self.workdir / "lists"),
            "Dir::Cache": str(self.workdir / "cache"),
            "APT::Get::List-Cleanup": "0",
            "APT::Sandbox::User": "root",
            "Acquire::Retries": "0",
            "Acquire::http::Proxy": "DIRECT",
            "Acquire::Languages": "none",
            "Debug::NoLocking": "1",
        }
        return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
        return subprocess.run(
            ["apt-get", "-q", *self.options(), *args],
            cwd=self.downloads,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
