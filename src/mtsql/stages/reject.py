"""Difficulty-aware reject sampling (MTSQL-R1's self-taught SFT filter).

Reads a sample artifact's ``trajectories.jsonl`` and keeps, per item (one turn of one dialogue):

* only correct trajectories (``reject.require``: ex and em by default) that follow the protocol;
* if the item is easy, or every sample of it was correct: at most ``keep_easy`` of the shortest;
* otherwise: up to ``keep_hard`` long ones, chosen greedily to differ from each other in their
  action sequence and in the edits between the SQL they proposed (Jaccard distance, deterministic);
* with ``keep_recoveries``, the shortest of the model's own recoveries too (a failed query, then a
  right answer in the same turn: ``measures.revisions.is_recovery``) when the choice left every one
  out: what the long horizon is for, kept for the next round. Scripted rows are not affected.

Items with no correct trajectory go to ``pool.jsonl``: the next round samples only those.

Reads: the ``sample`` input's ``trajectories.jsonl``; config section ``reject``.
Writes: ``kept.jsonl`` (the chosen sample rows), ``pool.jsonl`` (Turn dicts) and, in the metrics, a
table by hardness and turn: sampled, correct, kept, unsolved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.config import Samples, StageView, result
from mtsql.base.errors import UsageError
from mtsql.base.files import write_jsonl
from mtsql.core.measures.revisions import is_recovery
from mtsql.core.sql.metrics import turn_bucket
from mtsql.core.trajectories import ScoredRow, is_correct, read_rows, write_rows


@dataclass(frozen=True)
class RejectConfig:
    """Difficulty-aware reject sampling (``mtsql.stages.reject``)."""

    require: tuple[Literal["ex", "em"], ...] = result(("ex", "em"))
    keep_easy: Samples = result(2)
    keep_hard: Samples = result(3)
    keep_recoveries: bool = result(
        True
    )  # a model-written recovery (a failed exec_sql, then a query that ran and
    # a right answer) of an item is kept even where the shortest or the
    # most diverse choice left it out (measures.revisions.is_recovery)


@dataclass(frozen=True)
class RejectView(StageView):
    reject: RejectConfig


VIEW = RejectView
INPUTS = {"sample": "sample"}
plan = hashed = engine_identity = None  # hooks this stage has not (app/runner.Stage)


def select(rows: list[ScoredRow], cfg: RejectConfig) -> tuple[list[ScoredRow], list[dict], dict]:
    """Choose the kept rows; returns (kept rows, unsolved turns, counts table)."""
    by_item: dict[str, list[ScoredRow]] = defaultdict(list)
    for row in rows:
        by_item[row.uid].append(row)
    kept, unsolved = [], []
    table: dict[str, dict[str, int]] = defaultdict(
        lambda: {"sampled": 0, "correct": 0, "kept": 0, "unsolved": 0}
    )
    for samples in by_item.values():
        samples.sort(key=lambda r: r.sample)
        correct = [r for r in samples if is_correct(r, cfg.require)]
        first = samples[0]
        if not correct:
            chosen = []
            unsolved.append(first.turn)
        elif first.hardness == "easy" or len(correct) == len(samples):
            chosen = sorted(correct, key=lambda r: (r.response_tokens, r.sample))[: cfg.keep_easy]
        else:
            chosen = diverse(correct, cfg.keep_hard)
        recoveries = [r for r in correct if recovery(r)] if cfg.keep_recoveries else []
        if recoveries and not any(recovery(r) for r in chosen):
            chosen.append(min(recoveries, key=lambda r: (r.response_tokens, r.sample)))
        kept.extend(chosen)
        for bucket in (f"hardness={first.hardness}", f"turn={turn_bucket(first.turn.turn_index)}", "all"):
            counts = table[bucket]
            counts["sampled"] += len(samples)
            counts["correct"] += len(correct)
            counts["kept"] += len(chosen)
            counts["unsolved"] += int(not correct)
    return kept, unsolved, dict(sorted(table.items()))


def recovery(row: ScoredRow) -> bool:
    """A trajectory the model wrote (not a scripted policy) that recovered from a failed query."""
    return row.response_ids is not None and is_recovery(row.trajectory, row.execution)


def diverse(rows: list[ScoredRow], k: int) -> list[ScoredRow]:
    """Greedy farthest-first choice of ``k`` long rows, by action sequence and SQL edits."""
    features = {id(r): _features(r) for r in rows}
    ordered = sorted(rows, key=lambda r: (-r.response_tokens, r.sample))
    chosen = [ordered[0]]
    while len(chosen) < min(k, len(ordered)):
        rest = [r for r in ordered if r not in chosen]
        chosen.append(
            max(
                rest,
                key=lambda r: (
                    min(_distance(features[id(r)], features[id(c)]) for c in chosen),
                    r.response_tokens,
                    -r.sample,
                ),
            )
        )
    return chosen


def _features(row: ScoredRow) -> tuple[set, set]:
    actions = ["<s>", *row.actions, "</s>"]
    action_grams = {tuple(actions[i : i + 2]) for i in range(len(actions) - 1)}
    edits: set = set()
    previous: set = set()
    for sql in row.proposed_sql:
        tokens = set(sql.lower().split())
        edits |= {f"+{t}" for t in tokens - previous} | {f"-{t}" for t in previous - tokens}
        previous = tokens
    return action_grams, edits


def _distance(a: tuple[set, set], b: tuple[set, set]) -> float:
    return sum(1 - len(x & y) / len(x | y) if x | y else 0.0 for x, y in zip(a, b, strict=True)) / 2


def check(cfg: RejectView, *, sample) -> None:
    """A sample artifact without trajectories leaves nothing to choose from: refused before anything is
    written."""
    if isinstance(sample, Artifact) and not sample.records("trajectories.jsonl"):
        raise UsageError(
            f"{sample.path}: the {sample.label} artifact holds no trajectories, so there is nothing to "
            "reject-sample; sample again (sample.n >= 1, on a pool with turns)"
        )


def run(ctx: StageContext, cfg: RejectView, *, sample: Artifact) -> dict:
    rows = read_rows(sample.path / "trajectories.jsonl")
    kept, unsolved, table = select(rows, cfg.reject)
    write_rows(ctx.out / "kept.jsonl", kept)
    write_jsonl(ctx.out / "pool.jsonl", (turn.to_dict() for turn in unsolved))
    totals = table.get("all", {"sampled": 0, "correct": 0, "kept": 0, "unsolved": 0})
    items = len({r.uid for r in rows})
    return {
        "items": items,
        "solved": items - totals["unsolved"],
        **totals,
        "recoveries": sum(recovery(r) for r in kept),
        "table": table,
    }
