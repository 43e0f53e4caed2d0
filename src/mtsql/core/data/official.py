"""SParC / CoSQL in the official interaction format (``dev.json``, and ``train.json`` when present)."""

from __future__ import annotations

from pathlib import Path

from mtsql.base.files import expect, read_json
from mtsql.core.data.records import Turn


def normalise_sql(sql: str) -> str:
    """One line per query, as in the official gold files (tabs and newlines become spaces)."""
    return " ".join(sql.replace("\t", " ").replace("\n", " ").replace("\r", " ").split(" ")).strip()


def load_official(path: Path, dataset: str, split: str) -> list[Turn]:
    """Flatten an official-format file into turns, in file order (the order of the gold file)."""
    data = read_json(path)
    expect(isinstance(data, list), path, "expected a JSON list of interactions")
    turns: list[Turn] = []
    for index, item in enumerate(data):
        expect(
            isinstance(item, dict) and "interaction" in item and "database_id" in item,
            path,
            f"interaction {index} lacks 'interaction' or 'database_id'",
        )
        expect(
            isinstance(item["interaction"], list) and bool(item["interaction"]),
            path,
            f"interaction {index} has no turn (its 'interaction' list is empty): remove it or fix the file",
        )
        questions: list[str] = []
        sqls: list[str] = []
        for turn_index, turn in enumerate(item["interaction"]):
            expect(
                isinstance(turn, dict) and "utterance" in turn and "query" in turn,
                path,
                f"interaction {index} turn {turn_index} lacks 'utterance' or 'query'",
            )
            sql = normalise_sql(turn["query"])
            turns.append(
                Turn(
                    dataset=dataset,
                    split=split,
                    interaction_id=f"{dataset}-{split}-{index:04d}",
                    interaction_index=index,
                    turn_index=turn_index,
                    db_id=item["database_id"],
                    question=turn["utterance"].strip(),
                    gold_sql=sql,
                    previous_questions=tuple(questions),
                    previous_sql=tuple(sqls),
                )
            )
            questions.append(turn["utterance"].strip())
            sqls.append(sql)
    return turns
