"""Base classes of the wire contract: every model is frozen and forbids unknown fields."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# A resource vector on the wire: kind -> amount. Kinds are validated by the consumer against the
# kinds its tree declares; amounts must be finite and non-negative wherever they describe demand.
Resources = dict[str, float]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
ResourceAmounts = dict[str, NonNegative]


class Frozen(BaseModel):
    """A value of the wire contract: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Event(Frozen):
    """An immutable fact in the past tense. Subclasses set `type` and `version` literals."""

    type: str
    version: int
