"""Execution match (EX): the test-suite algorithm (default) and the SParC-script algorithm.

Test-suite (``taoyds/test-suite-sql-eval``, ``plug_value=False``, ``keep_distinct=False``):

1. ``> =``, ``< =``, ``! =`` are joined in both queries; every ``DISTINCT`` token of the first
   statement is removed (sqlparse tokens, so also inside ``count()``); ``YEAR(CURDATE())`` -> 2020;
2. row order matters only if the gold (after step 1) contains the substring ``order by``;
3. both run on every ``*.sqlite`` file of the gold database's folder; a gold that fails there is an
   official crash (null); a prediction that fails scores 0;
4. results are equal if both are empty, or if they have the same number of rows and columns and some
   permutation of the prediction's columns makes the rows equal as a bag (or as a list when order
   matters).

Gold queries are prepared and run through :mod:`mtsql.core.sql.gold_cache` (once per process, or once
for good); a prediction identical to its gold, once prepared, is not run again (the same query
gives the same rows).

SParC script: the prediction then the gold run as written on the database; a failing prediction
scores 0, a failing gold is a crash; the results are compared as ``{select key: column values}``
dicts, the key being the rebuilt column unit of each SELECT item (aggregates are not part of the
key, so duplicate keys collapse), with row order and Python ``==`` on values.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from mtsql.core.sql import gold_cache
from mtsql.core.sql.errors import OfficialCrash
from mtsql.core.sql.executor import ExecResult, execute

GOLD_MAX_ROWS = 1_000_000
PRED_MIN_ROW_CAP = 10_000
SQLPARSE_MAX_TOKENS = 10_000  # sqlparse refuses to group longer statements: the official program crashes
# a statement split (a ";" with more than spaces or tabs after it, or sqlparse's upper-case "GO") or a
# DISTINCT token may change the text; a final ";" keeps the trailing blanks in the first statement
_MAY_CHANGE = re.compile(r";(?![ \t]*\Z)|GO|[dD][iI][sS][tT][iI][nN][cC][tT]")
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def join_spaced_comparisons(sql: str) -> str:
    """``> =`` -> ``>=``, ``< =`` -> ``<=``, ``! =`` -> ``!=`` (the test-suite's post-processing)."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def remove_distinct(sql: str) -> str:
    """The first statement of ``sql`` (sqlparse's split) with every ``distinct`` token removed."""
    if len(sql) < SQLPARSE_MAX_TOKENS and sql.strip() and not _MAY_CHANGE.search(sql):
        return sql  # one statement, no DISTINCT token: sqlparse's tokens join back to the input
    return _remove_distinct_tokens(sql)


@functools.lru_cache(maxsize=16_384)
def _remove_distinct_tokens(sql: str) -> str:
    from sqlparse import lexer
    from sqlparse.engine import StatementSplitter

    first = next(iter(StatementSplitter().process(lexer.tokenize(sql))), None)
    if first is None:
        raise OfficialCrash("no SQL statement (sqlparse finds none)")
    tokens = list(first.flatten())
    if len(tokens) > SQLPARSE_MAX_TOKENS:
        raise OfficialCrash(f"query has more than {SQLPARSE_MAX_TOKENS} sqlparse tokens")
    return "".join(tok.value for tok in tokens if tok.value.lower() != "distinct")


def replace_current_year(sql: str) -> str:
    return _CUR_YEAR.sub("2020", sql)


@functools.lru_cache(maxsize=1024)
def testsuite_databases(db_dir: Path) -> tuple[Path, ...]:
    """Every file of a database folder whose name contains ``.sqlite`` (the test-suite's rule; listed
    once per process)."""
    if not db_dir.is_dir():
        return ()
    return tuple(sorted(p for p in db_dir.iterdir() if ".sqlite" in p.name and p.is_file()))


def testsuite_exec_match(
    gold_sql: str, pred_sql: str, db_paths: Sequence[Path], *, timeout_s: float
) -> tuple[int, str | None]:
    """(score, error) with the test-suite algorithm; raises :class:`OfficialCrash` when the gold fails."""
    gold_run, order_matters = gold_cache.derived(
        "testsuite gold", db_paths[0], gold_sql, lambda: _testsuite_query(gold_sql)
    )
    try:
        pred_run = _testsuite_query(pred_sql)[0]
    except OfficialCrash as exc:  # the official program stops here too; a bad prediction scores 0
        return 0, f"prediction: {exc}"
    for db_path in db_paths:
        gold_result = gold_cache.executed(db_path, gold_run, timeout_s=timeout_s, max_rows=GOLD_MAX_ROWS)
        if not gold_result.ok:
            raise OfficialCrash(f"gold fails on {Path(db_path).name}: {gold_result.error_message}")
        if pred_run == gold_run:  # the same query gives the same rows: no need to run it again
            continue
        # more rows than the gold can only score 0, so the prediction's row cap never changes a verdict
        pred_cap = max(len(gold_result.rows), PRED_MIN_ROW_CAP)
        pred_result = execute(db_path, pred_run, timeout_s=timeout_s, max_rows=pred_cap)
        if not pred_result.ok:
            return 0, _exec_error(pred_result)
        if not results_equal(gold_result.rows, pred_result.rows, order_matters=order_matters):
            return 0, None
    return 1, None


def _testsuite_query(sql: str) -> tuple[str, bool]:
    """(the query as the test-suite runs it, whether it has ``order by``): steps 1 and 2."""
    normalised = remove_distinct(join_spaced_comparisons(sql))
    return replace_current_year(normalised), "order by" in normalised.lower()


def _exec_error(result: ExecResult) -> str:
    return f"{result.error_class}: {result.error_message}"


def results_equal(gold: Sequence[tuple], pred: Sequence[tuple], *, order_matters: bool) -> bool:
    """Test-suite denotation equality (see the module docstring, step 4)."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    width = len(gold[0])
    if len(pred[0]) != width:
        return False
    return _some_permutation_matches(gold, pred, width, order_matters) and _quick_check(
        gold, pred, width, order_matters
    )


def _some_permutation_matches(gold, pred, width: int, order_matters: bool) -> bool:
    gold_list = list(gold)
    gold_bag = None if order_matters else Counter(gold_list)
    for perm in _column_permutations(gold, pred, width):
        permuted = [tuple(row[i] for i in perm) for row in pred] if width > 1 else list(pred)
        if permuted == gold_list if order_matters else Counter(permuted) == gold_bag:
            return True
    return False


def _quick_check(gold, pred, width: int, order_matters: bool) -> bool:
    """The official quick-reject test: rows with their values sorted by ``str(v) + str(type(v))``.

    It is implied by a matching permutation except when equal numbers differ in type or sign (``1`` and
    ``1.0``, ``0.0`` and ``-0.0``) and so sort differently; only then can it fail, so it runs only
    when floats are present.
    """
    if width == 1 or not any(type(v) is float for rows in (gold, pred) for row in rows for v in row):
        return True
    left, right = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    return left == right if order_matters else set(left) == set(right)


def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda value: str(value) + str(type(value))))


def _column_permutations(gold, pred, width: int):
    """Column permutations of the prediction worth trying (identity first): pred column j may stand
    for gold column i only if every value of j occurs in column i, which any matching permutation
    satisfies.
    """
    if width == 1:
        yield (0,)
        return
    gold_columns = [{row[i] for row in gold} for i in range(width)]
    pred_columns = [{row[j] for row in pred} for j in range(width)]
    candidates = [[j for j in range(width) if pred_columns[j] <= gold_columns[i]] for i in range(width)]

    def extend(prefix: list[int], used: set[int]):
        if len(prefix) == width:
            yield tuple(prefix)
            return
        for j in candidates[len(prefix)]:
            if j not in used:
                used.add(j)
                prefix.append(j)
                yield from extend(prefix, used)
                prefix.pop()
                used.discard(j)

    yield from extend([], set())


def sparc_exec_match(
    gold_sql: str, pred_sql: str, db_path: Path, gold_select: list, pred_select: list, *, timeout_s: float
) -> tuple[int, str | None]:
    """(score, error) with the SParC-script algorithm; ``*_select`` are the rebuilt SELECT item lists.

    Raises :class:`OfficialCrash` when the gold fails or a SELECT has more items than its result
    has columns (the official program would stop there).
    """
    run = gold_cache.executed if pred_sql == gold_sql else execute
    pred_result = run(db_path, pred_sql, timeout_s=timeout_s, max_rows=GOLD_MAX_ROWS)
    if not pred_result.ok:
        return 0, _exec_error(pred_result)
    gold_result = gold_cache.executed(db_path, gold_sql, timeout_s=timeout_s, max_rows=GOLD_MAX_ROWS)
    if not gold_result.ok:
        raise OfficialCrash(f"gold fails: {gold_result.error_message}")
    return int(
        _keyed_columns(pred_result.rows, pred_select) == _keyed_columns(gold_result.rows, gold_select)
    ), None


def _keyed_columns(rows: Sequence[tuple], select_items: list) -> dict:
    keyed = {}
    for index, (_agg, (op, first, second)) in enumerate(select_items):
        key = tuple(first) if not second else (op, tuple(first), tuple(second))
        if rows and index >= len(rows[0]):
            raise OfficialCrash("the SELECT has more items than the result has columns")
        keyed[key] = [row[index] for row in rows]
    return keyed
