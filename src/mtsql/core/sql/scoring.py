"""Scoring one turn: exact set match, execution match and hardness, with official semantics.

A score is ``None`` (unscorable) exactly where an official program would give none: the gold does
not parse (both programs crash), the gold fails to execute (crash), the database is missing, or
another crash of the official code (see :class:`mtsql.core.sql.errors.OfficialCrash`). A prediction that
does not parse or fails to run scores 0. Two deviations, both on the prediction side, where the
official programs crash on a prediction: an empty prediction and one longer than sqlparse accepts
score 0 instead of stopping the run; and a prediction longer than ``MAX_PREDICTION_CHARS`` scores 0
without being parsed or run (NLTK and sqlparse take minutes on megabytes of SQL).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mtsql.base.paths import data_dir
from mtsql.core.sql import gold_cache
from mtsql.core.sql.errors import OfficialCrash, SqlParseError
from mtsql.core.sql.exact_match import exact_match, rebuild
from mtsql.core.sql.exec_match import (
    sparc_exec_match,
    testsuite_databases,
    testsuite_exec_match,
)
from mtsql.core.sql.hardness import hardness
from mtsql.core.sql.parser import SEMANTICS, empty_sql, parse_sql
from mtsql.core.sql.schema import load_foreign_key_maps, load_schema

EXEC_SEMANTICS = ("testsuite", "sparc")
MAX_PREDICTION_CHARS = 20_000  # longer predictions score 0 unread (the official tools take minutes or crash)
ETYPES = ("all", "match", "exec")


@dataclass(frozen=True)
class TurnScore:
    """Scores of one predicted query against its gold (``None`` = unscorable, see the module doc)."""

    exact: int | None
    execution: int | None
    hardness: str | None
    error: str | None


@dataclass(frozen=True)
class DataSources:
    """Where databases (execution), schemas (parsing) and foreign keys (exact match) come from."""

    db_dir: Path
    tables_json: Path
    schema_dirs: tuple[Path, ...] = ()

    @classmethod
    def from_root(cls, root: Path | str | None = None) -> DataSources:
        """The layout of the data folder: ``database/``, ``database_schema_only/``, ``*/tables.json``."""
        root = Path(root) if root is not None else data_dir()
        candidates = [root / name / "tables.json" for name in ("sparc", "cosql", "spider")] + [
            root / "tables.json"
        ]
        tables = next((p for p in candidates if p.is_file()), candidates[0])
        return cls(root / "database", tables, (root / "database_schema_only",))

    def database(self, db_id: str) -> Path:
        return self.db_dir / db_id / f"{db_id}.sqlite"

    def schema_database(self, db_id: str) -> Path | None:
        """The real database if present, else a schema-only stand-in (enough for parsing)."""
        return _first_database((self.db_dir, *self.schema_dirs), db_id)

    def foreign_keys(self, db_id: str) -> dict[str, str]:
        maps = load_foreign_key_maps(self.tables_json)
        if db_id not in maps:
            raise OfficialCrash(f"{db_id} is not in {self.tables_json}")
        return maps[db_id]


def score(
    gold_sql: str,
    pred_sql: str,
    db_id: str,
    sources: DataSources,
    *,
    etype: str = "all",
    exec_semantics: str = "testsuite",
    semantics: str = "official",
    timeout_s: float = 5.0,
) -> TurnScore:
    """Score ``pred_sql`` against ``gold_sql`` on database ``db_id`` (strings as they are: no file
    normalisation such as the ``value`` replacement, which belongs to reading prediction files)."""
    if etype not in ETYPES or exec_semantics not in EXEC_SEMANTICS or semantics not in SEMANTICS:
        raise ValueError(f"etype {etype!r} / exec_semantics {exec_semantics!r} / semantics {semantics!r}")
    schema_db = sources.schema_database(db_id)
    if schema_db is None:
        return TurnScore(None, None, None, f"no database or schema for {db_id}")
    try:
        gold = gold_cache.parsed(gold_sql, schema_db, semantics)
        gold_hardness = gold_cache.derived(
            f"hardness {semantics}", schema_db, gold_sql, lambda: hardness(gold)
        )
    except (SqlParseError, OfficialCrash) as exc:  # the official programs stop on such a gold
        return TurnScore(None, None, None, f"gold: {exc}")
    wants_exact, wants_execution = etype in ("all", "match"), etype in ("all", "exec")
    if len(pred_sql) > MAX_PREDICTION_CHARS:
        runnable = wants_execution and bool(_execution_databases(db_id, sources, exec_semantics))
        return TurnScore(
            0 if wants_exact else None,
            0 if runnable else None,
            gold_hardness,
            f"prediction longer than {MAX_PREDICTION_CHARS} characters: not run",
        )
    errors: list[str] = []
    if not wants_exact and exec_semantics == "testsuite":  # the test-suite algorithm never parses
        execution, error = _execution(
            gold_sql, pred_sql, db_id, sources, exec_semantics, timeout_s, None, None
        )
        return TurnScore(None, execution, gold_hardness, error)
    schema = load_schema(schema_db)
    try:
        pred = gold if pred_sql == gold_sql else parse_sql(pred_sql, schema, semantics=semantics)
    except SqlParseError as exc:
        pred = empty_sql()
        errors.append(f"prediction does not parse: {exc}")
    try:
        fk_map = sources.foreign_keys(db_id)
        keys = _foreign_keys_digest(sources.tables_json, db_id)
        gold_rebuilt = gold_cache.derived(
            f"rebuilt {semantics} {keys}", schema_db, gold_sql, lambda: rebuild(gold, schema, fk_map)
        )
        pred_rebuilt = gold_rebuilt if pred is gold else rebuild(pred, schema, fk_map)
    except (
        OfficialCrash
    ) as exc:  # no exact match; the SParC script, which needs the rebuilt SELECTs, stops too
        gold_rebuilt = pred_rebuilt = None
        errors.append(str(exc))
    exact = execution = None
    if wants_exact and gold_rebuilt is not None:
        try:
            exact = exact_match(pred_rebuilt, gold_rebuilt)
        except OfficialCrash as exc:
            errors.append(str(exc))
    if wants_execution and (exec_semantics == "testsuite" or gold_rebuilt is not None):
        selects = (gold_rebuilt["select"][1], pred_rebuilt["select"][1]) if gold_rebuilt else (None, None)
        execution, error = _execution(gold_sql, pred_sql, db_id, sources, exec_semantics, timeout_s, *selects)
        if error:
            errors.append(error)
    return TurnScore(exact, execution, gold_hardness, "; ".join(errors) or None)


def _execution_databases(db_id: str, sources: DataSources, exec_semantics: str) -> Sequence[Path]:
    """The database files execution runs on (test-suite: every ``*.sqlite`` of the folder)."""
    if exec_semantics == "sparc":
        db_path = sources.database(db_id)
        return (db_path,) if db_path.is_file() else ()
    return testsuite_databases(sources.db_dir / db_id)


def _execution(gold_sql, pred_sql, db_id, sources, exec_semantics, timeout_s, gold_select, pred_select):
    # A missing database makes the turn unscorable whatever the prediction, so that every model is
    # scored on the same turns (an empty prediction must not turn it into a 0).
    db_paths = _execution_databases(db_id, sources, exec_semantics)
    if not db_paths:
        return None, f"no database file for {db_id}"
    if not pred_sql.strip():
        return 0, "empty prediction"
    try:
        if exec_semantics == "sparc":
            return sparc_exec_match(
                gold_sql, pred_sql, db_paths[0], gold_select, pred_select, timeout_s=timeout_s
            )
        return testsuite_exec_match(gold_sql, pred_sql, db_paths, timeout_s=timeout_s)
    except OfficialCrash as exc:
        return None, str(exc)


@functools.lru_cache(maxsize=1024)
def _first_database(folders: tuple[Path, ...], db_id: str) -> Path | None:
    """The first ``<folder>/<db_id>/<db_id>.sqlite`` that exists (looked up once per process)."""
    for folder in folders:
        path = folder / db_id / f"{db_id}.sqlite"
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=1024)
def _foreign_keys_digest(tables_json: Path, db_id: str) -> str:
    """A short name for a database's foreign-key map: the same from any copy of tables.json."""
    return hashlib.sha256(
        repr(sorted(load_foreign_key_maps(tables_json)[db_id].items())).encode()
    ).hexdigest()[:16]


def score_turn(
    gold_sql: str,
    pred_sql: str,
    db_id: str,
    *,
    data_root=None,
    exec_semantics: str = "testsuite",
    semantics: str = "official",
    timeout_s: float = 5.0,
) -> TurnScore:
    """Exact match, execution match and hardness of one prediction, from the data folder's files."""
    return score(
        gold_sql,
        pred_sql,
        db_id,
        DataSources.from_root(data_root),
        exec_semantics=exec_semantics,
        semantics=semantics,
        timeout_s=timeout_s,
    )


def hardness_of(sql: str, db_id: str, *, data_root=None, sources: DataSources | None = None) -> str | None:
    """Hardness of a query (a gold query, normally), ``None`` if it does not parse or its database is
    unknown."""
    schema_db = (sources or DataSources.from_root(data_root)).schema_database(db_id)
    if schema_db is None:
        return None
    try:
        gold = gold_cache.parsed(sql, schema_db, "official")
        return gold_cache.derived("hardness official", schema_db, sql, lambda: hardness(gold))
    except (SqlParseError, OfficialCrash):
        return None
