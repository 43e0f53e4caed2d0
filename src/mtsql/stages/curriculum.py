"""Curriculum: cut the RL pool into ordered stages by difficulty (MTSQL-R1 trained easy → hard).

``curriculum.by`` picks the label each item gets:

* ``hardness``: the official hardness of its gold SQL (easy, medium, hard, extra);
* ``turn``: its turn bucket as the evaluators print it (1, 2, 3, 4, >4);
* ``pass_rate``: how often the SFT model's samples solved it, from a sample artifact
  (``high`` ≥ 0.5 > ``low`` > 0 = ``zero``).

``curriculum.stages`` lists the labels of each stage in order. With ``drop_solved`` and a sample
artifact, items that every sample already solved are dropped (they carry no GRPO signal).

Reads: the RL pool (config section ``data``: the training split); optionally a ``sample`` input of
the SFT model on that pool (pass rates); config section ``curriculum``.
Writes: ``stage-<k>.jsonl`` (Turn dicts) and, in the metrics, a table of stage sizes by hardness and turn.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.config import StageView, result
from mtsql.base.errors import UsageError
from mtsql.base.files import write_jsonl
from mtsql.base.slices import CURRICULUM_LABELS
from mtsql.core.data import train_pool
from mtsql.core.data.records import Turn
from mtsql.core.data.settings import DataConfig
from mtsql.core.sql.metrics import turn_bucket
from mtsql.core.trajectories import ScoredRow, is_correct, read_rows


@dataclass(frozen=True)
class CurriculumConfig:
    """How the RL pool is cut into ordered stages."""

    by: Literal["hardness", "turn", "pass_rate"] = result("hardness")
    stages: tuple[tuple[str, ...], ...] = result((("easy", "medium"), ("hard",), ("extra",)))
    drop_solved: bool = result(True)


@dataclass(frozen=True)
class CurriculumView(StageView):
    data: DataConfig
    curriculum: CurriculumConfig


VIEW = CurriculumView
INPUTS = {"sample": None}
plan = hashed = engine_identity = check = None  # hooks this stage has not (app/runner.Stage)


def pass_rates(rows: list[ScoredRow]) -> dict[str, float]:
    """Share of correct samples (EX and EM, protocol-valid) per item uid."""
    seen: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        seen[row.uid].append(is_correct(row, ("ex", "em")))
    return {uid: sum(ok) / len(ok) for uid, ok in seen.items()}


def label_of(turn: Turn, by: str, rates: dict[str, float]) -> str | None:
    if by == "hardness":
        return turn.hardness
    if by == "turn":
        return turn_bucket(turn.turn_index)
    rate = rates.get(turn.uid)
    if rate is None:
        return None
    return "high" if rate >= 0.5 else "low" if rate > 0 else "zero"


def partition(
    turns: list[Turn], cfg: CurriculumConfig, rates: dict[str, float] | None = None
) -> tuple[list[list[Turn]], dict]:
    """Ordered stages of turns, and counts of what was dropped and why."""
    if cfg.by == "pass_rate" and rates is None:
        raise UsageError("curriculum.by=pass_rate needs a sample artifact of the SFT model on the RL pool")
    rates = rates or {}
    stage_of = {label: k for k, stage in enumerate(cfg.stages) for label in stage}
    stages: list[list[Turn]] = [[] for _ in cfg.stages]
    dropped = {"solved": 0, "unlabelled": 0, "not_in_any_stage": 0}
    for turn in turns:
        if cfg.drop_solved and rates.get(turn.uid) == 1.0:
            dropped["solved"] += 1
            continue
        label = label_of(turn, cfg.by, rates)
        if label is None:
            dropped["unlabelled"] += 1
        elif label not in stage_of:
            dropped["not_in_any_stage"] += 1
        else:
            stages[stage_of[label]].append(turn)
    return stages, dropped


def size_table(stages: list[list[Turn]]) -> dict[str, dict[str, int]]:
    table = {}
    for k, stage in enumerate(stages, 1):
        row = {h: sum(t.hardness == h for t in stage) for h in CURRICULUM_LABELS["hardness"]}
        row.update(
            {
                f"turn {b}": sum(turn_bucket(t.turn_index) == b for t in stage)
                for b in CURRICULUM_LABELS["turn"]
            }
        )
        row["total"] = len(stage)
        table[f"stage {k}"] = row
    return table


def run(ctx: StageContext, cfg: CurriculumView, *, sample: Artifact | None = None) -> dict:
    turns = train_pool(cfg.data, cfg.data_root)
    rates = pass_rates(read_rows(sample.path / "trajectories.jsonl")) if sample is not None else None
    stages, dropped = partition(turns, cfg.curriculum, rates)
    if not any(stages):
        raise UsageError(
            f"curriculum: every stage is empty ({len(turns)} items in the pool, dropped {dropped})"
        )
    for k, stage in enumerate(stages, 1):
        write_jsonl(ctx.out / f"stage-{k}.jsonl", (t.to_dict() for t in stage))
    return {"pool": len(turns), "stages": len(stages), "dropped": dropped, "table": size_table(stages)}
