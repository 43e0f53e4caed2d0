"""Realistic wrong variants of a gold query, for the ``gold_with_correction`` policy.

Each mutation is a mistake models make: a dropped WHERE condition, a missing DISTINCT, a missing
or reversed ORDER BY, a missing GROUP BY or LIMIT, an off-by-one comparison, the wrong aggregate,
a neighbouring column of the same table, or a table name guessed wrong. ``mutations(sql, tables)`` lists every
variant that applies, each with a short explanation of the mistake for the policy's reasoning.
``misnamed_columns`` (a selected or filtered column's name guessed wrong, which SQLite refuses) is kept apart:
the ``gold_grounded`` policy adds them to the mistakes an observation reveals, ``gold_with_correction`` is
unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mtsql.core.agent.schema_prompt import Table
from mtsql.core.sql.clauses import clause_spans, tokens

_FLIP = {">": ">=", ">=": ">", "<": "<=", "<=": "<"}
_AGGREGATE = {"max": "MIN", "min": "MAX", "avg": "SUM", "sum": "AVG"}


@dataclass(frozen=True)
class Variant:
    kind: str
    sql: str
    why: str  # what is wrong, in the words of someone who just saw the result


def mutations(sql: str, tables: Sequence[Table]) -> list[Variant]:
    """Every applicable wrong variant of ``sql``, in a fixed order (never the query itself)."""
    found = [
        _drop_where_condition(sql),
        _drop_distinct(sql),
        _drop_clause(sql, "order by"),
        _flip_order(sql),
        _drop_clause(sql, "group by"),
        _drop_clause(sql, "limit"),
        _off_by_one(sql),
        _swap_aggregate(sql),
        _neighbour_column(sql, tables),
        _wrong_table_name(sql, tables),
    ]
    out, seen = [], {_squash(sql)}
    for variant in found:
        if variant and _squash(variant.sql) not in seen:
            seen.add(_squash(variant.sql))
            out.append(variant)
    return out


def _squash(sql: str) -> str:
    return " ".join(sql.split())


def _span(sql: str, name: str) -> tuple[int, int] | None:
    for clause, start, end in clause_spans(sql):
        if clause == name:
            return start, end
    return None


def _cut(sql: str, start: int, end: int, insert: str = "") -> str:
    return _squash(sql[:start] + insert + sql[end:])


def _drop_clause(sql: str, name: str) -> Variant | None:
    span = _span(sql, name)
    if span is None:
        return None
    why = {
        "order by": "the rows are not sorted the way the question asks",
        "group by": "the aggregate has to be computed per group, not over all rows",
        "limit": "the question asks only for the top rows, but every row is returned",
    }[name]
    return Variant(f"drop_{name.replace(' ', '_')}", _cut(sql, *span), why)


def _drop_where_condition(sql: str) -> Variant | None:
    span = _span(sql, "where")
    if span is None:
        return None
    start, end = span
    ands = [(s, e) for norm, s, e in _top_level(sql, start, end) if norm == "and"]
    if "between" in sql[start:end].lower() or not ands:
        return Variant(
            "drop_where", _cut(sql, start, end), "the result ignores the filter the question asks for"
        )
    cut_start, _ = ands[-1]
    return Variant(
        "drop_where_condition",
        _cut(sql, cut_start, end),
        f"the condition {_squash(sql[ands[-1][1] : end])!r} from the question is missing",
    )


def _top_level(sql: str, start: int, end: int) -> list[tuple[str, int, int]]:
    out, depth = [], 0
    for norm, s, e in tokens(sql):
        if s < start or e > end:
            continue
        depth += norm == "("
        depth -= norm == ")"
        if depth == 0:
            out.append((norm, s, e))
    return out


def _drop_distinct(sql: str) -> Variant | None:
    for norm, start, end in tokens(sql):
        if norm == "distinct":
            return Variant(
                "drop_distinct",
                _cut(sql, start, end),
                "the result repeats the same value; the question asks for distinct values",
            )
    return None


def _flip_order(sql: str) -> Variant | None:
    span = _span(sql, "order by")
    if span is None:
        return None
    for norm, start, end in _top_level(sql, *span):
        if norm in ("asc", "desc"):
            flipped = "ASC" if norm == "desc" else "DESC"
            return Variant(
                "flip_order",
                _cut(sql, start, end, flipped),
                f"the order is reversed: it should be {norm.upper()}",
            )
    return Variant(
        "flip_order", _cut(sql, span[1], span[1], " DESC"), "the order is reversed: it should be ascending"
    )


def _off_by_one(sql: str) -> Variant | None:
    for norm, start, end in tokens(sql):
        if norm in _FLIP:
            return Variant(
                "off_by_one",
                _cut(sql, start, end, f" {_FLIP[norm]} "),
                f"the comparison should be {norm!r}, not {_FLIP[norm]!r}",
            )
    return None


def _swap_aggregate(sql: str) -> Variant | None:
    toks = tokens(sql)
    for (norm, start, end), (after, _, _) in zip(toks, toks[1:], strict=False):
        if norm in _AGGREGATE and after == "(":
            return Variant(
                "swap_aggregate",
                _cut(sql, start, end, _AGGREGATE[norm]),
                f"it computes {_AGGREGATE[norm]} where the question asks for {norm.upper()}",
            )
    return None


def _neighbour_column(sql: str, tables: Sequence[Table]) -> Variant | None:
    span = _span(sql, "select")
    if span is None:
        return None
    used = {norm for norm, _, _ in tokens(sql)}
    for norm, start, end in _top_level(sql, *span):
        for table in (t for t in tables if t.name.lower() in used):
            names = [name for name, _ in table.columns]
            lowered = [n.lower() for n in names]
            if norm in lowered and len(names) > 1:
                position = lowered.index(norm)
                other = names[(position + 1) % len(names)]
                return Variant(
                    "neighbour_column",
                    _cut(sql, start, end, other),
                    f"it returns {other} where the question asks for {names[position]}",
                )
    return None


def _wrong_table_name(sql: str, tables: Sequence[Table]) -> Variant | None:
    existing = {t.name.lower() for t in tables}
    toks = tokens(sql)
    for (norm, _, _), (name, start, end) in zip(toks, toks[1:], strict=False):
        if norm == "from" and re.fullmatch(r"\w+", name):
            guess = sql[start:end] + ("s" if not name.endswith("s") else "_list")
            if guess.lower() in existing:
                return None
            return Variant(
                "wrong_table_name",
                _cut(sql, start, end, guess),
                f"there is no table {guess}; the table is {sql[start:end]}",
            )
    return None


def misnamed_columns(sql: str, tables: Sequence[Table]) -> list[Variant]:
    """Each column the query selects or filters on, its name guessed the ways a small model guesses it (an
    invented compound ``singer_name`` for ``Name``, the snake case ``pet_type`` for ``PetType``, a plural or
    singular), so that SQLite refuses it: one variant per column, in the order the query names them."""
    used = {norm for norm, _, _ in tokens(sql)}
    read = [t for t in tables if t.name.lower() in used]
    owner = {name.lower(): (table, name) for table in read for name, _ in table.columns}
    out, seen = [], set()
    for clause in ("select", "where"):
        span = _span(sql, clause)
        for norm, start, end in _top_level(sql, *span) if span else ():
            if norm not in owner or norm in seen or not re.fullmatch(r"\w+", norm):
                continue
            seen.add(norm)
            table, name = owner[norm]
            guess = _guessed_name(table.name, name)
            if guess.lower() not in owner:
                out.append(
                    Variant(
                        "misnamed_column",
                        _cut(sql, start, end, guess),
                        f"there is no column {guess}; the column is {name}",
                    )
                )
    return out


def _guessed_name(table: str, column: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", column).lower()
    if snake != column.lower():
        return snake
    if "_" not in column:
        singular = table[:-1] if table.lower().endswith("s") and not table.lower().endswith("ss") else table
        return f"{singular.lower()}_{column.lower()}"
    return column[:-1] if column.lower().endswith("s") else column + "s"
