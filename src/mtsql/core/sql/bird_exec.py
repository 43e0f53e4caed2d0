"""BIRD's execution accuracy (EX), with the semantics of BIRD's official evaluator, in mtsql's sandbox.

    ex, error = bird_exec_match(gold_sql, pred_sql, db_path)          # 1 or 0, and why when 0
    scores = score_bird_rows(rows, BirdOptions(workers=2))             # {index: (ex, error)} of many

What decides an item, as the official evaluator (``bird-bench/mini_dev``, SQLite) does:

* both queries run as written on the item's database, with Python's ``sqlite3`` (so two statements,
  and ``...;  ;``, fail; an empty query runs and returns no rows);
* EX is 1 iff the two results are equal as **sets of rows**: row order and duplicate rows do not
  matter, column order does, and Python's ``==`` compares values (``1 == 1.0``, ``'a' != 'A'``);
* an error of either query gives 0 (never "unscorable"), text that is not UTF-8 included (the
  official code does not decode it lossily);
* both executions together get ``timeout_s`` (30 s officially); past it, 0. The gold runs first here
  (once, memoised and kept on disk by :mod:`mtsql.core.sql.gold_cache`), and the prediction gets what
  the gold left of the budget, as if it had run in the same item.

Where mtsql deviates, on purpose: the database is opened read-only (the official code opens it
read-write, so a prediction that writes would change it for every later item): a prediction that
writes scores 0 here; and each result is capped (``MAX_ROWS`` rows, the sandbox's byte budget): a
result past the caps scores 0.

Items are scored in worker processes, a few items of one database to a task, so that a slow item
holds up only the few queued behind it (:mod:`mtsql.core.sql.workers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mtsql.core.sql import gold_cache
from mtsql.core.sql.executor import ExecResult, execute
from mtsql.core.sql.workers import GroupWorkers, available_cores

BIRD_TIMEOUT_S = 30.0  # the official evaluator's default meta_time_out, for both queries of an item
MAX_ROWS = 1_000_000
SEPARATOR = "\t----- bird -----\t"
TASK_ITEMS = 8  # items of one database per worker task: a slow item delays at most the others of its task


def prediction_sql(value) -> str:
    """The SQL the official evaluator runs for one value of a prediction JSON: the text before the
    separator (as is) when there is exactly one, else the whole string stripped; a value that is not
    a string runs as ``" "``."""
    if not isinstance(value, str):
        return " "
    parts = value.split(SEPARATOR)
    return parts[0] if len(parts) == 2 else value.strip()


def bird_exec_match(
    gold_sql: str,
    pred_sql: str,
    db_path: Path,
    *,
    timeout_s: float = BIRD_TIMEOUT_S,
    max_rows: int = MAX_ROWS,
) -> tuple[int, str | None]:
    """EX of one item (1 or 0) and, for a 0 that is not a plain mismatch, the reason."""
    gold = gold_cache.executed(db_path, gold_sql, timeout_s=timeout_s, max_rows=max_rows, lossy_text=False)
    if not gold.ok:
        return 0, f"gold: {_why(gold)}"
    left = timeout_s - gold.elapsed_s
    if pred_sql == gold_sql and 2 * gold.elapsed_s < timeout_s:
        return 1, None  # the same query gives the same rows, and both runs fit in the budget
    if left <= 0:
        return 0, "timeout: the gold used the item's whole time budget"
    pred = execute(db_path, pred_sql, timeout_s=left, max_rows=max_rows, lossy_text=False)
    if not pred.ok:
        return 0, f"prediction: {_why(pred)}"
    return int(set(pred.rows) == set(gold.rows)), None


def _why(result: ExecResult) -> str:
    return f"{result.error_class} ({result.error_message})"


@dataclass(frozen=True)
class BirdOptions:
    """How to score BIRD: the time budget of an item (decides verdicts), and how fast: ``workers``
    processes (0: one per core) and ``gold_cache`` (gold results kept on disk between runs)."""

    timeout_s: float = BIRD_TIMEOUT_S
    workers: int = 1
    gold_cache: bool = False


def score_bird_rows(rows: list[dict], options: BirdOptions) -> Iterator[tuple[int, tuple]]:
    """``(index, (ex, error, seconds))`` of every row (``db_id``, ``db_path``, ``gold``, ``pred``), in
    completion order (``seconds``: the time the item took, gold included unless the gold cache had it)."""
    groups: dict[tuple[str, int], list[tuple[int, dict]]] = {}
    per_db: dict[str, int] = {}
    for index, row in enumerate(rows):
        seen = per_db.get(row["db_id"], 0)
        per_db[row["db_id"]] = seen + 1
        groups.setdefault((row["db_id"], seen // TASK_ITEMS), []).append((index, row))
    workers = min(options.workers or available_cores(), len(groups))
    with _scored(groups, options, workers) as results:
        yield from results


@contextmanager
def _scored(groups: dict, options: BirdOptions, workers: int) -> Iterator:
    if workers <= 1:
        yield _score_groups(groups, options)
        return
    if options.gold_cache:
        gold_cache.code_digest()
    with GroupWorkers(_score_groups, groups, (options,), workers=workers) as pool:
        yield pool.results()


def _score_groups(groups: dict, options: BirdOptions) -> Iterator[tuple[int, tuple]]:
    for (db_id, _), members in groups.items():
        folder = Path(members[0][1]["db_path"]).parent.parent
        with gold_cache.persisted(db_id, (folder,)) if options.gold_cache else nullcontext():
            for index, row in members:
                started = time.perf_counter()
                ex, error = bird_exec_match(
                    row["gold"], row["pred"], Path(row["db_path"]), timeout_s=options.timeout_s
                )
                yield index, (ex, error, time.perf_counter() - started)
