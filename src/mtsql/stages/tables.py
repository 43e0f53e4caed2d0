"""Breakdowns shared by stages and reports: turn buckets as the official evaluators print them."""

from __future__ import annotations

from rich.table import Table

from mtsql.sql import metrics

TURN_BUCKETS = tuple(b.removeprefix("turn ") for b in metrics.TURN_BUCKETS)


def turn_bucket(turn_index: int) -> str:
    """0-based turn index -> the evaluators' bucket without its "turn " prefix (1..4, >4)."""
    return metrics.turn_bucket(turn_index).removeprefix("turn ")


def counts_table(title: str, table: dict[str, dict[str, int | float]]) -> Table:
    """A rich table of {row label: {column: value}}."""
    columns = list(next(iter(table.values()), {}))
    out = Table(title=title)
    out.add_column("bucket")
    for column in columns:
        out.add_column(column, justify="right")
    for label, row in table.items():
        out.add_row(label, *(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns))
    return out
