"""Spider in its official single-question format (``dev.json``): every question an interaction of
one turn, in file order (the order of ``dev_gold.txt``, one line per question)."""

from __future__ import annotations

from pathlib import Path

from mtsql.base.files import expect, read_json
from mtsql.core.data.official import normalise_sql
from mtsql.core.data.records import Turn


def load_spider(path: Path, split: str) -> list[Turn]:
    data = read_json(path)
    expect(isinstance(data, list), path, "expected a JSON list of questions")
    turns = []
    for index, item in enumerate(data):
        expect(isinstance(item, dict) and all(key in item for key in ("db_id", "question", "query")), path,
               f"question {index} lacks 'db_id', 'question' or 'query'")
        turns.append(Turn(dataset="spider", split=split, interaction_id=f"spider-{split}-{index:04d}",
                          interaction_index=index, turn_index=0, db_id=item["db_id"],
                          question=item["question"].strip(), gold_sql=normalise_sql(item["query"])))
    return turns
