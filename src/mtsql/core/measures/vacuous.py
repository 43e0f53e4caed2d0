"""EX without the vacuous golds: the turns whose gold result is empty (``mtsql.core.sql.vacuous``) are
matched by any prediction that also returns nothing, right or not, so a second EX beside the official
one leaves them out (EX on the non-empty-gold subset).
"""

from __future__ import annotations


def non_empty_gold_ex(items: list[dict], vacuous: set[tuple[int, int]], left_out: set[int]) -> dict:
    """EX over the turns the official figure counts (interactions not ``left_out``, EX scored) whose gold
    is not vacuous (``(interaction_index, turn_index)`` in ``vacuous``): ``{"correct", "scored",
    "vacuous"}``, ``vacuous`` being how many counted turns were set aside."""
    counted = [i for i in items if i["interaction_index"] not in left_out and i["exec_match"] is not None]
    kept = [i for i in counted if (i["interaction_index"], i["turn_index"]) not in vacuous]
    return {
        "correct": sum(i["exec_match"] == 1 for i in kept),
        "scored": len(kept),
        "vacuous": len(counted) - len(kept),
    }
