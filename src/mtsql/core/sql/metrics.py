"""Aggregates over scored turns, counted the way the official programs count them.

An item verdict is 1, 0 or ``None`` (unscorable: the official program would crash on that turn, or
its database is missing). Both official programs (the test-suite ``evaluation.py`` and the SParC
script) count alike: every turn of every interaction they read goes into ``all``, its hardness
level and its turn bucket (``turn 1``-``turn 4``, then ``turn >4``), accuracy = correct / count; an
interaction counts in ``joint_all`` when all its turns score 1. Neither can leave a turn out: a
crash stops the whole run. So the numbers an official program gives on a file with unscorable
turns are those of a run without the interactions that hold them, and that is what is counted here,
for each metric on its own (the official program run with ``--etype match``, then ``--etype exec``):

* an interaction with an unscorable turn is **left out whole**: its other, scorable turns count
  neither in ``all`` nor in the hardness and turn buckets nor in ``joint_all``;
* exact match needs only a schema, so a missing database (``wta_1``) leaves interactions out of the
  execution tables only;
* the summary lists, per metric, every interaction left out with its unscorable turns and their
  reasons, and also gives ``scorable_turns``: the accuracy over every scorable turn (left-out
  interactions included), which no official program prints.

A tally: ``count`` (turns in the bucket), ``scored`` (turns counted: the denominator), ``correct``,
``unscorable`` (turns without a verdict), ``left_out`` (``count - scored``: the unscorable turns and
their interactions' other turns) and ``accuracy`` (``None`` when nothing is counted; the official
programs print 0).

Differences between the two programs that mtsql does not copy: the SParC script's execution ``all``
cell is never incremented (it prints 0.000): the real accuracy is given. (Its dropping of a final
interaction with no blank line after it is a matter of reading files: see ``official_format``.)

Single-turn datasets (Spider): every question is an interaction of one turn, so leaving out an
interaction leaves out a question, and there is no ``joint_all`` and no turn bucket (the test-suite
program prints neither for a Spider file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mtsql.base.slices import HARDNESS_LEVELS, TURN_BUCKETS

METRICS = ("exact", "execution")
ITEM_FIELDS = {"exact": "exact_match", "execution": "exec_match"}


def turn_bucket(turn_index: int) -> str:
    """The official turn bucket (1-4, then >4) of a 0-based turn index."""
    return str(turn_index + 1) if turn_index < 4 else ">4"


def _tally(scores: Iterable[int | None], counted: Iterable[bool]) -> dict:
    pairs = list(zip(scores, counted, strict=True))
    kept = [s for s, keep in pairs if keep]
    return {
        "count": len(pairs),
        "scored": len(kept),
        "correct": sum(kept),
        "unscorable": sum(s is None for s, _ in pairs),
        "left_out": len(pairs) - len(kept),
        "accuracy": sum(kept) / len(kept) if kept else None,
    }


def _metric_tables(
    items: Sequence[dict], groups: dict[int, list[dict]], field: str, single_turn: bool
) -> dict:
    left_out = {index for index, group in groups.items() if any(i[field] is None for i in group)}

    def tally(selected: Iterable[dict]) -> dict:
        selected = list(selected)
        return _tally(
            (i[field] for i in selected), (i["interaction_index"] not in left_out for i in selected)
        )

    tables = {
        "question": tally(items),
        "by_hardness": {
            level: tally(i for i in items if i["hardness"] == level) for level in HARDNESS_LEVELS
        },
    }
    if not single_turn:
        joint = [
            None if index in left_out else int(all(i[field] == 1 for i in group))
            for index, group in groups.items()
        ]
        tables["interaction"] = _tally(joint, (s is not None for s in joint))
        tables["by_turn"] = {
            bucket: tally(i for i in items if turn_bucket(i["turn_index"]) == bucket)
            for bucket in TURN_BUCKETS
        }
    scorable = [i[field] for i in items if i[field] is not None]
    tables["scorable_turns"] = _tally(scorable, [True] * len(scorable))
    tables["left_out"] = [
        {
            "interaction_index": index,
            "db_id": groups[index][0]["db_id"],
            "turns": len(groups[index]),
            "unscorable": [
                {"turn_index": i["turn_index"], "error": i["error"]}
                for i in groups[index]
                if i[field] is None
            ],
        }
        for index in sorted(left_out)
    ]
    return tables


def summarize(items: Sequence[dict], metrics: Sequence[str] = METRICS, *, single_turn: bool = False) -> dict:
    """Summary tables of scored items (rows of ``items.jsonl``), for the metrics that were computed."""
    groups: dict[int, list[dict]] = {}
    for item in items:
        groups.setdefault(item["interaction_index"], []).append(item)
    summary: dict = {"turns": len(items), "single_turn": single_turn}
    if not single_turn:
        summary["interactions"] = len(groups)
    for metric in metrics:
        summary[metric] = _metric_tables(items, groups, ITEM_FIELDS[metric], single_turn)
    summary["unscorable"] = [
        {
            "interaction_index": i["interaction_index"],
            "turn_index": i["turn_index"],
            "db_id": i["db_id"],
            "metrics": [m for m in metrics if i[ITEM_FIELDS[m]] is None],
            "error": i["error"],
        }
        for i in items
        if any(i[ITEM_FIELDS[m]] is None for m in metrics)
    ]
    summary["missing"] = [
        {"interaction_index": i["interaction_index"], "turn_index": i["turn_index"]}
        for i in items
        if i.get("missing")
    ]
    return summary
