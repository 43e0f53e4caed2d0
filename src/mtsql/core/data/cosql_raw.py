"""CoSQL's full-dialogue format (``cosql_all_info_dialogs.json`` structure) flattened into SQL turns.

Each system turn that carries a ``query`` closes one question. The question is what was said since
the previous SQL turn, joined with `` | `` as CoSQL's state-tracking split does: the user's
utterances and the system's clarification questions. Chit-chat user acts (``IMPROPER``) and
greetings are left out; a dialogue whose database is in the dev split is dropped (the split
must be DB-disjoint from dev).
"""

from __future__ import annotations

from pathlib import Path

from mtsql.base.files import expect, read_json
from mtsql.core.data.official import normalise_sql
from mtsql.core.data.records import Turn

SKIPPED_USER_ACTS = {"IMPROPER"}
KEPT_SYSTEM_LABELS = {"CLARIFY"}


def load_raw_dialogues(
    path: Path, *, exclude_dbs: set[str] = frozenset(), split: str = "train"
) -> list[Turn]:
    data = read_json(path)
    expect(isinstance(data, list), path, "expected a JSON list of dialogues")
    turns: list[Turn] = []
    kept = 0
    for index, dialogue in enumerate(data):
        expect(
            isinstance(dialogue, dict) and "db_name" in dialogue and isinstance(dialogue.get("turns"), list),
            path,
            f"dialogue {index} lacks 'db_name' or a 'turns' list",
        )
        db_id = dialogue["db_name"]
        if db_id in exclude_dbs:
            continue
        pending: list[str] = []
        questions: list[str] = []
        sqls: list[str] = []
        for position, turn in enumerate(dialogue["turns"]):
            expect(
                isinstance(turn, dict) and "isUser" in turn,
                path,
                f"dialogue {index} turn {position} lacks 'isUser'",
            )
            text = (turn.get("text") or "").strip()
            if turn["isUser"]:
                if text and turn.get("type") not in SKIPPED_USER_ACTS:
                    pending.append(text)
                continue
            sql = normalise_sql(turn.get("query") or "")
            if not sql:
                if text and turn.get("label") in KEPT_SYSTEM_LABELS and pending:
                    pending.append(text)
                continue
            if not pending:  # an SQL turn with nothing asked since the last one: nothing to learn from
                continue
            question = " | ".join(pending)
            turns.append(
                Turn(
                    dataset="cosql",
                    split=split,
                    interaction_id=f"cosql-{split}-{kept:04d}",
                    interaction_index=kept,
                    turn_index=len(questions),
                    db_id=db_id,
                    question=question,
                    gold_sql=sql,
                    previous_questions=tuple(questions),
                    previous_sql=tuple(sqls),
                )
            )
            questions.append(question)
            sqls.append(sql)
            pending = []
        if questions:
            kept += 1
    return turns
