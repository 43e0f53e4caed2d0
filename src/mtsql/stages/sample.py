"""`mtsql sample`: roll out trajectories with a model or a scripted policy, then score them.

Runs the turns through the agent environment with the rollout engine (``sample.n`` samples each;
shards in ``rollout/`` make a killed run resume) and scores every trajectory with the rewards (EX,
EM, process and SQL-R1 terms).

Reads: the training pool of config section ``data`` (the ``pool`` input, a reject artifact's
``pool.jsonl``, narrows it to the items earlier rounds left unsolved); the ``model`` input (a training
artifact; none: the base model) when ``sample.policy`` is ``model``; the ``attempts`` input (a sample
artifact of a model on the same items) when it is ``own_mistakes``, whose first message per item (its
first sample) is the attempt the policy keeps; config sections ``data``, ``sql``, ``env``, ``reward``,
``model``, ``sample``, ``seed``.
Writes: ``trajectories.jsonl``, one row per (turn, sample) with the turn, the trajectory, its token
ids and mask (model policies), the reward terms and the protocol statistics reject sampling needs.
"""

from __future__ import annotations

import shutil

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.errors import UsageError
from mtsql.core.data import train_pool
from mtsql.core.data.records import read_turns
from mtsql.core.trajectories import read_rows, scorer, summarize_trajectories, write_rows
from mtsql.engines import backends
from mtsql.engines.models.registry import stage_model
from mtsql.engines.rollout import SERVER_LOG, RolloutEngine
from mtsql.engines.views import RolloutView

VIEW = RolloutView
INPUTS = {"model": None, "pool": None, "attempts": None}
plan = hashed = None  # hooks this stage has not (app/runner.Stage)


def engine_identity(cfg: RolloutView) -> dict:
    """The generation engine, for the fingerprint (none for a scripted policy)."""
    return backends.engine_identity(cfg) if cfg.sample.policy == "model" else {}


def first_attempts(rows) -> dict[str, str]:
    """uid -> the first assistant message of the item's first sample (``ScoredRow``s of a sample artifact)."""
    out: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: r.sample):
        first = next((m["content"] for m in row.trajectory.messages if m["role"] == "assistant"), None)
        if first is not None:
            out.setdefault(row.uid, first)
    return out


def check(cfg: RolloutView, *, model=None, pool=None, attempts=None) -> None:
    """The training slice has turns on databases that exist, the base model exists when no trained one is
    given, and own_mistakes has the model's attempts to keep."""
    if cfg.sample.policy == "own_mistakes" and attempts is None:
        raise UsageError(
            "sample.policy own_mistakes keeps a model's first queries: give the attempts input (a sample "
            "artifact of that model on the training items; pipelines: the sft-iterate step's attempts)"
        )
    if not train_pool(cfg.data, cfg.data_root, with_hardness=False):
        raise UsageError(
            f"sample: {cfg.data.train_dataset} {cfg.data.train_split} of {cfg.data_root} has no turn "
            "on a database that exists (data.train_limit, the data folder's database/)"
        )
    if cfg.sample.policy == "model" and backends.api_model(cfg, model) is None and model is None:
        stage_model(cfg.model.name, resolve=False)


def run(
    ctx: StageContext,
    cfg: RolloutView,
    *,
    model: Artifact | None = None,
    pool: Artifact | None = None,
    attempts: Artifact | None = None,
) -> dict:
    turns = train_pool(cfg.data, cfg.data_root)
    if pool is not None:
        unsolved = {turn.uid for turn in read_turns(pool.path / "pool.jsonl")}
        turns = [t for t in turns if t.uid in unsolved]
    if not turns:
        raise UsageError("sample: no turns to sample (empty split, slice or pool)")
    policy = cfg.sample.policy
    model_path = (
        (backends.api_model(cfg, model) or stage_model(cfg.model.name, model)) if policy == "model" else None
    )
    shards = ctx.out / "rollout"
    with RolloutEngine.from_config(
        cfg,
        data_root=cfg.data_root,
        policy=policy,
        model=model_path,
        log_path=ctx.out / SERVER_LOG,
        items=[t.uid for t in turns],
        attempts=first_attempts(read_rows(attempts.path / "trajectories.jsonl"))
        if policy == "own_mistakes"
        else None,
    ) as engine:
        rows = engine.run(
            turns, n=cfg.sample.n, seed=cfg.seed, out_dir=shards, score=scorer(cfg, cfg.data_root)
        )
        usage = engine.backend.usage() if engine.backend is not None else None
    write_rows(ctx.out / "trajectories.jsonl", rows)
    shutil.rmtree(shards)  # every record is in trajectories.jsonl now
    return {
        "policy": policy,
        "model": model.label if model else cfg.model.name,
        **summarize_trajectories(rows),
    } | ({"usage": usage} if usage is not None else {})
