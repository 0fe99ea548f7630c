"""Every layer in one image: `nodeforge build --target local --reconverge` of the whole stack
(tests/mirror/whole_stack.py) from a catalog copy and the served test mirror. The converge
passes, the second converge changes nothing, the build stage of validation/ passes with no skip
but those the hardware decides, pip and the lock are the catalog copy's and the mirror's, and
`nodeforge drift` on a node of the image finds a changed NCCL environment file and nothing else."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from nodeforge.catalog.models import LAYERS
from nodeforge.local.podman import SystemdContainer
from nodeforge.local.podman import run as podman
from nodeforge.paths import VALIDATION_SUITE
from tests.conftest import SHIPPED
from tests.integration.conftest import (
    build_containers,
    image_id,
    nodeforge_cli,
    require_podman,
)
from tests.mirror import Served
from tests.mirror.whole_stack import IMAGE, LOCK, served_whole_stack

# Its own group (it builds its own image, and build_containers(IMAGE) sees only its own
# containers), so that it runs beside the local-image tests instead of after them.
pytestmark = [pytest.mark.xdist_group("whole_stack"), pytest.mark.runs_long(22)]

# The skips the build stage may report here (validation/'s own reasons), each decided by what a
# container is not: an instance with the profile's hardware ("target stage only", "build stage:
# needs gpu hardware"), a profile with NVLSM, or a stack with pyxis (no layer installs Slurm;
# tests/mirror/whole_stack.py). Any other skip is a defect.
ALLOWED_SKIPS = ("target stage only", "build stage: needs ", "runs no NVLSM", "builds no pyxis")


@pytest.fixture(scope="module")
def whole_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Served]]:
    """(catalog copy, --vars file, served mirror) with the whole-stack image."""
    require_podman()
    with served_whole_stack(tmp_path_factory.mktemp("whole-stack"), SHIPPED) as prepared:
        yield prepared


def test_whole_stack_builds_reconverges_and_validates(
    whole_stack: tuple[Path, Path, Served], tmp_path: Path
) -> None:
    catalog, overrides, served = whole_stack
    others = set(build_containers(IMAGE))  # another test's leftover is that test's failure
    result = nodeforge_cli(
        "build",
        IMAGE,
        "--target",
        "local",
        "--reconverge",
        "--json",
        "--catalog",
        str(catalog),
        "--vars",
        str(overrides),
        "--work-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    assert summary["changed"] > 0
    assert summary["reconverge"]["changed"] == 0
    assert set(LAYERS) <= set(summary["role_seconds"])
    assert summary["bom"]["kernel"].startswith("linux-image-cloud-amd64 ")
    assert image_id(summary["image_ref"]) is not None
    assert set(build_containers(IMAGE)) - others == set()
    # live progress went to stderr, task by task
    assert "base : Packages | install what is missing" in result.stderr

    report = json.loads((tmp_path / "validation-build.json").read_text(encoding="utf-8"))
    outcomes = {c["id"]: c for c in report["checks"]}
    assert not [c for c in outcomes.values() if c["outcome"] not in ("passed", "skipped")]
    unexpected = [
        f"{c['id']}: {c['message']}"
        for c in outcomes.values()
        if c["outcome"] == "skipped" and not any(a in c["message"] for a in ALLOWED_SKIPS)
    ]
    assert not unexpected
    # every layer's validation file (image_cleanup's is test_image.py) passed checks on the node
    files = {f"test_layer_{layer}.py" for layer in LAYERS} | {"test_image.py"}
    files &= {p.name for p in VALIDATION_SUITE.glob("test_*.py")}
    passed = {c["id"].split("::")[0] for c in outcomes.values() if c["outcome"] == "passed"}
    assert len(files) == len(LAYERS)
    assert files <= passed, sorted(files - passed)

    # the lock came from the catalog in use (the shipped one has no such file) ...
    rendered = json.loads((tmp_path / "vars.json").read_text(encoding="utf-8"))
    assert [e["lock"] for e in rendered["python_ml_environments"]] == [str(catalog / LOCK)]
    # ... and pip read only the mirror's indexes and took every locked file from it
    [train] = rendered["python_ml_environments"]
    assert train["index_urls"] and all(
        url.startswith(served.mirror.url_of("")) for url in train["index_urls"]
    )
    assert "/pypi.org/simple/torch/" in served.server.requests
    wheels = sorted(p.name for p in (served.mirror.root / "pypi.org" / "files").iterdir())
    # pip quotes each path part of a link (torch-2.13.0%2Bcpu-...): compare unquoted names
    fetched = {unquote(path.split("?")[0]).rsplit("/", 1)[-1] for path in served.server.requests}
    assert wheels
    assert not [w for w in wheels if w not in fetched]
    # a node of the image: its only drift is the NCCL environment file changed on it
    with SystemdContainer(summary["image_ref"]) as node:
        to_sockets = 's/^NCCL_NET="AWS Libfabric"$/NCCL_NET="Socket"/'
        podman(["exec", node.name, "sed", "-i", to_sockets, "/etc/nodeforge/nccl.env"])
        drift = nodeforge_cli(
            "drift", "--hosts", f"podman://{node.name}", "--catalog", str(catalog),
            "--vars", str(overrides), "--report-dir", str(tmp_path / "drift"), "--json",
        )  # fmt: skip
    assert drift.returncode == 1, drift.stderr[-3000:]
    [found] = json.loads(drift.stdout)["nodes"]
    assert [d["check"].split("[")[0] for d in found["drifted"]] == ["test_nccl_environment"]
