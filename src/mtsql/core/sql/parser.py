"""Spider-SQL parser: a query string into the structured dict of the official evaluators.

The dict (the shape every Spider tool uses)::

    col_unit   = (agg_id, col_id, distinct)          col_id: "__all__" | "__table.column__"
    val_unit   = (unit_op, col_unit1, col_unit2 | None)
    table_unit = ("table_unit", "__table__") | ("sql", sql)
    cond_unit  = (not_op, op_id, val_unit, val1, val2)  values: float | '"literal"' | col_unit | sql
    condition  = [cond_unit, "and" | "or", cond_unit, ...]
    sql = {"from": {"table_units": [...], "conds": condition}, "select": (distinct, [(agg_id, val_unit)]),
           "where": condition, "groupBy": [col_unit], "having": condition,
           "orderBy": [] | ("asc" | "desc", [val_unit]), "limit": None | 1,
           "intersect": sql | None, "union": sql | None, "except": sql | None}

``semantics="official"`` reproduces the official parser token for token, including what looks like
bugs, because published scores depend on them:

* aliases (``X AS Y``) are collected over the whole token list, subqueries and set-operation
  operands included; the last definition wins; an alias equal to a table name is an error;
* the FROM clause is found first (the first ``from`` token after the start) and the SELECT list is
  parsed against its tables; tokens left after a complete query are ignored;
* ``LIMIT`` takes the next token, whatever it is, and always records 1;
* ``a=5`` or ``>=5`` stay glued tokens (NLTK does not split ``=``), so such queries fail;
* a value that is neither a literal, a number nor a subquery is read as a column from the tokens
  up to the next ``,``, ``)``, ``and``, clause or join keyword; extra tokens there are skipped.

``semantics="strict"`` fixes the tokenizer-level quirks only: comparison operators glued to their
operands (``a=5``, ``x>=5``, ``T1.id=T2.id``) are split before parsing, ``==`` is read as ``=`` and
``<>`` as ``!=``, and tokens left after a complete query are an error. Everything else is the same.
"""

from __future__ import annotations

import re

from mtsql.core.sql.errors import SqlParseError
from mtsql.core.sql.schema import Schema
from mtsql.core.sql.tokenizer import tokenize

CLAUSE_KEYWORDS = ("select", "from", "where", "group", "order", "limit", "intersect", "union", "except")
JOIN_KEYWORDS = ("join", "on", "as")
WHERE_OPS = ("not", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists")
UNIT_OPS = ("none", "-", "+", "*", "/")
AGG_OPS = ("none", "max", "min", "count", "sum", "avg")
COND_OPS = ("and", "or")
SET_OPS = ("intersect", "union", "except")
ORDER_DIRECTIONS = ("desc", "asc")
SEMANTICS = ("official", "strict")

_CLAUSE_END = (")", ";")
_COMPARISON = re.compile(r"==|<>|!=|>=|<=|=|<|>")
_STRICT_SPELLING = {"==": "=", "<>": "!="}


def empty_sql() -> dict:
    """The dict the official evaluators use for a prediction that does not parse (it never matches)."""
    return {
        "except": None,
        "from": {"conds": [], "table_units": []},
        "groupBy": [],
        "having": [],
        "intersect": None,
        "limit": None,
        "orderBy": [],
        "select": [False, []],
        "union": None,
        "where": [],
    }


def parse_sql(sql: str, schema: Schema, *, semantics: str = "official") -> dict:
    """Parse ``sql`` against ``schema``; raise :class:`SqlParseError` where the official parser raises."""
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    if semantics == "strict":
        sql = _split_glued_operators(sql)
    tokens = tokenize(sql)
    parser = _Parser(tokens, schema)
    try:
        end, parsed = parser.query(0)
    except RecursionError:  # the official parser's bare ``except`` catches this too
        raise SqlParseError("query nested too deeply") from None
    if semantics == "strict" and _skip(tokens, end, ";") < len(tokens):
        raise SqlParseError(f"unexpected tokens after the query: {' '.join(tokens[end : end + 5])!r}")
    return parsed


def _split_glued_operators(sql: str) -> str:
    """Space out comparison operators outside string literals, ``==`` as ``=``, ``<>`` as ``!=`` (strict)."""
    parts = re.split(r"(\"[^\"]*\"|'[^']*')", sql)
    return "".join(part if i % 2 else _COMPARISON.sub(_respell, part) for i, part in enumerate(parts))


def _respell(match: re.Match) -> str:
    operator = match.group(0)
    return f" {_STRICT_SPELLING.get(operator, operator)} "


def _skip(tokens: list[str], index: int, token: str) -> int:
    while index < len(tokens) and tokens[index] == token:
        index += 1
    return index


class _Parser:
    """Recursive descent over the token list; every method takes a start index, returns (next index, node)."""

    def __init__(self, tokens: list[str], schema: Schema):
        self.tokens = tokens
        self.schema = schema
        self.aliases = self._alias_map()

    # -- helpers ---------------------------------------------------------------------------------

    def at(self, index: int) -> str:
        if index >= len(self.tokens):
            raise SqlParseError("query ends too early")
        return self.tokens[index]

    def peek(self, index: int) -> str | None:
        return self.tokens[index] if index < len(self.tokens) else None

    def expect(self, index: int, token: str) -> int:
        if self.at(index) != token:
            raise SqlParseError(f"expected {token!r} at token {index}, got {self.tokens[index]!r}")
        return index + 1

    def resolve_table(self, name: str) -> str:
        if name not in self.aliases:
            raise SqlParseError(f"unknown table or alias {name!r}")
        return self.aliases[name]

    def column_id(self, key: str) -> str:
        if key not in self.schema.ids:
            raise SqlParseError(f"unknown column {key!r}")
        return self.schema.ids[key]

    def _alias_map(self) -> dict[str, str]:
        """Every ``X as Y`` of the whole query (last one wins), then every table name to itself."""
        tokens, aliases = self.tokens, {}
        for index, tok in enumerate(tokens):
            if tok == "as":
                if index + 1 >= len(tokens):
                    raise SqlParseError("'as' at the end of the query")
                aliases[tokens[index + 1]] = tokens[index - 1]
        for table in self.schema.tables:
            if table in aliases:
                raise SqlParseError(f"alias {table!r} is also a table name")
            aliases[table] = table
        return aliases

    # -- grammar ---------------------------------------------------------------------------------

    def column(self, index: int, default_tables: list[str] | None) -> tuple[int, str]:
        tok = self.at(index)
        if tok == "*":
            return index + 1, self.schema.ids["*"]
        if "." in tok:
            parts = tok.split(".")
            if len(parts) != 2:
                raise SqlParseError(f"bad column reference {tok!r}")
            alias, name = parts
            return index + 1, self.column_id(f"{self.resolve_table(alias)}.{name}")
        if not default_tables:
            raise SqlParseError(f"column {tok!r} without a table in scope")
        for alias in default_tables:
            table = self.resolve_table(alias)
            if table not in self.schema.tables:
                raise SqlParseError(f"unknown table {table!r}")
            if tok in self.schema.tables[table]:
                return index + 1, self.column_id(f"{table}.{tok}")
        raise SqlParseError(f"unknown column {tok!r}")

    def col_unit(self, index: int, default_tables: list[str] | None) -> tuple[int, tuple]:
        block = distinct = False
        if self.at(index) == "(":
            block, index = True, index + 1
        if self.at(index) in AGG_OPS:
            agg = AGG_OPS.index(self.tokens[index])
            index = self.expect(index + 1, "(")
            if self.at(index) == "distinct":
                distinct, index = True, index + 1
            index, col = self.column(index, default_tables)
            index = self.expect(index, ")")
            return index, (agg, col, distinct)  # a leading "(" is left for the caller
        if self.at(index) == "distinct":
            distinct, index = True, index + 1
        index, col = self.column(index, default_tables)
        if block:
            index = self.expect(index, ")")
        return index, (AGG_OPS.index("none"), col, distinct)

    def val_unit(self, index: int, default_tables: list[str] | None) -> tuple[int, tuple]:
        block = False
        if self.at(index) == "(":
            block, index = True, index + 1
        op, second = UNIT_OPS.index("none"), None
        index, first = self.col_unit(index, default_tables)
        if self.peek(index) in UNIT_OPS:
            op = UNIT_OPS.index(self.tokens[index])
            index, second = self.col_unit(index + 1, default_tables)
        if block:
            index = self.expect(index, ")")
        return index, (op, first, second)

    def table_unit(self, index: int) -> tuple[int, str, str]:
        table = self.resolve_table(self.at(index))
        index = index + 3 if self.peek(index + 1) == "as" else index + 1
        return index, self.column_id(table), table

    def value(self, index: int, default_tables: list[str] | None) -> tuple[int, object]:
        start, block = index, False
        if self.at(index) == "(":
            block, index = True, index + 1
        tok = self.at(index)
        if tok == "select":
            index, val = self.query(index)
        elif '"' in tok:
            val, index = tok, index + 1
        else:
            try:
                val, index = float(tok), index + 1
            except ValueError:
                end = index
                while end < len(self.tokens) and not self._ends_column_value(self.tokens[end]):
                    end += 1
                # the column is read from a copy of the tokens that starts at `start` (before any "(")
                _, val = _Parser.sub(self, start, end).col_unit(0, default_tables)
                index = end
        if block:
            index = self.expect(index, ")")
        return index, val

    @staticmethod
    def _ends_column_value(tok: str) -> bool:
        return tok in (",", ")", "and") or tok in CLAUSE_KEYWORDS or tok in JOIN_KEYWORDS

    @classmethod
    def sub(cls, parent: _Parser, start: int, end: int) -> _Parser:
        """A parser over ``parent.tokens[start:end]`` sharing the parent's alias map."""
        child = cls.__new__(cls)
        child.tokens, child.schema, child.aliases = parent.tokens[start:end], parent.schema, parent.aliases
        return child

    def condition(self, index: int, default_tables: list[str] | None) -> tuple[int, list]:
        conds: list = []
        while index < len(self.tokens):
            index, unit = self.val_unit(index, default_tables)
            negated = False
            if self.at(index) == "not":
                negated, index = True, index + 1
            if self.peek(index) not in WHERE_OPS:
                raise SqlParseError(f"expected a comparison at token {index}")
            op = WHERE_OPS.index(self.tokens[index])
            index += 1
            second = None
            index, first = self.value(index, default_tables)
            if op == WHERE_OPS.index("between"):
                index = self.expect(index, "and")
                index, second = self.value(index, default_tables)
            conds.append((negated, op, unit, first, second))
            nxt = self.peek(index)
            if nxt is not None and (nxt in CLAUSE_KEYWORDS or nxt in _CLAUSE_END or nxt in JOIN_KEYWORDS):
                break
            if nxt in COND_OPS:
                conds.append(nxt)
                index += 1
        return index, conds

    def select(self, index: int, default_tables: list[str]) -> tuple[int, tuple]:
        index = self.expect(index, "select")
        distinct = False
        if self.peek(index) == "distinct":
            distinct, index = True, index + 1
        items = []
        while index < len(self.tokens) and self.tokens[index] not in CLAUSE_KEYWORDS:
            agg = AGG_OPS.index("none")
            if self.tokens[index] in AGG_OPS:
                agg, index = AGG_OPS.index(self.tokens[index]), index + 1
            index, unit = self.val_unit(index, default_tables)
            items.append((agg, unit))
            if self.peek(index) == ",":
                index += 1
        return index, (distinct, items)

    def from_clause(self, start: int) -> tuple[int, list, list, list[str]]:
        if "from" not in self.tokens[start:]:
            raise SqlParseError("no FROM clause")
        index = self.tokens.index("from", start) + 1
        default_tables: list[str] = []
        table_units: list = []
        conds: list = []
        while index < len(self.tokens):
            block = False
            if self.at(index) == "(":
                block, index = True, index + 1
            if self.at(index) == "select":
                index, sub = self.query(index)
                table_units.append(("sql", sub))
            else:
                if self.peek(index) == "join":
                    index += 1
                index, table_id, table = self.table_unit(index)
                table_units.append(("table_unit", table_id))
                default_tables.append(table)
            if self.peek(index) == "on":
                index, on_conds = self.condition(index + 1, default_tables)
                if conds:
                    conds.append("and")
                conds.extend(on_conds)
            if block:
                index = self.expect(index, ")")
            nxt = self.peek(index)
            if nxt is not None and (nxt in CLAUSE_KEYWORDS or nxt in _CLAUSE_END):
                break
        return index, table_units, conds, default_tables

    def keyword_condition(self, index: int, keyword: str, default_tables: list[str]) -> tuple[int, list]:
        if self.peek(index) != keyword:
            return index, []
        return self.condition(index + 1, default_tables)

    def _list_clause_start(self, index: int, keyword: str) -> int | None:
        if self.peek(index) != keyword:
            return None
        return self.expect(index + 1, "by")

    def _at_clause_end(self, index: int) -> bool:
        tok = self.tokens[index]
        return tok in CLAUSE_KEYWORDS or tok in _CLAUSE_END

    def group_by(self, index: int, default_tables: list[str]) -> tuple[int, list]:
        start = self._list_clause_start(index, "group")
        if start is None:
            return index, []
        index, units = start, []
        while index < len(self.tokens) and not self._at_clause_end(index):
            index, unit = self.col_unit(index, default_tables)
            units.append(unit)
            if self.peek(index) != ",":
                break
            index += 1
        return index, units

    def order_by(self, index: int, default_tables: list[str]) -> tuple[int, list | tuple]:
        start = self._list_clause_start(index, "order")
        if start is None:
            return index, []
        index, units, direction = start, [], "asc"
        while index < len(self.tokens) and not self._at_clause_end(index):
            index, unit = self.val_unit(index, default_tables)
            units.append(unit)
            if self.peek(index) in ORDER_DIRECTIONS:
                direction, index = self.tokens[index], index + 1
            if self.peek(index) != ",":
                break
            index += 1
        return index, (direction, units)

    def limit(self, index: int) -> tuple[int, int | None]:
        if self.peek(index) != "limit":
            return index, None
        self.at(index + 1)  # some token must follow; its value is never read
        return index + 2, 1

    def query(self, start: int) -> tuple[int, dict]:
        index, block = start, False
        if self.at(index) == "(":
            block, index = True, index + 1
        from_end, table_units, on_conds, default_tables = self.from_clause(start)
        sql: dict = {"from": {"table_units": table_units, "conds": on_conds}}
        sql["select"] = self.select(index, default_tables)[1]
        index, sql["where"] = self.keyword_condition(from_end, "where", default_tables)
        index, sql["groupBy"] = self.group_by(index, default_tables)
        index, sql["having"] = self.keyword_condition(index, "having", default_tables)
        index, sql["orderBy"] = self.order_by(index, default_tables)
        index, sql["limit"] = self.limit(index)
        index = _skip(self.tokens, index, ";")
        if block:
            index = self.expect(index, ")")
        index = _skip(self.tokens, index, ";")
        for op in SET_OPS:
            sql[op] = None
        if self.peek(index) in SET_OPS:
            op = self.tokens[index]
            index, sql[op] = self.query(index + 1)
        return index, sql
