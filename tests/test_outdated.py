"""`nodeforge outdated` against a PEP 503 index on loopback, reached through `mirror:` as an
air-gapped build reaches PyPI: the shipped hopper locks' files all served (nothing to report),
one deleted, one yanked, a newer framework release, and an index that does not answer."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeforge.cli import main
from nodeforge.lock import canonical, read_lock
from nodeforge.outdated import newest_final, parse_simple_page
from tests.conftest import SHIPPED
from tests.mirror.server import MirrorServer, serve_directory

STACK = "hopper-2026.12"


def _page(files: list[tuple[str, str, bool]]) -> str:
    links = "".join(
        f'<a href="../../files/{html.escape(name)}#sha256={sha}"'
        + (' data-yanked=""' if yanked else "")
        + f">{html.escape(name)}</a><br/>\n"
        for name, sha, yanked in files
    )
    return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"


class Index:
    """pypi.org/simple/<project>/index.html for every file the stack's locks pin."""

    def __init__(self, root: Path) -> None:
        self.root = root / "pypi.org" / "simple"
        self.files: dict[str, list[tuple[str, str, bool]]] = {}
        for path in sorted((SHIPPED / "locks" / STACK).glob("*.txt")):
            for requirement in read_lock(path).requirements:
                project = canonical(requirement.name)
                wheel = f"{project.replace('-', '_')}-{requirement.version}-py3-none-any.whl"
                entry = (wheel, requirement.hashes[0], False)
                if entry not in self.files.setdefault(project, []):
                    self.files[project].append(entry)
        self.write()

    def write(self) -> None:
        for project, files in self.files.items():
            folder = self.root / project
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "index.html").write_text(_page(files), encoding="utf-8")


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[Index, MirrorServer, Path]]:
    """(the index, its server, a --vars file naming it as the mirror)."""
    served = Index(tmp_path / "mirror")
    with serve_directory(tmp_path / "mirror") as server:
        overrides = tmp_path / "vars.yml"
        overrides.write_text(f"mirror: {server.url}\n", encoding="utf-8")
        yield served, server, overrides


def _outdated(
    capsys: pytest.CaptureFixture[str], overrides: Path, *extra: str
) -> tuple[int, list[dict[str, str]]]:
    """Exit code and findings of `outdated --json`."""
    code = main(["outdated", STACK, "--source", "pypi", "--vars", str(overrides), "--json", *extra])
    report = json.loads(capsys.readouterr().out)
    assert report["stack"] == STACK
    findings: list[dict[str, str]] = report["findings"]
    return code, findings


def test_everything_served_reports_nothing(
    index: tuple[Index, MirrorServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, server, overrides = index
    code = main(["outdated", STACK, "--source", "pypi", "--vars", str(overrides)])
    out, err = capsys.readouterr()
    assert code == 0
    summary = "3 lock(s) checked: 0 pin(s) gone, unverified or unreachable, 0 newer release(s)"
    assert f"{STACK}: {summary}" in out
    # progress, through the mirror
    assert f"[pypi 1/3] train x86_64: {server.url}pypi.org/simple" in err
    assert any(r.startswith("/pypi.org/simple/torch/") for r in server.requests)


def test_a_deleted_file_no_longer_resolves(
    index: tuple[Index, MirrorServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    served, _, overrides = index
    served.files["mdurl"] = []
    served.write()
    code, findings = _outdated(capsys, overrides)
    assert code == 1
    # every environment whose lock pins it
    assert {f["environment"] for f in findings} == {"train", "serve", "sglang"}
    assert all(f["kind"] == "gone" and f["pinned"].startswith("mdurl==") for f in findings)


def test_a_yanked_file_no_longer_resolves(
    index: tuple[Index, MirrorServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    served, _, overrides = index
    served.files["accelerate"] = [(n, s, True) for n, s, _ in served.files["accelerate"]]
    served.write()
    code, findings = _outdated(capsys, overrides)
    assert code == 1
    [finding] = findings
    assert finding["kind"] == "yanked" and "is yanked" in finding["detail"]


def test_a_newer_framework_release_is_reported(
    index: tuple[Index, MirrorServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    served, _, overrides = index
    served.files["transformers"].append(("transformers-5.26.0-py3-none-any.whl", "f" * 64, False))
    served.files["transformers"].append(("transformers-6.0.0rc1-py3-none-any.whl", "e" * 64, False))
    served.write()
    code, findings = _outdated(capsys, overrides)
    assert code == 0  # a newer release is news, not a broken build
    [finding] = findings
    assert finding["kind"] == "newer" and finding["environment"] == "train"
    assert finding["detail"] == "5.26.0 is out (the stack pins 5.25.0)"
    assert _outdated(capsys, overrides, "--fail-on-newer")[0] == 1


def test_an_index_that_does_not_answer(
    index: tuple[Index, MirrorServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, server, overrides = index
    server.fail_with(503)
    code, findings = _outdated(capsys, overrides)
    assert code == 1
    assert {f["kind"] for f in findings} == {"unreachable"}
    assert len(findings) == 3  # one per lock


def test_parse_simple_page_and_newest_final() -> None:
    files = parse_simple_page(
        _page(
            [
                ("vllm-0.33.0-cp38-abi3-manylinux_2_31_x86_64.whl", "a" * 64, False),
                ("vllm-0.34.0.tar.gz", "b" * 64, False),
                ("vllm-0.35.0rc1.tar.gz", "c" * 64, False),
                ("vllm-0.36.0.tar.gz", "d" * 64, True),
            ]
        )
    )
    assert [f.sha256 for f in files] == ["a" * 64, "b" * 64, "c" * 64, "d" * 64]
    assert [f.yanked for f in files] == [False, False, False, True]
    assert newest_final(files, "vllm") == "0.34.0"


def test_unknown_stack_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["outdated", "hopper-2027.01"]) == 2
    assert "no stack 'hopper-2027.01'" in capsys.readouterr().err
