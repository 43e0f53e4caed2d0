"""Spider's robustness sets (SQL-R1's Table 2), single-turn questions in Spider's format.

* ``spider_dk``: Spider-DK, 535 questions that need domain knowledge, with its own ``tables.json`` and
  three modified databases (``database/new_*``); each question's ``type`` (0: none, 1-5: the kinds of
  domain knowledge of the Spider-DK paper, 23 / 34: two kinds) is kept in ``Turn.extra["type"]``, and
  the evaluation also reports EX by it.
* ``spider_syn``: Spider-Syn, Spider dev's 1,034 questions with schema words replaced by synonyms; the
  question asked is ``SpiderSynQuestion`` (``SpiderQuestion`` is Spider's original).
* ``spider_realistic``: Spider-Realistic (508 questions) is published outside GitHub and not shipped:
  a user puts its questions at ``<data>/spider_realistic/dev.json`` (Spider's format).

A set without a ``tables.json`` of its own describes Spider's databases with Spider's
(``spider/tables.json``), for prompts and exact match alike.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from mtsql.base.errors import UsageError

ROBUSTNESS_SETS = ("spider_dk", "spider_syn", "spider_realistic")
QUESTION_KEY = {"spider_syn": "SpiderSynQuestion"}  # else "question"
TYPE_KEY = {"spider_dk": "type"}  # kept in Turn.extra["type"]; the evaluation reports EX by it
SHIPPED = {"spider_dk", "spider_syn"}


def question_key(dataset: str) -> str:
    return QUESTION_KEY.get(dataset, "question")


def schema_tables(dataset: str, root: Path) -> Path:
    """The ``tables.json`` that describes ``dataset``'s databases: its own, else Spider's for a
    robustness set that has none (Spider-Syn and Spider-Realistic reuse Spider's databases)."""
    own = root / dataset / "tables.json"
    if dataset in ROBUSTNESS_SETS and not own.is_file():
        return root / "spider" / "tables.json"
    return own


def check_present(dataset: str, path: Path, root: Path) -> None:
    """A one-line ``UsageError`` when a robustness set's question file is not in the data folder."""
    if dataset not in ROBUSTNESS_SETS or path.is_file():
        return
    if dataset in SHIPPED:
        raise UsageError(
            f"{path}: no {dataset} questions in {root}; is it the data folder? (the shipped one holds "
            f"{dataset}/dev.json)"
        )
    raise UsageError(
        f"{path}: Spider-Realistic is not shipped with mtsql (it is published outside GitHub): put its "
        "questions there in Spider's format (a JSON list of question, query, db_id; "
        "and dev_gold.txt, query<TAB>db_id a line, for `mtsql evaluate --pred`)"
    )


def ex_by_type(items: list[dict], types: dict[int, object]) -> dict[str, dict]:
    """EX by question type (Spider-DK): ``{type: {"count", "scored", "correct", "accuracy"}}`` over the
    scored items (``exec_match`` not None), keyed by the item's ``interaction_index``; types in order."""
    count: Counter = Counter()
    scored: Counter = Counter()
    correct: Counter = Counter()
    for item in items:
        kind = str(types[item["interaction_index"]])
        count[kind] += 1
        if item["exec_match"] is not None:
            scored[kind] += 1
            correct[kind] += item["exec_match"]
    return {
        kind: {
            "count": count[kind],
            "scored": scored[kind],
            "correct": correct[kind],
            "accuracy": correct[kind] / scored[kind] if scored[kind] else None,
        }
        for kind in sorted(count, key=lambda k: (len(k), k))
    }
