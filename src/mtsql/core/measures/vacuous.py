"""Vacuous matches: a gold query whose result is empty (no rows, or only NULL values) is matched by any
prediction that also returns nothing, right or not. Such turns are flagged, counted in the data
check, and left out of a second EX beside the official one (EX on the non-empty-gold subset); the
rewards can refuse them credit (``reward.empty_match_credit: false``).

"Empty" is the sandbox's own ``empty`` result kind (``mtsql.core.agent.tools.result_kind``), the one the
agent's observations and the exec-verify reward use; a gold that fails to run is not flagged.
"""

from __future__ import annotations

from pathlib import Path

from mtsql.core.agent.tools import result_kind
from mtsql.core.sql.executor import execute_cached


def is_vacuous(db_path: Path, sql: str, timeout_s: float = 5.0) -> bool | None:
    """True when ``sql`` runs and returns no rows or only NULLs; None when it does not run."""
    result = execute_cached(db_path, sql, timeout_s=timeout_s)
    return None if not result.ok else result_kind(result) == "empty"


def non_empty_gold_ex(items: list[dict], vacuous: set[tuple[int, int]], left_out: set[int]) -> dict:
    """EX over the turns the official figure counts (interactions not ``left_out``, EX scored) whose gold
    is not vacuous (``(interaction_index, turn_index)`` in ``vacuous``): ``{"correct", "scored",
    "vacuous"}``, ``vacuous`` being how many counted turns were set aside."""
    counted = [i for i in items if i["interaction_index"] not in left_out and i["exec_match"] is not None]
    kept = [i for i in counted if (i["interaction_index"], i["turn_index"]) not in vacuous]
    return {"correct": sum(i["exec_match"] == 1 for i in kept), "scored": len(kept),
            "vacuous": len(counted) - len(kept)}
