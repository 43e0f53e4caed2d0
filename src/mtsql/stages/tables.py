"""Breakdowns shared by stages and reports: turn buckets as the official evaluators print them."""

from __future__ import annotations

from rich.table import Table

TURN_BUCKETS = ("1", "2", "3", "4", ">4")


def turn_bucket(turn_index: int) -> str:
    """0-based turn index -> the evaluators' bucket (turn 1..4, then >4)."""
    return str(turn_index + 1) if turn_index < 4 else ">4"


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
