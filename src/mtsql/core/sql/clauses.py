"""Clause-level view of an SQL query: a readable breakdown and a clause F1 between two queries.

    breakdown("SELECT name FROM singer WHERE age > 20")
    # [("SELECT", "name"), ("FROM", "singer"), ("WHERE", "age > 20")]
    clause_f1(predicted_sql, gold_sql)  # in [0, 1]

``clause_items`` turns a query into a multiset of (clause, item) pairs: each SELECT expression,
FROM table, JOIN condition, WHERE/HAVING condition (and an ``or`` connector when present), GROUP BY
column, ORDER BY item with its direction, the LIMIT, a DISTINCT flag, and the same for the operand
after INTERSECT / UNION / EXCEPT (prefixed by the operator). Items are compared after lower-casing,
resolving table aliases (``T1.name`` -> ``singer.name``), dropping table qualifiers when the query
reads a single table, and writing string literals with single quotes; values are kept. The F1 is the
micro F1 of the two multisets. Nothing here raises on any text: unparseable pieces become items of
their own, so any string has a breakdown and a score.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

CLAUSES = ("select", "from", "where", "group by", "having", "order by", "limit")
SET_OPS = ("intersect", "union", "except")

_TOKEN = re.compile(
    r"""'(?:[^']|'')*'? | "(?:[^"]|"")*"? | `[^`]*`? | \[[^\]]*\]?
      | \d+(?:\.\d+)? | \w+ | [!<>=]= | <> | \|\| | \S""",
    re.VERBOSE,
)
_FROM_STOP = {
    "join",
    "on",
    "inner",
    "left",
    "right",
    "outer",
    "cross",
    "natural",
    "where",
    "group",
    "order",
    "having",
    "limit",
    "union",
    "intersect",
    "except",
    "as",
    "using",
}


class _Tok:
    """One token: where it is in the query text and its comparison form."""

    __slots__ = ("start", "end", "norm")

    def __init__(self, start: int, end: int, norm: str) -> None:
        self.start, self.end, self.norm = start, end, norm


def _lex(sql: str) -> list[_Tok]:
    toks: list[_Tok] = []
    for match in _TOKEN.finditer(sql):
        raw, start, end = match.group(), match.start(), match.end()
        if raw == "=" and toks and toks[-1].norm in ("!", "<", ">"):  # "! =" as some golds write it
            prev = toks.pop()
            toks.append(_Tok(prev.start, end, prev.norm + "="))
        elif raw == ";":
            continue
        elif raw[0] in "'\"":
            body = raw[1:-1] if len(raw) > 1 and raw[-1] == raw[0] else raw[1:]
            toks.append(_Tok(start, end, "'" + body.replace(raw[0] * 2, raw[0]) + "'"))
        elif raw[0] in "`[":
            toks.append(_Tok(start, end, raw.strip("`[]").lower()))
        else:
            toks.append(_Tok(start, end, raw.lower()))
    return toks


def _text(sql: str, toks: list[_Tok]) -> str:
    return sql[toks[0].start : toks[-1].end] if toks else ""


def _join(words: list[str]) -> str:
    """Normalised words back to one string: no blank around '.', after '(' or before ')' and ','."""
    out = ""
    for word in words:
        if out and not (word in (".", ")", ",") or out.endswith((".", "("))):
            out += " "
        out += word
    return out


def _split_top(toks: list[_Tok]) -> tuple[list[_Tok], str | None, list[_Tok]]:
    """(left operand, set operator or None, right operand) at the first top-level set operator."""
    depth = 0
    for i, tok in enumerate(toks):
        depth += tok.norm == "("
        depth -= tok.norm == ")"
        if depth == 0 and tok.norm in SET_OPS:
            op, rest = tok.norm, toks[i + 1 :]
            if rest and rest[0].norm == "all":
                op, rest = op + " all", rest[1:]
            return toks[:i], op, rest
    return toks, None, []


def _clauses(toks: list[_Tok]) -> list[tuple[str, list[_Tok], list[_Tok]]]:
    """The top-level clauses of one SELECT (no set operator) in written order: (name, keyword tokens,
    body tokens). Tokens before the first clause keyword form a clause named ''."""
    out: list[tuple[str, list[_Tok], list[_Tok]]] = []
    depth, i = 0, 0
    while i < len(toks):
        tok = toks[i]
        head: list[_Tok] = []
        if depth == 0:
            pair = tok.norm + " " + toks[i + 1].norm if i + 1 < len(toks) else ""
            head = toks[i : i + 2] if pair in CLAUSES else [tok] if tok.norm in CLAUSES else []
        depth += tok.norm == "("
        depth -= tok.norm == ")"
        if head:
            out.append((" ".join(t.norm for t in head), head, []))
            i += len(head)
            continue
        if not out:
            out.append(("", [], []))
        out[-1][2].append(tok)
        i += 1
    return out


def tokens(sql: str) -> list[tuple[str, int, int]]:
    """The tokens of ``sql`` as (normalised text, start, end) character positions."""
    return [(t.norm, t.start, t.end) for t in _lex(sql or "")]


def clause_spans(sql: str) -> list[tuple[str, int, int]]:
    """(clause name, start, end) character spans of the top-level clauses before any set operator,
    keyword included: ``sql[start:end]`` is e.g. ``ORDER BY age DESC``."""
    left, _, _ = _split_top(_lex(sql or ""))
    spans = []
    for name, head, body in _clauses(left):
        first, last = (head or body)[0], (body or head)[-1]
        spans.append((name, first.start, last.end))
    return spans


def breakdown(sql: str) -> list[tuple[str, str]]:
    """The clauses of ``sql`` as written:
    [("SELECT", "..."), ("FROM", "..."), ..., ("UNION", "SELECT ...")]."""
    sql = sql or ""
    left, op, right = _split_top(_lex(sql))
    parts = [(name.upper() or "TEXT", _text(sql, body)) for name, _, body in _clauses(left)]
    if op:
        parts.append((op.upper(), _text(sql, right)))
    return parts


def render_breakdown(sql: str) -> str:
    """``breakdown`` on one line: ``SELECT a | FROM t | WHERE x > 1``."""
    return " | ".join(f"{name} {text}".strip() for name, text in breakdown(sql))


@lru_cache(maxsize=65536)
def clause_items(sql: str) -> Counter:
    """The multiset of normalised (clause, item) pairs of ``sql`` (see the module docstring)."""
    toks = _lex(sql or "")
    aliases = _aliases(toks)
    words = [
        aliases.get(t.norm, t.norm) if i + 1 < len(toks) and toks[i + 1].norm == "." else t.norm
        for i, t in enumerate(toks)
    ]
    tables = _tables(toks)
    if len(tables) == 1:
        (table,) = tables
        words = _unqualify(words, table)
    items: Counter = Counter()
    _collect(_retok(toks, words), "", items)
    return items


def clause_f1(predicted: str | None, gold: str | None) -> float:
    """Micro F1 of the clause items of ``predicted`` against ``gold``; 0 when either is empty."""
    pred, ref = clause_items(predicted or ""), clause_items(gold or "")
    if not pred or not ref:
        return 0.0
    common = sum((pred & ref).values())
    if not common:
        return 0.0
    precision, recall = common / sum(pred.values()), common / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def _retok(toks: list[_Tok], words: list[str]) -> list[_Tok]:
    return [_Tok(t.start, t.end, w) for t, w in zip(toks, words, strict=True)]


def _aliases(toks: list[_Tok]) -> dict[str, str]:
    """Table aliases of the whole query: ``x AS t1`` and ``FROM x t1`` (last definition wins)."""
    out: dict[str, str] = {}
    for i in range(1, len(toks) - 1):
        before, tok, after = toks[i - 1], toks[i], toks[i + 1]
        if (
            tok.norm == "as"
            and _word(before.norm)
            and _word(after.norm)
            and (i < 2 or toks[i - 2].norm != ".")
        ):
            out[after.norm] = before.norm
        elif (
            _word(tok.norm)
            and _word(after.norm)
            and after.norm not in _FROM_STOP
            and before.norm in ("from", "join", ",")
            and (i + 2 >= len(toks) or toks[i + 2].norm != "(")
        ):
            out[after.norm] = tok.norm
    return out


def _tables(toks: list[_Tok]) -> set[str]:
    """Names read in any FROM / JOIN (the words right after ``from``, ``join`` or a FROM comma)."""
    names: set[str] = set()
    in_from = False
    for i, tok in enumerate(toks[:-1]):
        if tok.norm in ("from", "join"):
            in_from = tok.norm == "from" or in_from
        elif tok.norm in CLAUSES or tok.norm in ("group", "order", "on", "select", "(", ")"):
            in_from = False
        if (tok.norm in ("from", "join") or (in_from and tok.norm == ",")) and _word(toks[i + 1].norm):
            names.add(toks[i + 1].norm)
    return names


def _unqualify(words: list[str], table: str) -> list[str]:
    """Blank out ``table .`` before a column (not before ``*``); blank words are skipped later."""
    out = list(words)
    for i in range(len(out) - 2):
        if out[i] == table and out[i + 1] == "." and out[i + 2] != "*":
            out[i] = out[i + 1] = ""
    return out


def _collect(toks: list[_Tok], prefix: str, items: Counter) -> None:
    toks = [t for t in toks if t.norm]
    left, op, right = _split_top(toks)
    for name, _, body in _clauses(left):
        words = [t.norm for t in body]
        key = prefix + (name or "text")
        if name == "select" and words[:1] == ["distinct"]:
            items[(key, "distinct")] += 1
            words = words[1:]
        if name == "from":
            _from_items(words, key, items)
        elif name in ("where", "having"):
            conds, ors = _conditions(words)
            items.update((key, cond) for cond in conds)
            if ors:
                items[(key, "or")] += ors
        elif name == "order by":
            for item in _split(words, {","}):
                if item and item[-1] not in ("asc", "desc"):
                    item = item + ["asc"]
                items[(key, _join(item))] += 1
        elif name in ("select", "group by"):
            for item in _split(words, {","}):
                items[(key, _join(item))] += 1
        else:
            items[(key, _join(words))] += 1
    if op:
        items[(prefix + "set", op)] += 1
        _collect(right, prefix + op + ".", items)


def _from_items(words: list[str], key: str, items: Counter) -> None:
    """Tables (aliases dropped) and each ON condition, with the two sides of '=' in sorted order."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "on":
            j = i + 1
            while j < len(words) and words[j] not in ("join", ","):
                j += 1
            for cond in _conditions(words[i + 1 : j])[0]:
                sides = cond.split(" = ")
                items[(key, "on " + " = ".join(sorted(sides)) if len(sides) == 2 else "on " + cond)] += 1
            i = j
            continue
        if word == "(":
            depth, j = 0, i
            while j < len(words):
                depth += words[j] == "("
                depth -= words[j] == ")"
                j += 1
                if depth == 0:
                    break
            items[(key, _join(words[i:j]))] += 1
            i = j
            continue
        if _word(word) and word not in _FROM_STOP and (i == 0 or words[i - 1] in ("join", ",", "from")):
            items[(key, word)] += 1
        i += 1


def _conditions(words: list[str]) -> tuple[list[str], int]:
    """Conditions split on top-level AND/OR (not the AND of BETWEEN), and the number of ORs."""
    out: list[str] = []
    depth, start, between, ors = 0, 0, False, 0
    for i, word in enumerate(words):
        depth += word == "("
        depth -= word == ")"
        if depth == 0 and word == "between":
            between = True
        elif depth == 0 and word in ("and", "or"):
            if word == "and" and between:
                between = False
                continue
            out.append(_join(words[start:i]))
            start, ors = i + 1, ors + (word == "or")
    out.append(_join(words[start:]))
    return [cond for cond in out if cond], ors


def _split(words: list[str], separators: set[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for word in words:
        depth += word == "("
        depth -= word == ")"
        if depth == 0 and word in separators:
            parts.append([])
        else:
            parts[-1].append(word)
    return [p for p in parts if p]


def _word(text: str) -> bool:
    return bool(text) and (text[0].isalpha() or text[0] == "_") and text.replace("_", "a").isalnum()
