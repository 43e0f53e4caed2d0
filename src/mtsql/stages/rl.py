"""`mtsql rl`: multi-turn GRPO on one curriculum stage, with verl (GPUs, Ray) or the local engine.

Both engines sample with the shared agent environment, score with the configured reward family
(``reward.family``) and leave the trained model in ``model/``. The local engine (CPU or one GPU,
no Ray) logs one line per step to ``metrics.jsonl``; verl runs ``main_ppo`` then the model merger
as subprocesses (their exact commands are in ``log.txt`` and, with ``--dry-run``, printed).

Reads: ``stage-<stage>.jsonl`` of the ``curriculum`` input; the ``model`` input to start from (a
training artifact; none: the base model); config sections ``data``, ``sql``, ``env``, ``reward``,
``model``, ``sample`` (generation settings of the local engine), ``rl``, ``seed``. ``rl.engine``
must be resolved (``verl`` or ``local``, see ``pick_engine``) before the stage runs.
Writes: ``model/``, ``metrics.jsonl`` (one line per step); verl: ``data/`` (the RL parquet) and ``verl/``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mtsql.artifacts import MODEL_DIR, Artifact, StageContext
from mtsql.chat_format import ChatFormat
from mtsql.config import ConfigView
from mtsql.data.records import Turn, read_turns
from mtsql.errors import UsageError
from mtsql.integrations.verl.dataset import write_rl_parquet
from mtsql.integrations.verl.launch import (
    ROLLOUTS_DIR,
    StageData,
    build_stage_plan,
    read_metrics,
    render_plan,
    run_stage_plan,
    step_behaviour_of,
)
from mtsql.models import stage_model

SECTIONS = ("data", "sql", "env", "reward", "model", "sample", "rl", "seed")
INPUTS = {"curriculum": "curriculum", "model": None}
ENGINES = ("verl", "local")


def pick_engine(name: str) -> str:
    """``auto``: verl where a CUDA device is visible, else the local engine."""
    if name != "auto":
        return name
    import torch  # only to look for a GPU

    return "verl" if torch.cuda.is_available() else "local"


def run(ctx: StageContext, cfg: ConfigView, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> dict:
    turns = read_turns(curriculum.path / f"stage-{stage}.jsonl")
    if not turns:
        raise UsageError(f"rl stage {stage}: curriculum stage {stage} of {curriculum.path} has no items")
    base = stage_model(cfg.model.name, model)
    if cfg.rl.engine == "local":
        from mtsql.integrations.grpo_local import train_stage  # torch and verl's core_algos: load on use

        return {"engine": "local", "items": len(turns),
                **train_stage(cfg, turns, base_model=base, out_dir=ctx.out, metrics_path=ctx.out / "metrics.jsonl",
                              stage=stage)}
    if cfg.rl.engine != "verl":
        raise UsageError(f"rl.engine={cfg.rl.engine}: resolve 'auto' with pick_engine before running the stage")
    rows = _write_parquet(cfg, turns, base, _train_file(ctx.out, stage))
    commands, stage_data = _verl_plan(cfg, base_model=base, out=ctx.out, stage=stage, rows=rows)
    run_stage_plan(commands, ctx.log_path, steps=cfg.rl.steps_per_stage)
    shutil.move(str(ctx.out / "verl" / stage_data.name / "merged"), ctx.out / MODEL_DIR)
    curve = _verl_curve(ctx.out / "verl" / stage_data.name, stage)
    (ctx.out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in curve))
    dump = ctx.out / "verl" / stage_data.name / ROLLOUTS_DIR
    if dump.exists():  # read into metrics.jsonl; every sample's text, tens of MB a step at the paper's sizes
        shutil.rmtree(dump)
    last = curve[-1] if curve else {}
    return {"engine": "verl", "items": stage_data.rows, "steps": len(curve),
            "reward_last": last.get("reward_mean"), "response_length_last": last.get("response_length")}


def plan(cfg: ConfigView, out: Path, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> str:
    """What this stage would run (``--dry-run``): the verl files and commands, or the local engine's steps."""
    base = stage_model(cfg.model.name, model, resolve=False)
    if cfg.rl.engine == "local":
        weights = f"the last {cfg.rl.freeze_layers} decoder layers of " if cfg.rl.freeze_layers else ""
        return (f"# local GRPO in this process: {cfg.rl.steps_per_stage} steps of {cfg.rl.batch_size} questions "
                f"x {cfg.rl.n} samples, training {weights}{base}; curriculum stage {stage} of {curriculum.path}\n")
    stage_file = Path(curriculum.path) / f"stage-{stage}.jsonl"
    rows = len(read_turns(stage_file)) if stage_file.exists() else None  # unknown before the curriculum runs
    commands, _ = _verl_plan(cfg, base_model=base, out=out, stage=stage, rows=rows)
    items = f"{rows} items" if rows is not None else f"the items of curriculum stage {stage} ({curriculum.path})"
    return f"# curriculum stage {stage}: {items}; the RL parquet is written by the stage itself\n" + render_plan(commands)


def _train_file(out: Path, stage: int) -> Path:
    return out / "data" / f"stage-{stage}.parquet"


def _write_parquet(cfg: ConfigView, turns: list[Turn], base_model: str, path: Path) -> int:
    """Export the stage's turns as verl's RL parquet; returns the rows written."""
    from transformers import AutoTokenizer

    chat = ChatFormat.for_template(AutoTokenizer.from_pretrained(base_model), cfg.model.template)
    return write_rl_parquet(turns, path, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=cfg.data_root,
                            chat=chat, max_prompt_len=cfg.rl.max_prompt_len).rows


def _verl_plan(cfg: ConfigView, *, base_model: str, out: Path, stage: int, rows: int | None):
    """The verl train + merge commands of one curriculum stage (``rows``: None when not known yet)."""
    stage_data = StageData(name=f"stage-{stage}", train_file=_train_file(out, stage), rows=rows)
    return build_stage_plan(cfg, [stage_data], model_path=base_model, out_dir=out / "verl",
                            data_root=cfg.data_root), stage_data


VERL_KEYS = {"reward_mean": "critic/score/mean", "response_length": "response_length/mean"}


def _verl_curve(stage_dir: Path, stage: int) -> list[dict]:
    """verl's per-step metrics (every attempt) in the local engine's shape (the report reads both alike),
    with the agent's behaviour from each step's samples (its response length in model tokens, as the
    local engine counts it, replacing verl's)."""
    return [{"stage": stage, "step": row["step"], **{ours: row.get(theirs) for ours, theirs in VERL_KEYS.items()},
             **step_behaviour_of(stage_dir, row["step"])} for row in read_metrics(stage_dir)]
