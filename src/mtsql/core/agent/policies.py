"""Scripted policies: assistant messages written without a model, from the gold query.

A policy is any callable ``policy(messages, turn, rng) -> assistant_text``; ``mtsql.engines.rollout.RolloutEngine``
steps the environment with its messages in place of a model's (``sample.policy``).

* ``GoldPolicy``: runs the gold query, says pass, checks the memory on later turns, answers. The
  gold is used as SQLite accepts it: ``! =``, ``> =``, ``< =`` joined (``runnable``), as the
  test-suite evaluator does before executing; exact and execution match are unchanged by it.
* ``GoldWithCorrectionPolicy``: first runs a realistic wrong variant of the gold (``mutations``)
  that really gives a different result or an error, reads that result, says no_pass, runs the gold,
  then goes on as ``GoldPolicy``. A documented way to bootstrap SFT data with self-correction.

The scripted policies are stateless: each message is decided from the conversation so far, and
they answer at once when the environment says it is the last message. They write the tool calls of
the configured ``env.protocol`` (under ``release`` the memory call carries the query it checks).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from mtsql.base.config import EnvConfig, SqlConfig
from mtsql.base.paths import data_dir, database_path
from mtsql.core.agent import prompts
from mtsql.core.agent.mutations import Variant, mutations
from mtsql.core.agent.protocol import Action, parse_action
from mtsql.core.agent.schema_prompt import load_tables
from mtsql.core.data.records import Turn
from mtsql.core.sql.clauses import render_breakdown
from mtsql.core.sql.executor import ExecResult, execute_cached

Policy = Callable[[list[dict], Turn, random.Random], str]
SCRIPTED = ("gold", "gold_with_correction")
_SPACED_OPERATOR = re.compile(r"([!<>])\s+=")


def runnable(sql: str) -> str:
    """``sql`` with the spaced comparison operators of some golds joined (``> =`` -> ``>=``)."""
    return _SPACED_OPERATOR.sub(r"\1=", sql).strip()


def make_policy(name: str, *, env_cfg: EnvConfig = EnvConfig(), sql_cfg: SqlConfig = SqlConfig(),
                data_root: Path | None = None, correction_share: float = 1.0) -> Policy:
    """A scripted policy by name: ``gold`` or ``gold_with_correction``."""
    if name == "gold":
        return GoldPolicy(mode=env_cfg.mode, thinking=env_cfg.thinking, protocol=env_cfg.protocol)
    if name == "gold_with_correction":
        return GoldWithCorrectionPolicy(mode=env_cfg.mode, thinking=env_cfg.thinking, protocol=env_cfg.protocol,
                                        sql_cfg=sql_cfg, data_root=data_root, correction_share=correction_share)
    raise ValueError(f"unknown scripted policy {name!r}: choose one of {', '.join(SCRIPTED)}")


class GoldPolicy:
    """Executes the gold query, verifies pass, retrieves memory on later turns, answers the gold."""

    def __init__(self, *, mode: str = "long", thinking: bool = True, protocol: str = "mtsql") -> None:
        self.mode, self.thinking, self.protocol = mode, thinking, protocol

    def __call__(self, messages: list[dict], turn: Turn, rng: random.Random) -> str:
        if self.mode == "short":
            gold = runnable(turn.gold_sql)
            return self._message(f"The question asks: {turn.question}\nQuery: {render_breakdown(gold)}",
                                 answer=gold)
        previous = _own_actions(messages, self.protocol)
        if not previous:
            return self._first(turn, rng)
        return self._next(previous[-1], _last_observation(messages), turn)

    def _first(self, turn: Turn, rng: random.Random) -> str:
        return self._run(turn, runnable(turn.gold_sql))

    def _run(self, turn: Turn, sql: str, *, think: str | None = None, exec_verdict: str | None = None) -> str:
        think = think or (f"The question asks: {turn.question}\n"
                          f"I will run this query and check its result: {render_breakdown(sql)}")
        argument = "code" if self.protocol == "release" else "sql"
        return self._message(think, exec_verdict=exec_verdict, call=("exec_sql", {argument: sql}))

    def _next(self, last: Action, observation: str, turn: Turn) -> str:
        gold, result = runnable(turn.gold_sql), _result_line(observation)
        final = observation.endswith(prompts.LAST_MESSAGE)
        if last.tool == "exec_sql":
            think = f"The result was: {result}\n" + (
                "The query is what the question asks for, even though this database cannot run it."
                if result.startswith(("ERROR", "Error:")) else "It is what the question asks for.")
            if turn.previous_questions and not final:
                arguments = {"code": last.sql} if self.protocol == "release" else {}
                return self._message(think + " Next I check it against the earlier turns.", exec_verdict="pass",
                                     call=("memory_retrieve", arguments))
            return self._message(think, exec_verdict="pass", answer=gold)
        if last.tool == "memory_retrieve":
            think = ("The query keeps what the earlier turns established and changes only what the current "
                     "question asks for, so it is consistent with the conversation.")
            return self._message(think, memory_verdict="pass", answer=gold)
        return self._message("I give the final query.", answer=gold)

    def _message(self, think: str, *, exec_verdict: str | None = None, memory_verdict: str | None = None,
                 call: tuple[str, dict] | None = None, answer: str | None = None) -> str:
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

    def __init__(self, *, mode: str = "long", thinking: bool = True, protocol: str = "mtsql",
                 sql_cfg: SqlConfig = SqlConfig(), data_root: Path | None = None, error_share: float = 0.3,
                 correction_share: float = 1.0) -> None:
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
        return [v for v in mutations(gold_sql, load_tables(turn.db_id, self.data_root))
                if _differs(gold, self._execute(db_path, v.sql), ordered)]

    def _first(self, turn: Turn, rng: random.Random) -> str:
        direct = self.correction_share < 1.0 and rng.random() >= self.correction_share  # no draw at 1.0: the
        candidates = [] if direct else self.variants(turn)                              # same episodes as before
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
            think = (f"The result was: {_result_line(observation)}\nThis is wrong: {why}. "
                     "I correct the query and run it again.")
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
        return recap[0][len(prompts.RELEASE_RESULT_LINE):]
    if "Result:" not in lines:
        return "(no result shown)"
    block = lines[lines.index("Result:") + 1:]
    return "; ".join(block[:block.index("")] if "" in block else block)
