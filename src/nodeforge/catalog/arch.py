"""The CPU architectures a node can have, apart from the models so that the command line's
grammar (nodeforge.commands.arguments) names them without importing pydantic."""

from __future__ import annotations

from typing import Literal

Arch = Literal["x86_64", "arm64"]
