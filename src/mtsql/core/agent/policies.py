"""Scripted policies: assistant messages written without a model, from the gold query.

A policy is any callable ``policy(messages, turn, rng) -> assistant_text``;
``mtsql.engines.rollout.RolloutEngine`` steps the environment with its messages in place of a model's
(``sample.policy``).

* ``GoldPolicy``: runs the gold query, says pass, checks the memory on later turns, answers. The
  gold is used as SQLite accepts it: ``! =``, ``> =``, ``< =`` joined (``runnable``), as the
  test-suite evaluator does before executing; exact and execution match are unchanged by it.
* ``GoldWithCorrectionPolicy``: first runs a realistic wrong variant of the gold (``mutations``)
  that really gives a different result or an error, reads that result, says no_pass, runs the gold,
  then goes on as ``GoldPolicy``. A documented way to bootstrap SFT data with self-correction.
* ``GroundedPolicy`` (``gold_grounded``): a correction only where the observation shows the failure: the
  first query is, in a ``sample.failure_share`` of episodes, a variant of the gold that fails to run (a
  table or column name guessed wrong) or returns nothing (empty or NULL-only) where the gold has rows;
  the verdict is read from that result (``observed_failure``), its reasoning quotes it, and a result
  that looks right gets ``pass``.
* ``OwnMistakesPolicy`` (``own_mistakes``): the model's own first query (``sample.attempts``, a sample
  artifact of that model) with its real result; corrected toward the gold only where the result shows
  the failure, ``pass`` where the result is the gold's. A plausible wrong result (it runs, has rows, and
  differs from the gold's) is not kept: nothing in the observation marks it as wrong, so neither verdict
  on it can be learned from what the model sees; the episode runs the gold instead.

The scripted policies are stateless: each message is decided from the conversation so far, and
they answer at once when the environment says it is the last message. They write the tool calls of
the configured ``env.protocol`` (under ``release`` the memory call carries the query it checks).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from mtsql.base.paths import data_dir, database_path
from mtsql.core.agent import prompts
from mtsql.core.agent.mutations import Variant, misnamed_columns, mutations
from mtsql.core.agent.protocol import Action, parse_action
from mtsql.core.agent.schema_prompt import load_tables
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.agent.tools import SqlRun, run_sql
from mtsql.core.data.records import Turn
from mtsql.core.sql.clauses import render_breakdown
from mtsql.core.sql.executor import ExecResult, execute_cached

Policy = Callable[[list[dict], Turn, random.Random], str]
SCRIPTED = ("gold", "gold_with_correction", "gold_grounded", "own_mistakes")
# The share of dev turns on which the tiny profile's SFT model ran a query that failed (126 of 215; the run
# is in docs/results.md, "What make reproduce shows"). sample.failure_share's default: gold_grounded's data
# hold as many failures as the model meets.
MEASURED_FAILURE_SHARE = round(126 / 215, 3)
# Of those failed queries, the share refused for a column that does not exist (115 of 126): gold_grounded's
# failing first queries misname a column in this share of its corrections where the gold has one to misname.
MEASURED_COLUMN_SHARE = round(115 / 126, 3)
_SPACED_OPERATOR = re.compile(r"([!<>])\s+=")


def runnable(sql: str) -> str:
    """``sql`` with the spaced comparison operators of some golds joined (``> =`` -> ``>=``)."""
    return _SPACED_OPERATOR.sub(r"\1=", sql).strip()


def make_policy(
    name: str,
    *,
    env_cfg: EnvConfig = EnvConfig(),
    sql_cfg: SqlConfig = SqlConfig(),
    data_root: Path | None = None,
    correction_share: float = 1.0,
    failure_share: float = MEASURED_FAILURE_SHARE,
    attempts: dict[str, str] | None = None,
    items: Sequence[str] | None = None,
) -> Policy:
    """A scripted policy by name (``SCRIPTED``); ``own_mistakes`` needs ``attempts`` (uid -> the model's
    first message); ``items``: every uid the run samples, which lets ``gold_grounded`` correct exactly
    ``failure_share`` of them instead of drawing per episode."""
    common = {
        "mode": env_cfg.mode,
        "thinking": env_cfg.thinking,
        "protocol": env_cfg.protocol,
        "sql_cfg": sql_cfg,
        "data_root": data_root,
    }
    if name == "gold_grounded":
        return GroundedPolicy(**common, failure_share=failure_share, items=items)
    if name == "own_mistakes":
        if attempts is None:
            raise ValueError(
                "own_mistakes needs the model's first attempts (the sample stage's attempts input)"
            )
        return OwnMistakesPolicy(**common, attempts=attempts)
    if name == "gold":
        return GoldPolicy(mode=env_cfg.mode, thinking=env_cfg.thinking, protocol=env_cfg.protocol)
    if name == "gold_with_correction":
        return GoldWithCorrectionPolicy(
            mode=env_cfg.mode,
            thinking=env_cfg.thinking,
            protocol=env_cfg.protocol,
            sql_cfg=sql_cfg,
            data_root=data_root,
            correction_share=correction_share,
        )
    raise ValueError(f"unknown scripted policy {name!r}: choose one of {', '.join(SCRIPTED)}")


class GoldPolicy:
    """Executes the gold query, verifies pass, retrieves memory on later turns, answers the gold."""

    def __init__(self, *, mode: str = "long", thinking: bool = True, protocol: str = "mtsql") -> None:
        self.mode, self.thinking, self.protocol = mode, thinking, protocol

    def __call__(self, messages: list[dict], turn: Turn, rng: random.Random) -> str:
        if self.mode == "short":
            gold = runnable(turn.gold_sql)
            return self._message(
                f"The question asks: {turn.question}\nQuery: {render_breakdown(gold)}", answer=gold
            )
        previous = _own_actions(messages, self.protocol)
        if not previous:
            return self._first(turn, rng)
        return self._next(previous[-1], _last_observation(messages), turn)

    def _first(self, turn: Turn, rng: random.Random) -> str:
        return self._run(turn, runnable(turn.gold_sql))

    def _run(self, turn: Turn, sql: str, *, think: str | None = None, exec_verdict: str | None = None) -> str:
        think = think or (
            f"The question asks: {turn.question}\n"
            f"I will run this query and check its result: {render_breakdown(sql)}"
        )
        argument = "code" if self.protocol == "release" else "sql"
        return self._message(think, exec_verdict=exec_verdict, call=("exec_sql", {argument: sql}))

    def _next(self, last: Action, observation: str, turn: Turn) -> str:
        gold, result = runnable(turn.gold_sql), _result_line(observation)
        final = observation.endswith(prompts.LAST_MESSAGE)
        if last.tool == "exec_sql":
            think = f"The result was: {result}\n" + (
                "The query is what the question asks for, even though this database cannot run it."
                if result.startswith(("ERROR", "Error:"))
                else "It is what the question asks for."
            )
            if turn.previous_questions and not final:
                arguments = {"code": last.sql} if self.protocol == "release" else {}
                return self._message(
                    think + " Next I check it against the earlier turns.",
                    exec_verdict="pass",
                    call=("memory_retrieve", arguments),
                )
            return self._message(think, exec_verdict="pass", answer=gold)
        if last.tool == "memory_retrieve":
            think = (
                "The query keeps what the earlier turns established and changes only what the current "
                "question asks for, so it is consistent with the conversation."
            )
            return self._message(think, memory_verdict="pass", answer=gold)
        return self._message("I give the final query.", answer=gold)

    def _message(
        self,
        think: str,
        *,
        exec_verdict: str | None = None,
        memory_verdict: str | None = None,
        call: tuple[str, dict] | None = None,
        answer: str | None = None,
    ) -> str:
        parts = [f"<think>\n{think}\n</think>\n"] if self.thinking else []
        if exec_verdict:
            parts.append(f"<exec_verify>{exec_verdict}</exec_verify>")
        if memory_verdict:
            parts.append(f"<memory_verify>{memory_verdict}</memory_verify>")
        if call:
            body = json.dumps({"name": call[0], "arguments": call[1]}, ensure_ascii=False)
            parts.append(f"<tool_call>\n{body}\n</tool_call>")
        else:
            parts.append(f"<answer_sql>{answer}</answer_sql>")
        return "\n".join(parts)


class GoldWithCorrectionPolicy(GoldPolicy):
    """First runs a wrong variant of the gold, reads the real outcome, says no_pass and runs the gold.

    With probability ``error_share`` the variant is one that fails to execute (a wrong table or
    column name), otherwise one that runs and gives a wrong result, when the gold has both kinds.
    With probability 1 - ``correction_share`` (``sample.correction_share``) an episode runs the gold at
    once, as ``GoldPolicy``: data where every first query is judged no_pass teach a model to judge
    every first query so.
    """

    def __init__(
        self,
        *,
        mode: str = "long",
        thinking: bool = True,
        protocol: str = "mtsql",
        sql_cfg: SqlConfig = SqlConfig(),
        data_root: Path | None = None,
        error_share: float = 0.3,
        correction_share: float = 1.0,
    ) -> None:
        super().__init__(mode=mode, thinking=thinking, protocol=protocol)
        self.sql_cfg = sql_cfg
        self.data_root = data_dir(data_root)
        self.error_share = error_share
        self.correction_share = correction_share

    def variants(self, turn: Turn) -> list[Variant]:
        """The wrong variants of the gold whose execution differs from the gold's (an error counts)."""
        db_path = database_path(turn.db_id, self.data_root)
        gold_sql = runnable(turn.gold_sql)
        gold = self._execute(db_path, gold_sql)
        ordered = "order by" in gold_sql.lower()
        return [
            v
            for v in mutations(gold_sql, load_tables(turn.db_id, self.data_root, turn.dataset))
            if _differs(gold, self._execute(db_path, v.sql), ordered)
        ]

    def _first(self, turn: Turn, rng: random.Random) -> str:
        direct = self.correction_share < 1.0 and rng.random() >= self.correction_share  # no draw at 1.0: the
        candidates = [] if direct else self.variants(turn)  # same episodes as before
        if not candidates:
            return self._run(turn, runnable(turn.gold_sql))
        db_path = database_path(turn.db_id, self.data_root)
        failing = [v for v in candidates if not self._execute(db_path, v.sql).ok]
        running = [v for v in candidates if v not in failing]
        pool = failing if (rng.random() < self.error_share or not running) and failing else running
        return self._run(turn, rng.choice(pool).sql)

    def _next(self, last: Action, observation: str, turn: Turn) -> str:
        gold = runnable(turn.gold_sql)
        if last.tool == "exec_sql" and last.sql != gold and not observation.endswith(prompts.LAST_MESSAGE):
            why = {v.sql: v.why for v in self.variants(turn)}.get(last.sql, "it does not answer the question")
            think = (
                f"The result was: {_result_line(observation)}\nThis is wrong: {why}. "
                "I correct the query and run it again."
            )
            return self._run(turn, gold, think=think, exec_verdict="no_pass")
        return super()._next(last, observation, turn)

    def _execute(self, db_path: Path, sql: str) -> ExecResult:
        return execute_cached(db_path, sql, timeout_s=self.sql_cfg.timeout_s, max_rows=self.sql_cfg.max_rows)


def _differs(gold: ExecResult, other: ExecResult, ordered: bool) -> bool:
    if not (gold.ok and other.ok):
        return True
    gold_rows, other_rows = [tuple(r) for r in gold.rows], [tuple(r) for r in other.rows]
    if ordered:
        return gold_rows != other_rows
    return Counter(gold_rows) != Counter(other_rows)


def _own_actions(messages: list[dict], protocol: str) -> list[Action]:
    return [parse_action(m["content"], protocol) for m in messages if m["role"] == "assistant"]


def _last_observation(messages: list[dict]) -> str:
    return messages[-1]["content"] if messages and messages[-1]["role"] == "tool" else ""


def _result_line(observation: str) -> str:
    """The result block of an exec_sql observation on one line ("a | b; 1 | 2; (1 row)"), or the
    release protocol's result line."""
    lines = observation.splitlines()
    recap = [line for line in lines if line.startswith(prompts.RELEASE_RESULT_LINE)]
    if recap:
        return recap[0][len(prompts.RELEASE_RESULT_LINE) :]
    if "Result:" not in lines:
        return "(no result shown)"
    block = lines[lines.index("Result:") + 1 :]
    return "; ".join(block[: block.index("")] if "" in block else block)


class GroundedPolicy(GoldWithCorrectionPolicy):
    """A correction only after a failure the observation reveals; see the module docstring.

    With ``items`` (every uid sampled), exactly round(``failure_share`` x their number) items get a failing
    first query, picked by a hash of their uid (the same in every sample of an item); without, each episode
    draws with probability ``failure_share``."""

    def __init__(
        self, *, failure_share: float = MEASURED_FAILURE_SHARE, items: Sequence[str] | None = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.failure_share = failure_share
        ranked = sorted(dict.fromkeys(items or ()), key=lambda uid: hashlib.sha256(uid.encode()).hexdigest())
        self.chosen = None if items is None else set(ranked[: round(failure_share * len(ranked))])

    def variants(self, turn: Turn) -> list[Variant]:
        """The variants of the gold whose result shows the failure (``observed_failure``)."""
        db_path = database_path(turn.db_id, self.data_root)
        gold_sql = runnable(turn.gold_sql)
        tables = load_tables(turn.db_id, self.data_root, turn.dataset)
        found = [*mutations(gold_sql, tables), *misnamed_columns(gold_sql, tables)]
        return [
            v
            for v in found
            if observed_failure(self._run_sql(db_path, v.sql), self._run_sql(db_path, gold_sql))
        ]

    def _first(self, turn: Turn, rng: random.Random) -> str:
        fails = turn.uid in self.chosen if self.chosen is not None else rng.random() < self.failure_share
        failing = self.variants(turn) if fails else []
        if not failing:
            return self._run(turn, runnable(turn.gold_sql))
        columns = [v for v in failing if v.kind == "misnamed_column"]
        others = [v for v in failing if v.kind != "misnamed_column"]
        pick_column = columns and (not others or rng.random() < MEASURED_COLUMN_SHARE)
        return self._run(turn, rng.choice(columns if pick_column else others).sql)

    def _next(self, last: Action, observation: str, turn: Turn) -> str:
        if last.tool == "exec_sql" and not observation.endswith(prompts.LAST_MESSAGE):
            gold = runnable(turn.gold_sql)
            db_path = database_path(turn.db_id, self.data_root)
            seen = self._run_sql(db_path, last.sql)
            if last.sql != gold and observed_failure(seen, self._run_sql(db_path, gold)):
                why = {v.sql: v.why for v in self.variants(turn)}.get(last.sql)
                fixed = self._suggestion(observation, db_path, gold) or gold
                return self._run(
                    turn,
                    fixed,
                    think=_failure_reasoning(observation, seen, why, fixed),
                    exec_verdict="no_pass",
                )
        return GoldPolicy._next(self, last, observation, turn)

    def _suggestion(self, observation: str, db_path: Path, gold: str) -> str | None:
        """The query ``env.error_hint`` suggested in ``observation``, when it gives the gold's result: the
        correction a model can copy from what it sees."""
        lines = [line for line in observation.splitlines() if line.startswith(prompts.SUGGESTION_PREFIX)]
        if not lines:
            return None
        suggested = lines[0][len(prompts.SUGGESTION_PREFIX) :].strip()
        return suggested if self._gives_gold(db_path, suggested, gold) else None

    def _gives_gold(self, db_path: Path, sql: str, gold_sql: str) -> bool:
        """Whether ``sql`` returns the gold's rows (in the gold's order where it orders them)."""
        ordered = "order by" in gold_sql.lower()
        return not _differs(self._execute(db_path, gold_sql), self._execute(db_path, sql), ordered)

    def _run_sql(self, db_path: Path, sql: str) -> SqlRun:
        return run_sql(db_path, sql, self.sql_cfg, result_chars=1)


class OwnMistakesPolicy(GroundedPolicy):
    """The model's own first query, corrected only where its result shows the failure (module docstring)."""

    def __init__(self, *, attempts: dict[str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.attempts = attempts

    def attempt(self, turn: Turn) -> tuple[str, str] | None:
        """(the model's first message, its query) when that message runs a query, else None."""
        text = self.attempts.get(turn.uid)
        action = parse_action(text, self.protocol) if text is not None else None
        if action is None or action.kind != "tool_call" or action.tool != "exec_sql" or action.exec_verdict:
            return None
        return text, action.sql

    def judge(self, turn: Turn, sql: str) -> str:
        """``failed`` (the result shows it), ``right`` (the gold's result) or ``plausible`` (runs, looks
        fine, differs)."""
        db_path = database_path(turn.db_id, self.data_root)
        gold_sql = runnable(turn.gold_sql)
        seen, gold = self._run_sql(db_path, sql), self._run_sql(db_path, gold_sql)
        if observed_failure(seen, gold):
            return "failed"
        return "right" if self._gives_gold(db_path, sql, gold_sql) else "plausible"

    def _first(self, turn: Turn, rng: random.Random) -> str:
        attempt = self.attempt(turn)
        if attempt is None or self.judge(turn, attempt[1]) == "plausible":
            return self._run(turn, runnable(turn.gold_sql))
        return attempt[0]

    def _next(self, last: Action, observation: str, turn: Turn) -> str:
        attempt = self.attempt(turn)
        own = attempt is not None and last.tool == "exec_sql" and last.sql == attempt[1]
        if own and self.judge(turn, last.sql) == "right" and not observation.endswith(prompts.LAST_MESSAGE):
            think = f"The result was: {_result_line(observation)}\nIt is what the question asks for."
            if turn.previous_questions:
                arguments = {"code": last.sql} if self.protocol == "release" else {}
                return self._message(
                    think + " Next I check it against the earlier turns.",
                    exec_verdict="pass",
                    call=("memory_retrieve", arguments),
                )
            return self._message(think, exec_verdict="pass", answer=last.sql)
        if last.tool == "memory_retrieve" and attempt is not None and self.judge(turn, attempt[1]) == "right":
            think = (
                "The query keeps what the earlier turns established and changes only what the current "
                "question asks for, so it is consistent with the conversation."
            )
            return self._message(think, memory_verdict="pass", answer=attempt[1])
        return super()._next(last, observation, turn)


def observed_failure(seen: SqlRun, gold: SqlRun) -> bool:
    """What an observation shows to be wrong: an execution error, or no rows (empty or NULL-only) where the
    gold's result has some."""
    return seen.kind == "error" or (seen.kind == "empty" and gold.kind == "ok")


def _failure_reasoning(observation: str, seen: SqlRun, why: str | None, fixed: str) -> str:
    """The no_pass reasoning: the result as the observation showed it, what it reveals, then the fixed query
    clause by clause, as a first run spells its query before calling exec_sql (with ``env.thinking`` off no
    reasoning is written)."""
    shown = (
        "The query failed to run."
        if seen.kind == "error"
        else (
            "The result is empty, but the question asks for rows."
            if not seen.row_count
            else "The result holds only NULL values, but the question asks for values."
        )
    )
    fix = f" The mistake: {why}." if why else ""
    return (
        f"The result was: {_result_line(observation)}\n{shown}{fix} I correct the query and run it again: "
        f"{render_breakdown(fixed)}"
    )
