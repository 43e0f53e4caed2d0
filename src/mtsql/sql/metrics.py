"""Aggregates over scored turns: question and interaction match, by hardness and by turn position.

An item score is 1, 0 or ``None`` (unscorable). Unscorable items are counted and listed but never
folded into an accuracy: an accuracy is ``correct / scored``. An interaction matches when all its
turns score 1, scores 0 when some turn scores 0 and none is unscorable, and is unscorable when any
of its turns is (the official programs give no number for such a dialogue).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mtsql.sql.hardness import HARDNESS_LEVELS

METRICS = ("exact", "execution")
ITEM_FIELDS = {"exact": "exact_match", "execution": "exec_match"}
TURN_BUCKETS = ("1", "2", "3", "4", ">4")  # the evaluators print them as "turn 1" ... "turn >4"


def turn_bucket(turn_index: int) -> str:
    """The official turn bucket (1-4, then >4) of a 0-based turn index."""
    return str(turn_index + 1) if turn_index < 4 else ">4"


def _tally(scores: Iterable[int | None]) -> dict:
    scores = list(scores)
    scored = [s for s in scores if s is not None]
    return {"count": len(scores), "scored": len(scored), "correct": sum(scored),
            "unscorable": len(scores) - len(scored),
            "accuracy": sum(scored) / len(scored) if scored else None}


def _interaction_score(scores: Sequence[int | None]) -> int | None:
    if any(s is None for s in scores):
        return None
    return int(all(s == 1 for s in scores))


def summarize(items: Sequence[dict], metrics: Sequence[str] = METRICS) -> dict:
    """Summary tables of scored items (rows of ``items.jsonl``), for the metrics that were computed."""
    summary: dict = {"turns": len(items), "interactions": len({i["interaction_index"] for i in items})}
    by_interaction: dict[int, list[dict]] = {}
    for item in items:
        by_interaction.setdefault(item["interaction_index"], []).append(item)
    for metric in metrics:
        field = ITEM_FIELDS[metric]
        summary[metric] = {
            "question": _tally(i[field] for i in items),
            "interaction": _tally(_interaction_score([i[field] for i in group]) for group in by_interaction.values()),
            "by_hardness": {level: _tally(i[field] for i in items if i["hardness"] == level)
                            for level in HARDNESS_LEVELS},
            "by_turn": {bucket: _tally(i[field] for i in items if turn_bucket(i["turn_index"]) == bucket)
                        for bucket in TURN_BUCKETS},
        }
    summary["unscorable"] = [
        {"interaction_index": i["interaction_index"], "turn_index": i["turn_index"], "db_id": i["db_id"],
         "metrics": [m for m in metrics if i[ITEM_FIELDS[m]] is None], "error": i["error"]}
        for i in items if any(i[ITEM_FIELDS[m]] is None for m in metrics)
    ]
    summary["missing"] = [{"interaction_index": i["interaction_index"], "turn_index": i["turn_index"]}
                          for i in items if i.get("missing")]
    return summary
