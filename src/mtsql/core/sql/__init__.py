"""SQL layer: the read-only sandbox, the Spider-SQL parser and the official-equivalent metrics.

    from mtsql.core.sql import execute, score_turn
    execute(db_path, "SELECT count(*) FROM singer").rows          # ((6,),)
    score_turn(gold, pred, "concert_singer")                      # TurnScore(exact=1, execution=1, ...)

Modules: ``executor`` (sandbox), ``tokenizer`` + ``parser`` (official structured dict),
``exact_match``, ``exec_match`` (test-suite and SParC algorithms), ``hardness``, ``scoring`` (one
turn), ``gold_cache`` (gold parses and results, computed once), ``metrics`` (aggregates),
``official_format`` (reading gold and prediction files), ``evaluation`` (scoring prediction files) and
``workers`` (scoring spread over processes by database).
"""

from __future__ import annotations

from mtsql.core.sql.executor import ERROR_CLASSES, ExecResult, execute, execute_cached
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.scoring import DataSources, TurnScore, hardness_of, score, score_turn

__all__ = [
    "ERROR_CLASSES",
    "HARDNESS_LEVELS",
    "DataSources",
    "ExecResult",
    "TurnScore",
    "execute",
    "execute_cached",
    "hardness_of",
    "score",
    "score_turn",
]
