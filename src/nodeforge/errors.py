"""What ends a command badly, and the exit code each end gives."""

from __future__ import annotations

from pathlib import Path

EXIT_OK, EXIT_VIOLATIONS, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class InputError(Exception):
    """Unreadable or invalid input: names the file, the field, the line and the fix.

    A plain exception class rather than a frozen dataclass: Python sets `__traceback__` on an
    exception as it travels (through contextlib's context managers among others), which a
    frozen dataclass refuses.
    """

    def __init__(
        self,
        message: str,
        *,
        file: Path | None = None,
        field: str | None = None,
        line: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.field = field
        self.line = line
        self.fix = fix

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        fix = f" Fix: {self.fix}" if self.fix else ""
        text = f"{where}{field}{self.message.rstrip('.')}.{fix}"
        return " ".join(text.split())  # one paragraph, whatever a parser put in its message


class BuildFailedError(Exception):
    """The build ran and failed (a task, or a validation check); exit code 1."""
