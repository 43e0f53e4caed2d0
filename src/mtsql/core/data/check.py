"""`mtsql data check`: counts, missing and unreadable databases, gold queries that fail to execute, and
gold queries whose result is empty or all NULL (vacuous: any prediction returning nothing matches them)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.paths import data_dir, database_path
from mtsql.core.data import SINGLE_TURN_DATASETS, load_turns, tables_file
from mtsql.core.data.bird import check_bird
from mtsql.core.data.schema_check import schema_differences
from mtsql.core.sql.executor import execute_cached
from mtsql.core.sql.schema import read_schema
from mtsql.core.sql.vacuous import is_vacuous

SPACED_OPERATORS = (("! =", "!="), ("> =", ">="), ("< =", "<="))


def join_spaced_operators(sql: str) -> str:
    """Join `! =`, `> =`, `< =` (27 dev golds have them) as the test-suite evaluator does."""
    for spaced, joined in SPACED_OPERATORS:
        sql = sql.replace(spaced, joined)
    return sql


def unreadable_why(db: Path) -> str | None:
    """Why a database file that exists cannot be read (empty, not SQLite, locked by another process,
    without a table: ``read_schema``'s line), or None."""
    try:
        read_schema(db)
    except UsageError as exc:
        return str(exc)
    return None


def check_split(dataset: str, split: str, root: Path | None = None, *, progress=None) -> dict:
    """Report on one split: interactions and turns (questions for a single-turn dataset), databases,
    missing DBs, DBs that cannot be read (and why; their turns are not executed), failing gold SQL, gold
    SQL with an empty or all-NULL result (``gold_vacuous``), and where the dataset's ``tables.json`` and
    its databases differ (``schema_differences``); BIRD's report is
    :func:`mtsql.core.data.bird.check_bird`'s."""
    root = root or data_dir()
    if dataset == "bird":
        return check_bird(split, root, progress=progress)
    turns = load_turns(dataset, split, root=root, with_hardness=False)
    single = dataset in SINGLE_TURN_DATASETS
    unit = "questions" if single else "turns"
    dbs = sorted({t.db_id for t in turns})
    missing = [db for db in dbs if not database_path(db, root).is_file()]
    unreadable = {
        db: why for db in dbs if db not in missing and (why := unreadable_why(database_path(db, root)))
    }
    failing_raw, failing_joined, vacuous = [], [], []
    executable = [t for t in turns if t.db_id not in missing and t.db_id not in unreadable]
    for turn in progress(executable) if progress else executable:
        db = database_path(turn.db_id, root)
        if not execute_cached(db, turn.gold_sql).ok:
            failing_raw.append(turn)
            result = execute_cached(db, join_spaced_operators(turn.gold_sql))
            if not result.ok:
                failing_joined.append((turn, result))
        if is_vacuous(db, join_spaced_operators(turn.gold_sql)):
            vacuous.append(turn)
    report = {"dataset": dataset, "split": split, "root": str(root), "unit": unit}
    if not single:
        report["interactions"] = len({t.interaction_id for t in turns})
    report.update(
        {
            unit: len(turns),
            "databases": len(dbs),
            "missing_databases": {db: sum(t.db_id == db for t in turns) for db in missing},
            "unreadable_databases": {
                db: {unit: sum(t.db_id == db for t in turns), "why": why} for db, why in unreadable.items()
            },
            f"{unit}_without_database": sum(t.db_id in missing for t in turns),
            "gold_fail_as_written": len(failing_raw),
            "gold_vacuous": len(vacuous),
            "schema_differences": schema_differences(tables_file(dataset, root), dbs, root),
            "gold_fail_after_joining_operators": [
                {
                    "interaction": t.interaction_index,
                    "turn": t.turn_index,
                    "db_id": t.db_id,
                    "where": f"question {t.interaction_index}"
                    if single
                    else f"interaction {t.interaction_index} turn {t.turn_index}",
                    "error": r.error_class,
                    "message": r.error_message,
                }
                for t, r in failing_joined
            ],
        }
    )
    if not single:
        report["turns_per_interaction"] = dict(
            sorted(Counter(Counter(t.interaction_id for t in turns).values()).items())
        )
    return report
