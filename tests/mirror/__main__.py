"""Serve the default test mirror for a Molecule run by hand, until Ctrl-C.

In one terminal `.venv/bin/python -m tests.mirror` serves the stub NVIDIA/EFA mirror and the CI
lock's PyPI index, and prints the export lines the scenarios read
(`tests/integration/test_molecule.py` sets the same variables when pytest runs them); paste
them into the terminal that runs `molecule test -s efa`.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import tempfile
import threading
from pathlib import Path

from tests.mirror.build import build_mirror, molecule_env, serve
from tests.mirror.pypi import pypi_env, serve_pypi, served_locks
from tests.mirror.spec import default_spec


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nodeforge-mirror-") as tmp:
        mirror = build_mirror(Path(tmp) / "mirror", default_spec())
        with (
            serve(mirror) as served,
            serve_pypi(Path(tmp) / "pypi", served_locks()) as pypi,
        ):
            env = {**molecule_env(served.mirror), **pypi_env(pypi)}
            for name, value in env.items():
                print(f"export {name}={shlex.quote(value)}", flush=True)
            print(f"serving {tmp} until Ctrl-C", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()


if __name__ == "__main__":
    main()
