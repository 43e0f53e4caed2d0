"""Vacuous golds: a gold query whose result is empty (no rows, or only NULL values) is matched by any
prediction that also returns nothing, right or not. Such turns are flagged by the data check, left out
of a second EX (``mtsql.core.measures.vacuous``), and the rewards can refuse them credit
(``reward.empty_match_credit: false``).

"Empty" is the sandbox's own ``empty`` result kind (``executor.result_kind``), the one the agent's
observations and the exec-verify reward use; a gold that fails to run is not flagged.
"""

from __future__ import annotations

from pathlib import Path

from mtsql.core.sql.executor import execute_cached, result_kind


def is_vacuous(db_path: Path, sql: str, timeout_s: float = 5.0) -> bool | None:
    """True when ``sql`` runs and returns no rows or only NULLs; None when it does not run."""
    result = execute_cached(db_path, sql, timeout_s=timeout_s)
    return None if not result.ok else result_kind(result) == "empty"
