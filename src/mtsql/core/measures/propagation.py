"""How errors propagate through a dialogue: EX of turn k given that turn k-1 was right or wrong.

Counted over official items (``interaction_index``, ``turn_index``, ``exec_match``): every turn after
the first whose own EX and whose previous turn's EX are both scored. With predicted memory a wrong
turn also becomes the memory of the next one, so the gap between the two rates is the cost of an
error carried forward; with gold memory it measures how much turns share their difficulty.
"""

from __future__ import annotations

from mtsql.core.sql.metrics import TURN_BUCKETS, turn_bucket

AFTER = ("after_right", "after_wrong")


def propagation(items: list[dict]) -> dict:
    """``{"after_right": tally, "after_wrong": tally, "by_turn": {bucket: {"after_right", "after_wrong"}}}``,
    a tally being ``{"correct", "scored"}`` (turn buckets from 2 on)."""
    ex = {(i["interaction_index"], i["turn_index"]): i["exec_match"] for i in items}

    def tally() -> dict:
        return {"correct": 0, "scored": 0}

    out = {key: tally() for key in AFTER}
    out["by_turn"] = {bucket: {key: tally() for key in AFTER} for bucket in TURN_BUCKETS[1:]}
    for (interaction, turn), value in sorted(ex.items()):
        previous = ex.get((interaction, turn - 1))
        if turn == 0 or value is None or previous is None:
            continue
        key = "after_right" if previous == 1 else "after_wrong"
        for cell in (out[key], out["by_turn"][turn_bucket(turn)][key]):
            cell["scored"] += 1
            cell["correct"] += int(value == 1)
    return out
