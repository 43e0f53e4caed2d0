"""Exact set match (EM) of the official evaluators (values and DISTINCT ignored).

Both parsed queries are first *rebuilt*:

* values: every non-subquery value in ON / WHERE / HAVING becomes ``None``; subqueries used as values
  and the INTERSECT / UNION / EXCEPT operands get the same treatment recursively. Subqueries in FROM
  are left exactly as parsed (values, DISTINCT and column ids included);
* columns: DISTINCT flags become ``None`` and foreign-key columns are replaced by their canonical
  column, in SELECT, ON/WHERE/HAVING left-hand sides, GROUP BY and ORDER BY of the query and of its
  set-operation operands (which use the outer query's FROM tables). Subqueries used as values are not
  column-rebuilt. Only columns of tables in the query's FROM are canonicalised.

Then every component must match (:func:`exact_match`); see the function for the component rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from mtsql.core.sql.errors import OfficialCrash
from mtsql.core.sql.schema import Schema

_SET_OPS = ("intersect", "except", "union")
_LIKE, _IN = 9, 8  # indexes of "like" and "in" in the parser's WHERE_OPS


def rebuild(sql: dict, schema: Schema, fk_map: dict[str, str]) -> dict:
    """The query as exact match compares it: values dropped, then columns canonicalised (a new dict)."""
    return _rebuild_columns(_drop_values(sql), _columns_in_scope(sql["from"]["table_units"], schema), fk_map)


def _drop_values(sql: dict | None) -> dict | None:
    if sql is None:
        return None
    out = dict(sql)
    out["from"] = {**sql["from"], "conds": _drop_condition_values(sql["from"]["conds"])}
    out["having"] = _drop_condition_values(sql["having"])
    out["where"] = _drop_condition_values(sql["where"])
    for op in _SET_OPS:
        out[op] = _drop_values(sql[op])
    return out


def _drop_condition_values(condition: list) -> list:
    out = []
    for i, item in enumerate(condition):
        if i % 2:
            out.append(item)
            continue
        if not isinstance(item, tuple):
            raise OfficialCrash(
                f"{item!r} stands where a condition is expected (the official program crashes)"
            )
        negated, op, unit, first, second = item
        first = _drop_values(first) if isinstance(first, dict) else None
        second = _drop_values(second) if isinstance(second, dict) else None
        out.append((negated, op, unit, first, second))
    return out


def _columns_in_scope(table_units: list, schema: Schema) -> frozenset[str]:
    """Column ids of the tables named (not subqueries) in a FROM clause."""
    prefixes = {table_id[:-2] for kind, table_id in table_units if kind == "table_unit"}
    return frozenset().union(*(schema.columns_of_table.get(prefix, ()) for prefix in prefixes))


def _rebuild_columns(sql: dict | None, in_scope: frozenset[str], fk_map: dict[str, str]) -> dict | None:
    if sql is None:
        return None

    def col_unit(unit):
        if unit is None:
            return None
        agg, col, _distinct = unit
        if col in fk_map and col in in_scope:
            col = fk_map[col]
        return agg, col, None

    def val_unit(unit):
        if unit is None:
            return None
        op, first, second = unit
        return op, col_unit(first), col_unit(second)

    def condition(cond):
        return [
            item if i % 2 else (item[0], item[1], val_unit(item[2]), item[3], item[4])
            for i, item in enumerate(cond)
        ]

    out = dict(sql)
    out["select"] = (None, [(agg, val_unit(unit)) for agg, unit in sql["select"][1]])
    out["from"] = {"table_units": list(sql["from"]["table_units"]), "conds": condition(sql["from"]["conds"])}
    out["where"] = condition(sql["where"])
    out["groupBy"] = [col_unit(unit) for unit in sql["groupBy"]]
    order = sql["orderBy"]
    out["orderBy"] = (order[0], [val_unit(unit) for unit in order[1]]) if order else order
    out["having"] = condition(sql["having"])
    for op in _SET_OPS:
        out[op] = _rebuild_columns(sql[op], in_scope, fk_map)
    return out


def exact_match(pred: dict, gold: dict) -> int:
    """1 if two *rebuilt* queries match on every component, else 0.

    select: same multiset of (agg, val_unit); where: same multiset of conditions and the same set of
    AND/OR connectors; group by: same list of column ids and, when both group, equal HAVING; order
    by: equal (direction, list) and LIMIT present in both or in neither; each set operation: present
    in both and matching recursively (operand order matters), or absent in both; keywords: same set;
    finally the sorted FROM table units must be equal (ON conditions are otherwise ignored).
    Raises :class:`OfficialCrash` where the official program crashes (two different FROM
    subqueries cannot be sorted).
    """
    # every component is computed (no short-circuit) because the official code computes them all,
    # and some of them crash on odd parses (see _connectors_match)
    components = [
        _same_multiset(pred["select"][1], gold["select"][1]),
        _same_multiset(pred["where"][::2], gold["where"][::2]),
        _same_multiset(_group_names(pred), _group_names(gold)),
        _group_and_having_match(pred, gold),
        _order_matches(pred, gold),
        _connectors_match(pred, gold),
        _set_operations_match(pred, gold),
        _keywords(pred) == _keywords(gold),
    ]
    components_match = all(components)
    if not components_match:
        return 0
    if not gold["from"]["table_units"]:
        return 1
    try:
        return int(sorted(gold["from"]["table_units"]) == sorted(pred["from"]["table_units"]))
    except TypeError:
        raise OfficialCrash(
            "two FROM subqueries in one query cannot be ordered (the official program crashes)"
        ) from None


def _same_multiset(pred: Iterable, gold: Iterable) -> bool:
    """Multiset equality by ``==`` (items may be unhashable dicts)."""
    remaining = list(gold)
    pred = list(pred)
    if len(pred) != len(remaining):
        return False
    for item in pred:
        if item not in remaining:
            return False
        remaining.remove(item)
    return True


def _connectors_match(pred: dict, gold: dict) -> bool:
    """Same set of WHERE connectors. Two conditions with no AND/OR between them put a condition in
    a connector slot; if it holds a subquery it cannot be hashed, and the official program crashes.
    """
    try:
        return set(pred["where"][1::2]) == set(gold["where"][1::2])
    except TypeError:
        raise OfficialCrash(
            "a WHERE condition stands where AND/OR is expected (the official program crashes)"
        ) from None


def _group_names(sql: dict) -> list[str]:
    """GROUP BY column names without their table (the table-agnostic check)."""
    return [col.split(".")[1] if "." in col else col for _agg, col, _distinct in sql["groupBy"]]


def _group_and_having_match(pred: dict, gold: dict) -> bool:
    if bool(pred["groupBy"]) != bool(gold["groupBy"]):
        return False
    if not gold["groupBy"]:
        return True
    return [u[1] for u in pred["groupBy"]] == [u[1] for u in gold["groupBy"]] and pred["having"] == gold[
        "having"
    ]


def _order_matches(pred: dict, gold: dict) -> bool:
    if bool(pred["orderBy"]) != bool(gold["orderBy"]):
        return False
    if not gold["orderBy"]:
        return True
    return pred["orderBy"] == gold["orderBy"] and (pred["limit"] is None) == (gold["limit"] is None)


def _set_operations_match(pred: dict, gold: dict) -> bool:
    pred_count = sum(pred[op] is not None for op in _SET_OPS)
    gold_count = sum(gold[op] is not None for op in _SET_OPS)
    matched = sum(
        exact_match(pred[op], gold[op]) for op in _SET_OPS if pred[op] is not None and gold[op] is not None
    )
    return pred_count == gold_count and matched == pred_count


def _keywords(sql: dict) -> set[str]:
    found = set()
    for key, word in (("where", "where"), ("groupBy", "group"), ("having", "having")):
        if sql[key]:
            found.add(word)
    if sql["orderBy"]:
        found.update((sql["orderBy"][0], "order"))
    if sql["limit"] is not None:
        found.add("limit")
    found.update(op for op in _SET_OPS if sql[op] is not None)
    connectors = sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]
    units = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    if "or" in connectors:
        found.add("or")
    if any(unit[0] for unit in units):
        found.add("not")
    if any(unit[1] == _IN for unit in units):
        found.add("in")
    if any(unit[1] == _LIKE for unit in units):
        found.add("like")
    return found
