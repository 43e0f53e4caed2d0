"""Spider hardness (easy / medium / hard / extra) of a parsed gold query, as the official evaluators
compute it (on the parsed query, before any rebuilding).

* ``comp1`` = [WHERE] + [GROUP BY] + [ORDER BY] + [LIMIT] + (FROM units - 1) + #OR + #LIKE, where OR
  and LIKE are counted in ON, WHERE and HAVING;
* ``comp2`` = subqueries used as values in ON / WHERE / HAVING + set operations (FROM subqueries do
  not count);
* ``others`` = [aggregates > 1] + [SELECT items > 1] + [WHERE conditions > 1] + [GROUP BY items > 1].

The aggregate count has two official quirks, kept: a WHERE or HAVING condition whose NOT flag is set
counts as an aggregate, and so does every HAVING connector (``"and"`` / ``"or"``); aggregates inside
HAVING conditions do not count.
"""

from __future__ import annotations

from mtsql.base.slices import HARDNESS_LEVELS as HARDNESS_LEVELS  # the levels hardness() returns
from mtsql.core.sql.errors import OfficialCrash

_LIKE = 9  # index of "like" in the parser's WHERE_OPS


def hardness(sql: dict) -> str:
    """The hardness level of a parsed (not rebuilt) query."""
    comp1, comp2, others = component1(sql), component2(sql), count_others(sql)
    if comp1 <= 1 and others == 0 and comp2 == 0:
        return "easy"
    if (others <= 2 and comp1 <= 1 and comp2 == 0) or (comp1 <= 2 and others < 2 and comp2 == 0):
        return "medium"
    if (
        (others > 2 and comp1 <= 2 and comp2 == 0)
        or (2 < comp1 <= 3 and others <= 2 and comp2 == 0)
        or (comp1 <= 1 and others == 0 and comp2 <= 1)
    ):
        return "hard"
    return "extra"


def component1(sql: dict) -> int:
    count = sum(1 for key in ("where", "groupBy", "orderBy") if sql[key]) + (sql["limit"] is not None)
    if sql["from"]["table_units"]:
        count += len(sql["from"]["table_units"]) - 1
    connectors = sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]
    units = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    count += sum(1 for tok in connectors if tok == "or")
    count += sum(1 for unit in units if unit[1] == _LIKE)
    return count


def component2(sql: dict) -> int:
    units = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    if not all(isinstance(unit, tuple) for unit in units):
        raise OfficialCrash("a connector stands where a condition is expected (the official program crashes)")
    nested = sum(isinstance(value, dict) for unit in units for value in (unit[3], unit[4]))
    return nested + sum(sql[op] is not None for op in ("intersect", "except", "union"))


def _counts_as_aggregate(unit) -> bool:
    """The official test: first element differs from 0 (an aggregate id, a NOT flag, or a connector
    string)."""
    return unit[0] != 0


def count_others(sql: dict) -> int:
    aggregates = sum(_counts_as_aggregate(item) for item in sql["select"][1])
    aggregates += sum(_counts_as_aggregate(unit) for unit in sql["where"][::2])
    aggregates += sum(_counts_as_aggregate(unit) for unit in sql["groupBy"])
    if sql["orderBy"]:
        order_units = [u[1] for u in sql["orderBy"][1] if u[1]] + [u[2] for u in sql["orderBy"][1] if u[2]]
        aggregates += sum(_counts_as_aggregate(unit) for unit in order_units)
    aggregates += sum(_counts_as_aggregate(item) for item in sql["having"])
    return (
        (aggregates > 1) + (len(sql["select"][1]) > 1) + (len(sql["where"]) > 1) + (len(sql["groupBy"]) > 1)
    )
