"""Markdown tables for the report."""

from __future__ import annotations

from collections.abc import Sequence


def table(header: Sequence[str], rows: Sequence[Sequence], numeric_from: int = 1) -> list[str]:
    """A markdown table; columns from ``numeric_from`` on are right-aligned. Ends with a blank line."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    lines = [_row(header), _row(align)]
    lines += [_row("–" if cell is None else str(cell) for cell in row) for row in rows]
    return lines + [""]


def _row(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def number(value, digits: int = 3) -> str:
    """A float with ``digits`` significant digits, an int as is, None as a dash."""
    if value is None:
        return "–"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)
