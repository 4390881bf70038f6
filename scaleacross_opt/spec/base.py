"""Base class of every schema: strict (unknown keys are errors), immutable, documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown fields and cannot be mutated after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, allow_inf_nan=False)
