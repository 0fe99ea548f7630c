"""Tiny real ELF shared libraries for stub packages, so that ldconfig, ldd and the dynamic
loader treat them as libraries: a soname, a banner string, and DT_NEEDED entries that resolve on
the node against real libraries (Debian's libfabric, say).

Built with the host's gcc; the same input gives the same bytes, so tarballs that carry them keep
a stable sha256.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path


@functools.cache
def shared_library(
    soname: str, banner: str, needed: tuple[str, ...] = (), source: str = ""
) -> bytes:
    """A library named `soname` that holds `banner` (what `grep -a` probes find), needs
    `needed` (sonames) at load time, and defines what the C `source` defines (the entry points a
    probe or a program linked against it calls)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build the stub mirror's shared libraries")
    with tempfile.TemporaryDirectory(prefix="nf-elf-") as tmp:
        work = Path(tmp)
        links: list[str] = []
        for index, dependency in enumerate(needed):
            # an empty library with the right soname is all the linker needs to record it
            (work / f"dep{index}.c").write_text("int nodeforge_stub_dependency;\n")
            _gcc(gcc, work, dependency, f"dep{index}.c")
            links.append(f"-l:{dependency}")
        escaped = banner.replace("\\", "\\\\").replace('"', '\\"')
        (work / "lib.c").write_text(f'const char nodeforge_stub_banner[] = "{escaped}";\n{source}')
        _gcc(gcc, work, soname, "lib.c", "-Wl,--no-as-needed", f"-L{work}", *links)
        return (work / soname).read_bytes()


def _gcc(gcc: str, work: Path, soname: str, source: str, *extra: str) -> None:
    result = subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", soname, f"-Wl,-soname,{soname}", source, *extra],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"gcc could not build {soname}: {result.stderr.strip()}")
