"""What every parser returns: frozen pydantic records that refuse fields they do not declare."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
