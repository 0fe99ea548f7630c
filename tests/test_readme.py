"""The README's promises: the two commands open it, and the support matrix is current."""

from __future__ import annotations

import re

from tools.readme_matrix import END, START, render_section

from tests.conftest import REPO, SHIPPED


def test_readme_opens_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block is not None
    assert readme.index("```sh") < readme.index("## Concepts")
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make quickstart", "make test"]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("quickstart", "test"):
        assert re.search(rf"^{target}:", makefile, re.M)


def test_ci_runs_the_readme_commands() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "make quickstart" in ci and "make test" in ci


def test_support_matrix_is_current() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    current = readme[readme.index(START) : readme.index(END) + len(END)]
    assert current == render_section(SHIPPED), "stale support matrix: run `make readme`"
