"""`budgets.NAME:`, a byte budget shared by several logs: its size and, per log, a weight and a
floor. How a budget is enforced: docs/concepts.md (Shared byte budgets); the decision is
:mod:`policies.byte_budgets`. Which logs exist is the whole file's to check (``RetentionConfig``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, Field, WrapSerializer, field_validator, model_validator

from policies.config.fields import (ByteSize, Name, NonNegativeByteSize, _Strict, _config_problem,
                                    _frozen_mapping)
from policies.units import describe_value, format_size

__all__ = ["BudgetConfig", "BudgetLogConfig"]


class BudgetLogConfig(_Strict):
    """One log's part of a budget. Immutable."""

    weight: float = Field(
        default=1.0,
        description="The log's weight: its share is the budget's bytes x weight / the weights' total. "
        "A positive number; default 1.",
    )
    floor: NonNegativeByteSize = Field(
        default=0,
        description="Bytes below which the log's share never falls, whatever the weights: an integer or "
        "'10GiB'. The floors together fit in the budget's bytes; default 0.",
    )

    @field_validator("weight", mode="plain")
    @classmethod
    def _check_weight(cls, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number such as 1 or 2.5, got {describe_value(value)}")
        if not value > 0 or value == float("inf"):
            raise ValueError(f"must be a positive number, got {value!r}")
        return float(value)


def _empty_is_default(value: object) -> object:
    """``b:`` or ``b: {}`` in a budget's logs: the log with weight 1 and floor 0."""
    return {} if value is None else value


BudgetLogs = Annotated[Mapping[Name, BudgetLogConfig], AfterValidator(_frozen_mapping),
                       WrapSerializer(lambda value, handler: handler(dict(value)))]


class BudgetConfig(_Strict):
    """A byte budget shared by several logs (docs/concepts.md, Shared byte budgets). Immutable."""

    bytes: ByteSize = Field(
        description="Most bytes of segment files the budget's logs keep together: while their total is "
        "larger, the log furthest above its share gives up its oldest deletable segment first. An integer "
        "or '300GiB'; required.",
    )
    logs: BudgetLogs = Field(
        description="Log name -> {weight, floor} (both optional: `b: {}`); each log in logs, in one "
        "budget at most. Required, at least one log.",
    )

    @field_validator("logs", mode="before")
    @classmethod
    def _defaults_for_empty(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {key: _empty_is_default(item) for key, item in value.items()}
        return value

    @model_validator(mode="after")
    def _check_floors(self) -> BudgetConfig:
        if not self.logs:
            raise _config_problem("must name at least one log", "logs")
        floors = sum(part.floor for part in self.logs.values())
        if floors > self.bytes:
            raise _config_problem(f"the floors add up to {format_size(floors)}, more than the budget's bytes "
                                  f"{format_size(self.bytes)}", "logs")
        return self

    def share(self, log: str) -> int:
        """``log``'s share in bytes: ``bytes x weight / total weight``, never below its floor. The
        weights are scaled by the largest first, so any finite ones (1e308 beside 1e-7) give a
        fraction of ``bytes`` rather than an infinite or NaN product."""
        top = max(part.weight for part in self.logs.values())
        fraction = (self.logs[log].weight / top) / sum(part.weight / top for part in self.logs.values())
        return max(self.logs[log].floor, int(self.bytes * fraction))


Budgets = Annotated[Mapping[Name, BudgetConfig], AfterValidator(_frozen_mapping),
                    WrapSerializer(lambda value, handler: handler(dict(value)))]
