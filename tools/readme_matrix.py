"""Rewrite the support matrix section of README.md from the catalog (`make readme`)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodeforge.catalog.loader import load_catalog
from nodeforge.matrix import HEADERS, support_rows
from nodeforge.table import markdown_table

START, END = "<!-- matrix:start -->", "<!-- matrix:end -->"


def render_section(catalog_dir: Path) -> str:
    table = markdown_table(HEADERS, support_rows(load_catalog(catalog_dir)))
    return f"{START}\n{table}\n{END}"


def splice(readme: str, section: str) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return head + section + tail


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        print(f"{readme}: markers {START} / {END} are missing", file=sys.stderr)
        return 2
    readme.write_text(splice(text, render_section(root / "images")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
