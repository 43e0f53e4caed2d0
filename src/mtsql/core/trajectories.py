"""Scored trajectories: the rewards and protocol statistics of a rollout record, and their summary.

Every consumer of rollouts (sampling, reject sampling, the curriculum's pass rates, SFT's held-out
check, evaluation, the local RL engine) reads a record the same way:

    row = score_record(record, reward=cfg.reward, sql=cfg.sql, data_root=root)   # a ScoredRow
    is_correct(row, ("ex", "em"))        # protocol-valid and scored 1 on each
    summarize_trajectories(rows)         # EX, EM, protocol and reward statistics by hardness and turn
    vote(samples_of_one_turn, root, 5.0) # SQL-R1's self-consistency: the most common execution result
    step_behaviour([episode_behaviour(r.trajectory) for r in rows], tokens)  # one RL step's behaviour
    write_rows(path, rows); read_rows(path)  # trajectories.jsonl, kept.jsonl: one ScoredRow a line
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from statistics import mean

from mtsql.base.errors import UsageError
from mtsql.base.files import iter_jsonl, write_jsonl
from mtsql.base.paths import database_path
from mtsql.core.agent.env import Trajectory
from mtsql.core.agent.settings import SqlConfig
from mtsql.core.data.records import Turn
from mtsql.core.rewards import RewardConfig, compute_rewards
from mtsql.core.sql.executor import execute_cached
from mtsql.core.sql.metrics import TURN_BUCKETS, turn_bucket

REQUIRE_KEYS = {"ex": "execution", "em": "exact"}


@dataclass(kw_only=True)
class ScoredRow:
    """One scored episode: the rollout record (``RolloutEngine``'s, the first fields) and what scoring
    added. Its JSON (``to_dict``: every field, in this order; the turn and the trajectory as their own
    ``to_dict``) is one line of ``trajectories.jsonl`` and ``kept.jsonl``; ``from_dict`` reads one back."""

    key: str  # uid#sample
    uid: str
    sample: int
    turn: Turn
    trajectory: Trajectory
    truncated: bool  # a generation was cut at max_new_tokens
    stop: str  # why the episode ended (episode_tokens)
    generations: list[dict]  # per assistant message: tokens, prompt_tokens, finish_reason
    generated_tokens: int
    prompt_ids: list[int] | None  # None: a scripted policy
    response_ids: list[int] | None
    response_mask: list[int] | None
    response_logprobs: list[float] | None
    elapsed_s: float
    hardness: str | None
    final_sql: str | None
    protocol_valid: bool
    execution: int | None  # EX 1 / 0; None: the evaluator cannot score it
    exact: int | None  # EM, likewise
    reward: dict  # the reward terms (rewards.compute_rewards), ``score`` their total
    actions: list[str]  # each assistant message's tool or action
    proposed_sql: list[str]
    tool_calls: int
    self_corrected: bool
    response_tokens: int

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return out | {"turn": self.turn.to_dict(), "trajectory": self.trajectory.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> ScoredRow:
        names = [f.name for f in fields(cls)]
        if missing := [name for name in names if name not in data]:
            raise ValueError(f"not a scored trajectory row: no {', '.join(missing)}")
        if extra := sorted(set(data) - set(names)):
            raise ValueError(f"not a scored trajectory row: unknown {', '.join(extra)}")
        return cls(
            **data
            | {"turn": Turn.from_dict(data["turn"]), "trajectory": Trajectory.from_dict(data["trajectory"])}
        )


def write_rows(path: Path, rows: Iterable[ScoredRow]) -> int:
    """Write scored rows as JSON lines, atomically; returns how many."""
    return write_jsonl(path, (row.to_dict() for row in rows))


def read_rows(path: Path) -> list[ScoredRow]:
    """The scored rows of a ``trajectories.jsonl`` or ``kept.jsonl``; a line that is not one is an error
    naming the file and line."""
    rows = []
    for number, data in enumerate(iter_jsonl(path), 1):
        try:
            rows.append(ScoredRow.from_dict(data))
        except ValueError as exc:
            raise UsageError(
                f"{path} record {number}: {exc} (written by another mtsql? rerun its stage)"
            ) from None
    return rows


def scorer(cfg, data_root: Path) -> Callable[[dict], ScoredRow]:
    """``score_record`` with ``cfg``'s reward and SQL settings: what ``RolloutEngine.run(score=...)``
    takes."""
    return partial(score_record, reward=cfg.reward, sql=cfg.sql, data_root=data_root)


def score_record(record: dict, *, reward: RewardConfig, sql: SqlConfig, data_root: Path) -> ScoredRow:
    """A rollout record plus its rewards and the statistics reject sampling and reports read."""
    trajectory = Trajectory.from_dict(record["trajectory"])
    turn = Turn.from_dict(record["turn"])
    mask = record.get("response_mask") or []
    tokens = (
        sum(mask)
        if mask
        else sum(len(m["content"].split()) for m in trajectory.messages if m["role"] == "assistant")
    )
    terms = compute_rewards(
        trajectory, turn.gold_sql, reward, sql_cfg=sql, data_root=data_root, response_tokens=tokens
    )
    exec_steps = trajectory.tool_steps("exec_sql")
    corrected = any(s.verdict == "no_pass" for s in exec_steps[:-1])
    return ScoredRow(
        **record | {"turn": turn, "trajectory": trajectory},
        hardness=turn.hardness,
        final_sql=trajectory.final_sql,
        protocol_valid=trajectory.protocol_valid,
        execution=int(terms["ex"]) if terms["ex_scored"] else None,
        exact=int(terms["em"]) if terms["em_scored"] else None,
        reward=terms,
        actions=[s.tool if s.action == "tool_call" else s.action for s in trajectory.steps],
        proposed_sql=trajectory.proposed_sql(),
        tool_calls=sum(s.action == "tool_call" for s in trajectory.steps),
        self_corrected=corrected,
        response_tokens=tokens,
    )


def is_correct(row: ScoredRow, require: Iterable[str]) -> bool:
    """A scored row that followed the protocol and scored 1 on every required metric (``ex``, ``em``)."""
    return bool(row.protocol_valid) and all(getattr(row, REQUIRE_KEYS[key]) == 1 for key in require)


def summarize_trajectories(rows: list[ScoredRow]) -> dict:
    """EX, EM, protocol and reward statistics of scored rows, overall and by hardness and turn."""

    def block(group: list[ScoredRow]) -> dict:
        scored_ex = [r.execution for r in group if r.execution is not None]
        scored_em = [r.exact for r in group if r.exact is not None]
        corrected = [r for r in group if r.self_corrected]
        return {
            "count": len(group),
            "ex": mean(scored_ex) if scored_ex else 0.0,
            "em": mean(scored_em) if scored_em else 0.0,
            "unscorable": len(group) - len(scored_ex),
            "protocol_valid": mean(float(r.protocol_valid) for r in group),
            "answered": mean(float(r.final_sql is not None) for r in group),
            "tool_calls_per_turn": mean(r.tool_calls for r in group),
            "self_correction_rate": len(corrected) / len(group),
            "self_correction_success": mean(float(r.execution == 1) for r in corrected) if corrected else 0.0,
            "reward": mean(r.reward["score"] for r in group),
            "response_tokens": mean(r.response_tokens for r in group),
        }

    if not rows:
        return {"count": 0}
    by_hardness, by_turn = defaultdict(list), defaultdict(list)
    for row in rows:
        by_hardness[row.hardness or "unknown"].append(row)
        by_turn[turn_bucket(row.turn.turn_index)].append(row)
    return {
        **block(rows),
        "items": len({r.uid for r in rows}),
        "truncated": sum(bool(r.truncated) for r in rows),
        "generated_tokens": sum(r.generated_tokens or 0 for r in rows),
        "by_hardness": {k: block(v) for k, v in sorted(by_hardness.items())},
        "by_turn": {k: block(by_turn[k]) for k in TURN_BUCKETS if k in by_turn},
    }


BEHAVIOUR = ("tool_calls", "memory_calls", "messages", "invalid_messages", "self_corrected")


def episode_behaviour(trajectory: Trajectory) -> dict[str, float]:
    """What the agent did in one episode: tool and memory calls, assistant messages, unparseable
    messages, and whether it self-corrected (an exec_sql result other than the last one judged
    no_pass, as ``score_record``'s ``self_corrected``)."""
    steps = trajectory.steps
    calls = [s for s in steps if s.action == "tool_call"]
    executed = trajectory.tool_steps("exec_sql")
    return {
        "tool_calls": len(calls),
        "memory_calls": sum(s.tool == "memory_retrieve" for s in calls),
        "messages": len(steps),
        "invalid_messages": sum(s.action == "invalid" for s in steps),
        "self_corrected": float(any(s.verdict == "no_pass" for s in executed[:-1])),
    }


def step_behaviour(episodes: list[dict], response_tokens: list[float]) -> dict[str, float]:
    """The behaviour of one RL step's samples (``episode_behaviour`` of each, and its response length):
    tool and memory calls, messages per turn, the self-correction rate, the share of assistant
    messages that could not be parsed, and the mean response length in tokens."""
    messages = sum(e["messages"] for e in episodes)
    return {
        "tool_calls_per_turn": mean(e["tool_calls"] for e in episodes),
        "memory_calls_per_turn": mean(e["memory_calls"] for e in episodes),
        "self_correction_rate": mean(e["self_corrected"] for e in episodes),
        "invalid_message_rate": sum(e["invalid_messages"] for e in episodes) / messages if messages else 0.0,
        "messages_per_turn": messages / len(episodes),
        "response_length": mean(response_tokens),
    }


def vote(rows: list[ScoredRow], root: Path, timeout_s: float) -> ScoredRow:
    """SQL-R1's self-consistency over the samples of one turn: every final query is executed and the
    one whose result (the rows as a multiset, in any order) the most samples share wins. A query
    that fails or has no answer never wins; ties go to the earliest sample; if no query runs, the
    first sample is returned."""
    results = {}
    for row in sorted(rows, key=lambda r: r.sample):
        if row.final_sql:
            result = execute_cached(database_path(row.turn.db_id, root), row.final_sql, timeout_s=timeout_s)
            if result.ok:
                results[row.sample] = frozenset(Counter(map(repr, result.rows)).items())
    ordered = sorted(rows, key=lambda r: r.sample)
    if not results:
        return ordered[0]
    counts = Counter(results.values())
    best = max(counts.values())
    return next(r for r in ordered if r.sample in results and counts[results[r.sample]] == best)
