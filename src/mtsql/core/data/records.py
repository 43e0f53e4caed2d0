"""The uniform record every stage works on: one turn of one SParC / CoSQL interaction (a Spider or
BIRD question is an interaction of one turn)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from mtsql.base.files import read_jsonl


@dataclass(frozen=True)
class Turn:
    """One question of a dialogue, with everything said before it.

    ``interaction_index`` and ``turn_index`` are 0-based positions, in the order of the official
    gold file, so predictions line up with ``dev_gold.txt``.
    """

    dataset: str  # "sparc" | "cosql" | "spider" | "bird"
    split: str  # "dev" | "train"
    interaction_id: str  # stable id, e.g. "cosql-dev-0042"
    interaction_index: int
    turn_index: int
    db_id: str
    question: str
    gold_sql: str
    previous_questions: tuple[str, ...] = ()
    previous_sql: tuple[str, ...] = ()  # gold SQL of the earlier turns, same length as above
    hardness: str | None = None  # easy | medium | hard | extra, filled from the parsed gold
    evidence: str = ""  # BIRD's external knowledge, shown with the question ("" for the other datasets)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def uid(self) -> str:
        return f"{self.interaction_id}/{self.turn_index}"

    def alone(self) -> Turn:
        """This question as a one-turn interaction of its own: no earlier questions, no memory."""
        return replace(self, interaction_id=self.uid, turn_index=0, previous_questions=(), previous_sql=())

    def to_dict(self) -> dict:
        row = asdict(self)
        if not self.evidence:  # rows of datasets without evidence keep the shape (and bytes) they had
            del row["evidence"]
        return row

    @classmethod
    def from_dict(cls, row: dict) -> Turn:
        row = dict(row)
        row["previous_questions"] = tuple(row.get("previous_questions", ()))
        row["previous_sql"] = tuple(row.get("previous_sql", ()))
        return cls(**row)


def read_turns(path: Path) -> list[Turn]:
    """The Turn records of a JSONL file of Turn dicts (a reject pool, a curriculum stage)."""
    return [Turn.from_dict(row) for row in read_jsonl(path)]
