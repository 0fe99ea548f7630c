"""`nodeforge diagnose [FILE ...|-]`: a verdict on each tool output given."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from nodeforge.catalog.yamlfile import read_bounded
from nodeforge.diagnose import Diagnosis, diagnose
from nodeforge.errors import EXIT_INPUT, EXIT_OK, EXIT_VIOLATIONS, InputError
from nodeforge.render import to_json

# kernel logs of a long-running node are the largest input; a day of journal fits
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_STDIN = Path("-")


def diagnose_files(args: argparse.Namespace, out: TextIO) -> int:
    files: list[Path] = args.files or [_STDIN]
    if files.count(_STDIN) > 1:
        raise InputError("standard input can be read once", field="FILE", fix="give - once")
    found = [diagnose(_read(path), str(path)) for path in files]
    if args.json:
        out.write(to_json({"diagnoses": [d.as_dict() for d in found]}))
    else:
        for number, diagnosis in enumerate(found):
            out.write(("\n" if number else "") + _text(diagnosis))
    if any(d.verdict == "fault" for d in found):
        return EXIT_VIOLATIONS
    return EXIT_INPUT if any(d.verdict == "unreadable" for d in found) else EXIT_OK


def _read(path: Path) -> str:
    if path == _STDIN:
        data = sys.stdin.buffer.read(MAX_OUTPUT_BYTES + 1)
        if len(data) > MAX_OUTPUT_BYTES:
            raise InputError(
                f"standard input is larger than the {MAX_OUTPUT_BYTES}-byte limit",
                fix="give the part of the output that matters (tail, or one boot's log)",
            )
    else:
        data = read_bounded(path, MAX_OUTPUT_BYTES, "tool outputs")
    # pasted outputs carry whatever bytes the terminal had: never a reason to refuse them
    return data.decode("utf-8", "replace")


def _text(d: Diagnosis) -> str:
    lines = [f"{d.source}: {d.verdict} ({d.kind}): {d.reason}"]
    if d.action:
        lines.append(f"  action: {d.action}")
    label = "  expected: " if d.verdict == "unreadable" else "  - "
    lines += [f"{label}{detail}" for detail in d.details[:20]]
    if len(d.details) > 20:
        lines.append(f"  ... and {len(d.details) - 20} more (--json lists them all)")
    return "\n".join(lines) + "\n"
