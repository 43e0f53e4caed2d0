"""`mtsql sample`: roll out trajectories with a model or a scripted policy, then score them.

Reads the turns to sample (a split, or the pool a reject artifact left), runs them through the
agent environment with the rollout engine (``sample.n`` samples each; shards in ``rollout/`` make a
killed run resume), scores every trajectory with the rewards (EX, EM, process and SQL-R1 terms) and
writes ``trajectories.jsonl``: one row per (turn, sample) with the turn, the trajectory, its token
ids and mask (model policies), the reward terms and the protocol statistics reject sampling needs.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from mtsql.artifacts import StageContext
from mtsql.config import Config
from mtsql.data.records import Turn
from mtsql.errors import UsageError
from mtsql.files import write_jsonl
from mtsql.paths import data_dir
from mtsql.rollout import RolloutEngine
from mtsql.trajectories import score_record, summarize_trajectories


def run(ctx: StageContext, cfg: Config, turns: list[Turn], *, policy: str, model: str | None) -> dict:
    """Stage body: roll out, score, write ``trajectories.jsonl``; returns the summary metrics."""
    if not turns:
        raise UsageError("sample: no turns to sample (empty split, slice or pool)")
    root = data_dir(cfg.data.root)
    engine = RolloutEngine.from_config(cfg, data_root=root, policy=policy, model=model)
    shards = Path(ctx.out) / "rollout"
    rows = engine.run(turns, n=cfg.sample.n, seed=cfg.sample.seed, out_dir=shards,
                      score=partial(score_record, reward=cfg.reward, sql=cfg.sql, data_root=root))
    write_jsonl(ctx.out / "trajectories.jsonl", rows)
    shutil.rmtree(shards)  # every record is in trajectories.jsonl now
    return {"policy": policy, "model": model, **summarize_trajectories(rows)}
