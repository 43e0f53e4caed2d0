"""Spider in its official single-question format (``dev.json``): every question an interaction of
one turn, in file order (the order of ``dev_gold.txt``, one line per question). Spider's robustness
sets share the format (:mod:`mtsql.core.data.robustness`): another question field, a type per question."""

from __future__ import annotations

from pathlib import Path

from mtsql.base.files import expect, read_json
from mtsql.core.data.official import normalise_sql
from mtsql.core.data.records import Turn


def load_spider(
    path: Path,
    split: str,
    *,
    dataset: str = "spider",
    question_key: str = "question",
    type_key: str | None = None,
) -> list[Turn]:
    """The questions of one file; ``type_key``: a field each question has, kept in ``Turn.extra["type"]``."""
    data = read_json(path)
    expect(isinstance(data, list), path, "expected a JSON list of questions")
    keys = ("db_id", question_key, "query", *((type_key,) if type_key else ()))
    turns = []
    for index, item in enumerate(data):
        expect(
            isinstance(item, dict)
            and all(key in item for key in keys)
            and isinstance(item[question_key], str),
            path,
            f"question {index} lacks {', '.join(repr(k) for k in keys)}",
        )
        turns.append(
            Turn(
                dataset=dataset,
                split=split,
                interaction_id=f"{dataset}-{split}-{index:04d}",
                interaction_index=index,
                turn_index=0,
                db_id=item["db_id"],
                question=item[question_key].strip(),
                gold_sql=normalise_sql(item["query"]),
                extra={"type": item[type_key]} if type_key else {},
            )
        )
    return turns
