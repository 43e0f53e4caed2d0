"""`mtsql sample`: roll out trajectories with a model or a scripted policy, then score them.

Reads the turns to sample (a split, or the pool a reject artifact left), runs them through the
agent environment with the rollout engine (``sample.n`` samples each; shards in ``rollout/`` make a
killed run resume), scores every trajectory with the rewards (EX, EM, process and SQL-R1 terms) and
writes ``trajectories.jsonl``: one row per (turn, sample) with the turn, the trajectory, its token
ids and mask (model policies), the reward terms and the protocol statistics reject sampling needs.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from statistics import mean

from mtsql.artifacts import StageContext
from mtsql.config import Config
from mtsql.data.records import Turn
from mtsql.jsonl import write_jsonl
from mtsql.paths import data_dir
from mtsql.stages.tables import turn_bucket

SCRIPTED = ("gold", "gold_with_correction")


def make_engine(cfg: Config, *, policy: str, model: str | None, temperature: float | None = None, backend=None):
    """A rollout engine over this config's environment, with a model backend or a scripted policy.

    ``backend``: an already loaded backend (the RL engine samples from the model it trains)."""
    from mtsql.agent.env import SqlAgentEnv
    from mtsql.agent.tools import TOOL_SCHEMAS
    from mtsql.rollout import STOP_STRINGS, RolloutEngine

    root = data_dir(cfg.data.root)

    def make_env():
        return SqlAgentEnv(cfg.env, cfg.sql, root)

    common = {"memory": cfg.env.memory, "batch_size": cfg.sample.batch_size}
    if policy in SCRIPTED:
        from mtsql.agent.policies import make_policy

        return RolloutEngine(make_env, policy=make_policy(policy, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=root),
                             **common)
    if policy != "model":
        from mtsql.errors import UsageError

        raise UsageError(f"sample.policy: unknown '{policy}'; choose model, {', '.join(SCRIPTED)}")
    from mtsql.backends.base import SamplingParams, make_backend
    from mtsql.chat_format import ChatFormat

    backend = backend or make_backend(cfg.sample.backend, model, **backend_options(cfg))
    params = SamplingParams(temperature=cfg.sample.temperature if temperature is None else temperature,
                            top_p=cfg.sample.top_p, max_new_tokens=cfg.sample.max_new_tokens,
                            seed=cfg.sample.seed, stop=STOP_STRINGS)
    chat = ChatFormat.for_template(backend.tokenizer, cfg.model.template)
    tools = TOOL_SCHEMAS if cfg.env.mode == "long" else ()
    return RolloutEngine(make_env, backend=backend, chat=chat, params=params, tools=tools, **common)


def backend_options(cfg: Config) -> dict:
    """Constructor options of the ``sample.backend`` named in the config."""
    if cfg.sample.backend == "hf":
        return {"dtype": cfg.model.dtype, "device": cfg.model.device}
    if cfg.sample.backend == "openai":
        return {"base_url": cfg.sample.openai_base_url, "served_model": cfg.sample.openai_model,
                "concurrency": cfg.sample.openai_concurrency, "timeout_s": cfg.sample.openai_timeout_s}
    return {"dtype": cfg.model.dtype, "seed": cfg.sample.seed}


def score_record(record: dict, cfg: Config) -> dict:
    """A rollout record plus its rewards and the statistics reject sampling and reports read."""
    from mtsql.agent.env import Trajectory
    from mtsql.rewards import compute_rewards

    trajectory = Trajectory.from_dict(record["trajectory"])
    turn = Turn.from_dict(record["turn"])
    mask = record.get("response_mask") or []
    tokens = sum(mask) if mask else sum(len(m["content"].split()) for m in trajectory.messages if m["role"] == "assistant")
    reward = compute_rewards(trajectory, turn.gold_sql, cfg.reward, sql_cfg=cfg.sql,
                             data_root=data_dir(cfg.data.root), response_tokens=tokens)
    exec_steps = trajectory.tool_steps("exec_sql")
    corrected = any(s.verdict == "no_pass" for s in exec_steps[:-1])
    return {
        **record,
        "hardness": turn.hardness,
        "final_sql": trajectory.final_sql,
        "protocol_valid": trajectory.protocol_valid,
        "execution": int(reward["ex"]) if reward["ex_scored"] else None,
        "exact": int(reward["em"]) if reward["em_scored"] else None,
        "reward": reward,
        "actions": [s.tool if s.action == "tool_call" else s.action for s in trajectory.steps],
        "proposed_sql": trajectory.proposed_sql(),
        "tool_calls": sum(s.action == "tool_call" for s in trajectory.steps),
        "self_corrected": corrected,
        "response_tokens": tokens,
    }


def summarize(rows: list[dict]) -> dict:
    """EX, EM, protocol and reward statistics, overall and by hardness and turn."""
    def block(group: list[dict]) -> dict:
        scored_ex = [r["execution"] for r in group if r["execution"] is not None]
        scored_em = [r["exact"] for r in group if r["exact"] is not None]
        corrected = [r for r in group if r["self_corrected"]]
        return {
            "count": len(group),
            "ex": mean(scored_ex) if scored_ex else 0.0,
            "em": mean(scored_em) if scored_em else 0.0,
            "unscorable": len(group) - len(scored_ex),
            "protocol_valid": mean(float(r["protocol_valid"]) for r in group),
            "answered": mean(float(r["final_sql"] is not None) for r in group),
            "tool_calls_per_turn": mean(r["tool_calls"] for r in group),
            "self_correction_rate": len(corrected) / len(group),
            "self_correction_success": mean(float(r["execution"] == 1) for r in corrected) if corrected else 0.0,
            "reward": mean(r["reward"]["score"] for r in group),
            "response_tokens": mean(r["response_tokens"] for r in group),
        }

    if not rows:
        return {"count": 0}
    by_hardness, by_turn = defaultdict(list), defaultdict(list)
    for row in rows:
        by_hardness[row["hardness"] or "unknown"].append(row)
        by_turn[turn_bucket(row["turn"]["turn_index"])].append(row)
    return {
        **block(rows),
        "items": len({r["uid"] for r in rows}),
        "truncated": sum(bool(r.get("truncated")) for r in rows),
        "generated_tokens": sum(r.get("generated_tokens") or 0 for r in rows),
        "by_hardness": {k: block(v) for k, v in sorted(by_hardness.items())},
        "by_turn": {k: block(by_turn[k]) for k in ("1", "2", "3", "4", ">4") if k in by_turn},
    }


def run(ctx: StageContext, cfg: Config, turns: list[Turn], *, policy: str, model: str | None) -> dict:
    """Stage body: roll out, score, write ``trajectories.jsonl``; returns the summary metrics."""
    from mtsql.errors import UsageError

    if not turns:
        raise UsageError("sample: no turns to sample (empty split, slice or pool)")
    engine = make_engine(cfg, policy=policy, model=model)
    shards = Path(ctx.out) / "rollout"
    records = engine.run(turns, n=cfg.sample.n, seed=cfg.sample.seed, out_dir=shards)
    rows = [score_record(r, cfg) for r in records]
    write_jsonl(ctx.out / "trajectories.jsonl", rows)
    shutil.rmtree(shards)  # every record is in trajectories.jsonl now
    return {"policy": policy, "model": model, **summarize(rows)}
