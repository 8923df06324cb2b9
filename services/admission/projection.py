"""The admission service's read models. The whole event history and the pool tree are projected
once, by the tree service (`tree.duckdb`); projecting them here too halved the pipeline's rate.
Admission answers questions about gangs from its state (`queries.py`); gang and task tables for
SQL are the next read models to add here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # none kept: a process serving admission loads neither DuckDB nor Arrow
    from projections.base import Projection


def projections_for() -> list[Projection]:
    return []
