"""`mtsql rl`: multi-turn GRPO on one curriculum stage, with verl (GPUs, Ray) or the local engine.

Both engines sample with the shared agent environment, score with the configured reward family
(``reward.family``) and leave the trained model in ``model/``. The local engine (CPU or one GPU,
no Ray) logs one line per step to ``metrics.jsonl``; verl runs ``main_ppo`` then the model merger
as subprocesses (their exact commands are in ``log.txt`` and, with ``--dry-run``, printed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.console import Console

from mtsql.artifacts import StageContext
from mtsql.config import Config
from mtsql.data.records import Turn
from mtsql.errors import UsageError
from mtsql.paths import data_dir

ENGINES = ("verl", "local")
console = Console(stderr=True)


def pick_engine(name: str) -> str:
    """``auto``: verl where a CUDA device is visible, else the local engine."""
    if name == "auto":
        import torch

        return "verl" if torch.cuda.is_available() else "local"
    if name not in ENGINES:
        raise UsageError(f"rl.engine: unknown '{name}'; choose auto, verl or local")
    return name


def verl_plan(cfg: Config, turns: list[Turn], *, base_model: str, out: Path, stage: int, write_data: bool):
    """The verl commands of one curriculum stage; ``write_data`` also exports its RL parquet."""
    from mtsql.integrations.verl.launch import StageData, build_stage_plan

    train_file = out / "data" / f"stage-{stage}.parquet"
    rows = len(turns)
    if write_data:
        from transformers import AutoTokenizer

        from mtsql.chat_format import ChatFormat
        from mtsql.integrations.verl.dataset import write_rl_parquet

        chat = ChatFormat.for_template(AutoTokenizer.from_pretrained(base_model), cfg.model.template)
        report = write_rl_parquet(turns, train_file, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=data_dir(cfg.data.root),
                                  chat=chat, max_prompt_len=cfg.rl.max_prompt_len)
        rows = report.rows
    stage_data = StageData(name=f"stage-{stage}", train_file=train_file, rows=rows)
    return build_stage_plan(cfg, [stage_data], model_path=base_model, out_dir=out / "verl",
                            data_root=data_dir(cfg.data.root)), stage_data


def print_plan(cfg: Config, turns: list[Turn], *, base_model: str, out: Path, stage: int) -> None:
    from mtsql.integrations.verl.launch import render_plan

    plan, _ = verl_plan(cfg, turns, base_model=base_model, out=out, stage=stage, write_data=False)
    console.print(f"# curriculum stage {stage}: {len(turns)} items; the RL parquet is written by the stage itself",
                  markup=False)
    console.print(render_plan(plan), markup=False, highlight=False)


def run(ctx: StageContext, cfg: Config, turns: list[Turn], *, engine: str, base_model: str, stage: int) -> dict:
    """Stage body: train on ``turns`` from ``base_model``; the result goes to ``ctx.out / 'model'``."""
    if not turns:
        raise UsageError(f"rl stage {stage}: no items to train on")
    if engine == "local":
        from mtsql.integrations.grpo_local import train_stage

        return {"engine": "local", "items": len(turns),
                **train_stage(cfg, turns, base_model=base_model, out_dir=ctx.out,
                              metrics_path=ctx.out / "metrics.jsonl", stage=stage)}
    from mtsql.integrations.verl.launch import run_stage_plan

    plan, stage_data = verl_plan(cfg, turns, base_model=base_model, out=ctx.out, stage=stage, write_data=True)
    run_stage_plan(plan, ctx.log_path, steps=cfg.rl.steps_per_stage)
    merged = ctx.out / "verl" / stage_data.name / "merged"
    shutil.move(str(merged), ctx.out / "model")
    curve = _verl_curve(ctx.out / "verl" / stage_data.name, stage)
    (ctx.out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in curve))
    last = curve[-1] if curve else {}
    return {"engine": "verl", "items": stage_data.rows, "steps": len(curve),
            "reward_last": last.get("reward_mean"), "response_length_last": last.get("response_length")}


VERL_KEYS = {"reward_mean": "critic/score/mean", "response_length": "response_length/mean"}


def _verl_curve(stage_dir: Path, stage: int) -> list[dict]:
    """verl's per-step metrics (every attempt) in the local engine's shape (the report reads both alike)."""
    from mtsql.integrations.verl.launch import read_metrics

    return [{"stage": stage, "step": row["step"], **{ours: row.get(theirs) for ours, theirs in VERL_KEYS.items()}}
            for row in read_metrics(stage_dir)]
