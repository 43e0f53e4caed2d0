"""Rewards of a finished trajectory against the gold SQL (docs/method.md), shared by every stage.

    scores = compute_rewards(trajectory, gold_sql, RewardConfig(family="process"))
    scores["score"]     # the configured family's total

A family is one function in ``FAMILIES`` (name -> ``Family``) that computes only its own terms and
its total ``score`` from a ``Scoring``; ``compute_rewards`` adds the ``SHARED_KEYS`` every family
returns (EX, EM and whether they could be scored). The keys returned depend only on the config
(``reward_keys``), so every call of a run returns the same keys.

* outcome: EX (test-suite execution match by default) and EM (exact set match), from ``score_turn``
  on the final SQL, which is read only from the model's ``<answer_sql>``. No answer scores 0. A gold
  the evaluator cannot score gives 0 with ``ex_scored`` / ``em_scored`` = 0. Total:
  w·ex + w·em + w·format.
* process (MTSQL-R1): the outcome total + w·exec_verify + w·coherence + w·clause score.
  exec_verify: mean over executed ``exec_sql`` calls of ``EXEC_VERIFY_TABLE[result kind, verdict]``,
  a missing verdict scoring 0. coherence: mean over ``memory_retrieve`` calls of the clause score of
  the checked query against the gold if the ``<memory_verify>`` verdict is pass, 1 - score if
  no_pass, 0 if missing (calls on a first turn, with nothing to check, do not count). The clause
  score (``reward.clause_score``) is one of:

  - ``f1`` (term ``clause_f1``): mean clause-item micro F1 (``sql.clauses``) of every proposed query,
    the exec_sql arguments and the answer;
  - ``release`` (term ``clause_exact``, MTSQL-R1's released reward): both queries parsed into the
    Spider dict against the database schema; each clause that either query has (select, from, where,
    groupBy, having, orderBy, limit, intersect, union, except) scores 1 when the two are equal and 0
    otherwise; the query's score is the mean, 0 when either does not parse. Averaged over the SQL
    of every tool call that ran (exec_sql and, under the release protocol, the memory call's copy),
    the answer left out.

  A term with no query to average over is 0.
* empty results: with ``empty_match_credit: false``, a final SQL that matches a gold whose result is
  empty (no rows, or only NULLs; ``sql.vacuous``) while returning nothing itself scores EX 0,
  and sqlr1 gives it neither the result nor the length term: an ``[] == []`` match earns no credit.
* format: 1 when the trajectory followed the protocol (``Trajectory.protocol_valid``), else 0.
* sqlr1 (SQL-R1): format ±1 (protocol-valid and answered); if the format holds, execution ±2 (the
  final SQL runs, an empty result included, or errors / times out); if it ran, result ±3 (EX); if it
  matched, length = 0.5·min(L, 2048)/2048 + len(sql)/len(answer text), with L the response length in
  tokens (``response_tokens``, else whitespace-separated words of all assistant messages) and the
  answer text the last message after its reasoning. Total: the sum of the four.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mtsql.base.config import result
from mtsql.base.paths import data_dir, database_path
from mtsql.core.agent.env import Trajectory
from mtsql.core.agent.settings import SqlConfig
from mtsql.core.sql import gold_cache, score_turn
from mtsql.core.sql.bird_exec import bird_exec_match
from mtsql.core.sql.clauses import clause_f1
from mtsql.core.sql.errors import SqlParseError
from mtsql.core.sql.executor import execute_cached
from mtsql.core.sql.parser import parse_sql
from mtsql.core.sql.schema import load_schema
from mtsql.core.sql.scoring import DataSources
from mtsql.core.sql.vacuous import is_vacuous


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights (``mtsql.core.rewards``): ``family`` picks the total a trajectory is trained on."""

    family: Literal["process", "outcome", "sqlr1"] = result("process")
    ex: float = result(1.0)
    em: float = result(1.0)
    exec_verify: float = result(0.1)
    coherence: float = result(0.1)
    clause_f1: float = result(0.8)  # weight of the clause score (clause_score picks which)
    format: float = result(0.0)
    clause_score: Literal["f1", "release"] = result("f1")  # f1: micro F1 of clause items over every proposed
    # query, the answer included; release: MTSQL-R1's
    # per-clause 0/1 average of the Spider parse over the
    # tool calls' SQL
    empty_match_credit: bool = result(True)  # false: a prediction matching a gold with an empty (or all-NULL)
    # result earns no EX / result credit (sql.vacuous)


EXEC_VERIFY_TABLE = {
    ("error", "pass"): 0.0,
    ("error", "no_pass"): 1.0,
    ("empty", "pass"): 0.0,
    ("empty", "no_pass"): 0.1,
    ("ok", "pass"): 1.0,
    ("ok", "no_pass"): 0.0,
}
LENGTH_CAP = 2048
CLAUSE_SCORES = ("f1", "release")
SHARED_KEYS = ("score", "ex", "em", "ex_scored", "em_scored")
SQLR1_KEYS = ("sqlr1_format", "sqlr1_execution", "sqlr1_result", "sqlr1_length")


@dataclass(frozen=True)
class Scoring:
    """What a family scores: the trajectory, its gold, the settings, and the EX / EM every family shares
    (``ex`` already 0 for a ``vacuous`` match the config refuses credit)."""

    trajectory: Trajectory
    gold_sql: str
    cfg: RewardConfig
    sql_cfg: SqlConfig
    root: Path
    response_tokens: int | None
    ex: float
    em: float
    vacuous: bool


@dataclass(frozen=True)
class Family:
    """A reward family: ``terms`` returns its own terms and their total ``score``, under the names
    ``keys(cfg)`` lists (in order, ``score`` left out)."""

    terms: Callable[[Scoring], dict[str, float]]
    keys: Callable[[RewardConfig], tuple[str, ...]]


def outcome_family(s: Scoring) -> dict[str, float]:
    fmt = format_reward(s.trajectory)
    return {"format": fmt, "score": s.cfg.ex * s.ex + s.cfg.em * s.em + s.cfg.format * fmt}


def process_family(s: Scoring) -> dict[str, float]:
    terms = outcome_family(s)
    schema_db = DataSources.from_root(s.root).schema_database(s.trajectory.db_id)
    if s.cfg.clause_score == "release":

        def similarity(sql):
            return release_clause_score(sql, s.gold_sql, schema_db)

        clause = clause_exact_reward(s.trajectory, s.gold_sql, schema_db)
    else:

        def similarity(sql):
            return clause_f1(sql, s.gold_sql)

        clause = clause_f1_reward(s.trajectory, s.gold_sql)
    terms["exec_verify"] = exec_verify_reward(s.trajectory)
    terms["coherence"] = coherence_reward(s.trajectory, similarity)
    terms[clause_key(s.cfg)] = clause
    terms["score"] += (
        s.cfg.exec_verify * terms["exec_verify"]
        + s.cfg.coherence * terms["coherence"]
        + s.cfg.clause_f1 * clause
    )
    return terms


def sqlr1_family(s: Scoring) -> dict[str, float]:
    terms = sqlr1_terms(
        s.trajectory,
        s.ex,
        sql_cfg=s.sql_cfg,
        data_root=s.root,
        response_tokens=s.response_tokens,
        vacuous=s.vacuous,
    )
    return {**terms, "score": sum(terms.values())}


def clause_key(cfg: RewardConfig) -> str:
    """The name of process's clause term under ``cfg.clause_score``."""
    return "clause_exact" if cfg.clause_score == "release" else "clause_f1"


FAMILIES: dict[str, Family] = {
    "outcome": Family(outcome_family, lambda cfg: ("format",)),
    "process": Family(process_family, lambda cfg: ("format", "exec_verify", "coherence", clause_key(cfg))),
    "sqlr1": Family(sqlr1_family, lambda cfg: SQLR1_KEYS),
}


def reward_keys(cfg: RewardConfig = RewardConfig()) -> tuple[str, ...]:
    """The keys ``compute_rewards`` returns under ``cfg``, in order: ``SHARED_KEYS``, then the family's."""
    return (*SHARED_KEYS, *_family(cfg).keys(cfg))


def compute_rewards(
    trajectory: Trajectory,
    gold_sql: str,
    cfg: RewardConfig = RewardConfig(),
    *,
    sql_cfg: SqlConfig = SqlConfig(),
    data_root: Path | None = None,
    response_tokens: int | None = None,
) -> dict[str, float]:
    """The ``reward_keys(cfg)`` of ``trajectory``: EX / EM and ``cfg.family``'s terms, ``score`` its total."""
    family = _family(cfg)
    root = data_dir(data_root)
    ex, em, ex_scored, em_scored = outcome_terms(trajectory, gold_sql, sql_cfg=sql_cfg, data_root=root)
    vacuous = bool(ex) and not cfg.empty_match_credit and vacuous_match(trajectory, gold_sql, sql_cfg, root)
    ex = 0.0 if vacuous else ex
    terms = family.terms(Scoring(trajectory, gold_sql, cfg, sql_cfg, root, response_tokens, ex, em, vacuous))
    out = {"ex": ex, "em": em, "ex_scored": ex_scored, "em_scored": em_scored, **terms}
    return {key: float(out[key]) for key in reward_keys(cfg)}


def _family(cfg: RewardConfig) -> Family:
    if cfg.family not in FAMILIES:
        raise ValueError(f"reward.family must be one of {tuple(FAMILIES)}, got {cfg.family!r}")
    if cfg.clause_score not in CLAUSE_SCORES:
        raise ValueError(f"reward.clause_score must be one of {CLAUSE_SCORES}, got {cfg.clause_score!r}")
    return FAMILIES[cfg.family]


def outcome_terms(
    trajectory: Trajectory, gold_sql: str, *, sql_cfg: SqlConfig = SqlConfig(), data_root: Path | None = None
) -> tuple[float, float, float, float]:
    """(EX, EM, EX scorable, EM scorable) of the final SQL; an unscorable item counts 0. A BIRD item is
    scored by BIRD's EX (under ``sql.timeout_s``), has no EM, and is unscorable without its database."""
    if trajectory.dataset == "bird":
        db_path = database_path(trajectory.db_id, data_dir(data_root))
        if not db_path.is_file():
            return 0.0, 0.0, 0.0, 0.0
        answered = trajectory.final_sql is not None
        ex = (
            answered
            and bird_exec_match(gold_sql, trajectory.final_sql, db_path, timeout_s=sql_cfg.timeout_s)[0]
        )
        return float(ex), 0.0, 1.0, 0.0
    score = score_turn(
        gold_sql,
        trajectory.final_sql or "",
        trajectory.db_id,
        data_root=data_root,
        exec_semantics=sql_cfg.exec_semantics,
        semantics=sql_cfg.semantics,
        timeout_s=sql_cfg.timeout_s,
    )
    answered = trajectory.final_sql is not None
    ex = float(bool(answered and score.execution))
    em = float(bool(answered and score.exact))
    return ex, em, float(score.execution is not None), float(score.exact is not None)


def vacuous_match(trajectory: Trajectory, gold_sql: str, sql_cfg: SqlConfig, root: Path) -> bool:
    """The final SQL and the gold both return nothing (no rows or only NULLs): a match that says nothing."""
    db_path = database_path(trajectory.db_id, root)
    return all(is_vacuous(db_path, sql, sql_cfg.timeout_s) for sql in (gold_sql, trajectory.final_sql))


def exec_verify_reward(trajectory: Trajectory) -> float:
    """Mean ``EXEC_VERIFY_TABLE`` value over the executed exec_sql calls (missing verdict: 0)."""
    values = [
        EXEC_VERIFY_TABLE.get((step.result_kind, step.verdict), 0.0)
        for step in trajectory.tool_steps("exec_sql")
        if step.result_kind is not None
    ]
    return sum(values) / len(values) if values else 0.0


def coherence_reward(trajectory: Trajectory, similarity: Callable[[str | None], float]) -> float:
    """Mean over the memory_retrieve calls that showed a memory: similarity(checked query) (the clause
    score against the gold) on pass, 1 - it on no_pass, 0 without a verdict. A call on a first turn
    (empty memory) does not count."""
    values = []
    for step in trajectory.tool_steps("memory_retrieve"):
        if step.observation is None or not trajectory.memory:
            continue
        score = similarity(step.checked_sql) if step.checked_sql else 0.0
        values.append(score if step.verdict == "pass" else 1.0 - score if step.verdict == "no_pass" else 0.0)
    return sum(values) / len(values) if values else 0.0


def clause_f1_reward(trajectory: Trajectory, gold_sql: str) -> float:
    """Mean clause F1 against the gold of every query the model proposed."""
    proposed = trajectory.proposed_sql()
    return sum(clause_f1(sql, gold_sql) for sql in proposed) / len(proposed) if proposed else 0.0


def clause_exact_reward(trajectory: Trajectory, gold_sql: str, schema_db: Path | None) -> float:
    """Mean ``release_clause_score`` of the SQL of every tool call that ran (the answer left out)."""
    called = [s.sql for s in trajectory.steps if s.action == "tool_call" and s.sql]
    return (
        sum(release_clause_score(sql, gold_sql, schema_db) for sql in called) / len(called) if called else 0.0
    )


def release_clause_score(predicted: str, gold_sql: str, schema_db: Path | None) -> float:
    """Share of the Spider-parse clauses present in either query that are equal in both; 0 when
    either query does not parse or there is no schema to parse against."""
    if schema_db is None:
        return 0.0
    try:
        gold = gold_cache.parsed(gold_sql, schema_db, "official")
        pred = parse_sql(predicted, load_schema(schema_db))
    except SqlParseError:
        return 0.0
    present = [key for key in gold.keys() | pred.keys() if gold.get(key) or pred.get(key)]
    return sum(gold.get(key) == pred.get(key) for key in present) / len(present) if present else 0.0


def format_reward(trajectory: Trajectory) -> float:
    return float(trajectory.protocol_valid)


def sqlr1_terms(
    trajectory: Trajectory,
    ex: float,
    *,
    sql_cfg: SqlConfig = SqlConfig(),
    data_root: Path | None = None,
    response_tokens: int | None = None,
    vacuous: bool = False,
) -> dict[str, float]:
    """SQL-R1's format, execution, result and length terms (each gated by the one before); a
    ``vacuous`` match (see ``vacuous_match``) gets neither the result nor the length term."""
    terms = {"sqlr1_format": -1.0, "sqlr1_execution": 0.0, "sqlr1_result": 0.0, "sqlr1_length": 0.0}
    if not (trajectory.protocol_valid and trajectory.final_sql):
        return terms
    terms["sqlr1_format"] = 1.0
    db_path = database_path(trajectory.db_id, data_dir(data_root))
    if not execute_cached(
        db_path, trajectory.final_sql, timeout_s=sql_cfg.timeout_s, max_rows=sql_cfg.max_rows
    ).ok:
        terms["sqlr1_execution"] = -2.0
        return terms
    terms["sqlr1_execution"] = 2.0
    if vacuous:
        return terms
    terms["sqlr1_result"] = 3.0 if ex else -3.0
    if ex:
        length = response_tokens if response_tokens is not None else _words(trajectory)
        answer_text = _answer_text(trajectory)
        ratio = len(trajectory.final_sql) / len(answer_text) if answer_text else 0.0
        terms["sqlr1_length"] = 0.5 * min(length, LENGTH_CAP) / LENGTH_CAP + min(ratio, 1.0)
    return terms


def _words(trajectory: Trajectory) -> int:
    return sum(len(m["content"].split()) for m in trajectory.messages if m["role"] == "assistant")


def _answer_text(trajectory: Trajectory) -> str:
    text = trajectory.steps[-1].text
    closing = text.rfind("</think>")
    return (text[closing + len("</think>") :] if closing != -1 else text).strip()
