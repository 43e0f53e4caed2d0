"""verl's side of the RL contract (``engines.rl_engines``): one curriculum stage trained by ``main_ppo`` and
merged (``train_curriculum_stage``), or what it would run (``plan_curriculum_stage``, the dry run).

The stage's turns become verl's RL parquet (``data/stage-<k>.parquet``; with ``rl.val_every`` also
``data/val.parquet`` of the dev turns), the plan of ``main_ppo`` runs in ``verl/`` (on the GPUs, or on the
CPUs where CUDA is absent), the kept step's checkpoint is merged into ``model/`` and verl's per-step
metrics become ``TrainingStep`` lines of ``metrics.jsonl``, as the local engine writes them (``verl_curve``),
and the stage's ``RlStageResult``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from mtsql.base.artifacts import MODEL_DIR
from mtsql.base.trackers import Trackers
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data.records import Turn
from mtsql.core.results import RlStageResult, TrainingStep
from mtsql.engines.commands import run_logged
from mtsql.engines.rl_engines import step_metrics
from mtsql.engines.rl_schedule import best_step, stage_steps, validation_turns
from mtsql.engines.verl.dataset import write_rl_parquet
from mtsql.engines.verl.main_ppo import (
    ROLLOUTS_DIR,
    CurriculumParquet,
    build_stage_plan,
    checkpoint_dir,
    has_cuda,
    merge_command,
    read_metrics,
    render_plan,
    run_stage_plan,
    step_samples_of,
)
from mtsql.engines.views import RlView

VERL_KEYS = {
    "reward_mean": "critic/score/mean",
    "response_length": "response_length/mean",
    "pg_loss": "actor/pg_loss",
    "kl": "actor/kl_loss",
    "grad_norm": "actor/grad_norm",
    "clipfrac": "actor/pg_clipfrac",
}
VERL_VAL_REWARD = re.compile(r"^val-core/.+/reward/mean@\d+$")  # one per data source (dataset)


def train_curriculum_stage(
    cfg: RlView,
    turns: list[Turn],
    *,
    base_model: str,
    out_dir: Path,
    metrics_path: Path,
    stage: int,
    trackers: Trackers,
) -> RlStageResult:
    """Train curriculum stage ``stage`` on ``turns`` from ``base_model`` with verl; leaves ``out_dir/model``
    and ``metrics_path``; the commands' output goes to the stage's ``log.txt``. verl's own loggers write to
    ``trackers`` as it trains (its names); the steps of ``metrics_path`` follow there once it is done, under
    the names the local engine logs (``rl_engines.step_metrics``)."""
    out_dir = Path(out_dir)
    log_path = out_dir / "log.txt"
    rows = _write_parquet(cfg, turns, base_model, _train_file(out_dir, stage))
    if cfg.rl.val_every:
        _write_parquet(cfg, validation_turns(cfg), base_model, _val_file(out_dir))
    commands, stage_data = _plan(
        cfg, base_model=base_model, out=out_dir, stage=stage, rows=rows, trackers=trackers
    )
    steps = stage_steps(cfg.rl, rows)
    run_stage_plan(commands, log_path, steps=steps)
    stage_dir = out_dir / "verl" / stage_data.name
    curve = verl_curve(stage_dir, stage)
    picked = best_step(curve) if cfg.rl.val_pick == "best" else None
    if picked is not None and picked != steps:
        merge = merge_command(
            checkpoint_dir(stage_dir, picked),
            stage_dir / f"merged-step-{picked}",
            name=f"{stage_data.name} merge step {picked}",
            cwd=stage_dir,
            python=commands[0].argv[0],
        )
        run_logged(merge, log_path)
        shutil.move(str(merge.produces["merged_model"]), out_dir / MODEL_DIR)
    else:
        shutil.move(str(stage_dir / "merged"), out_dir / MODEL_DIR)
    Path(metrics_path).write_text("".join(json.dumps(row.to_dict()) + "\n" for row in curve))
    for row in curve:
        trackers.log_metrics(row.step, step_metrics(row))
    dump = stage_dir / ROLLOUTS_DIR
    if dump.exists():  # read into metrics.jsonl; every sample's text, tens of MB a step at the paper's sizes
        shutil.rmtree(dump)
    return RlStageResult.of_steps(curve, engine="verl", items=rows, picked_step=picked or steps)


def plan_curriculum_stage(
    cfg: RlView, *, base_model: str, out_dir: Path, stage: int, rows: int | None
) -> str:
    """The verl files and commands of one stage as a shell script (``rows``: None when not known yet)."""
    trackers = Trackers.for_folder(cfg.trackers, run=cfg.run, folder=Path(out_dir))
    commands, _ = _plan(
        cfg, base_model=base_model, out=Path(out_dir), stage=stage, rows=rows, trackers=trackers
    )
    items = f"{rows} items" if rows is not None else "its items"
    return (
        f"# curriculum stage {stage}: {items}; the RL parquet is written by the stage itself\n"
        + render_plan(commands)
    )


def identity(cfg: RlView) -> dict:
    """{}: verl's rollouts are verl's own, pinned with it (docs/engines.md)."""
    return {}


def sample_settings(cfg: RlView) -> dict:
    """{}: verl's rollouts read no ``sample`` setting (they sample at ``rl.temperature``, bounded by
    ``rl_engines.RolloutBounds``)."""
    return {}


def verl_curve(stage_dir: Path, stage: int) -> list[TrainingStep]:
    """verl's per-step metrics (every attempt) as ``TrainingStep``s, as the local engine logs them, with what
    each step's samples show (``main_ppo.step_samples_of``: the agent's behaviour, its response length in
    model tokens as the local engine counts it, replacing verl's, and the share of groups with signal);
    ``val_reward_mean``: the mean over datasets of the greedy validation reward, on validated steps;
    ``extra["verl"]``: every metric verl logged for the step, by its name."""
    curve = []
    for row in read_metrics(stage_dir):
        validated = [value for key, value in row.items() if VERL_VAL_REWARD.match(key)]
        figures = {ours: row.get(theirs) for ours, theirs in VERL_KEYS.items()} | step_samples_of(
            stage_dir, row["step"]
        )
        curve.append(
            TrainingStep(
                stage=stage,
                step=row["step"],
                **figures,
                val_reward_mean=sum(validated) / len(validated) if validated else None,
                extra={"verl": {key: value for key, value in row.items() if key != "step"}},
            )
        )
    return curve


def _train_file(out: Path, stage: int) -> Path:
    return out / "data" / f"stage-{stage}.parquet"


def _val_file(out: Path) -> Path:
    return out / "data" / "val.parquet"


def _write_parquet(cfg, turns: list[Turn], base_model: str, path: Path) -> int:
    """Export turns as verl's RL parquet; returns the rows written."""
    from transformers import AutoTokenizer

    chat = ChatFormat.for_template(AutoTokenizer.from_pretrained(base_model), cfg.model.template)
    return write_rl_parquet(
        turns,
        path,
        env_cfg=cfg.env,
        sql_cfg=cfg.sql,
        data_root=cfg.data_root,
        chat=chat,
        max_prompt_len=cfg.rl.max_prompt_len,
    ).rows


def _plan(cfg, *, base_model: str, out: Path, stage: int, rows: int | None, trackers: Trackers):
    """The train + merge commands of one curriculum stage and its ``CurriculumParquet``."""
    stage_data = CurriculumParquet(
        name=f"stage-{stage}",
        train_file=_train_file(out, stage),
        rows=rows,
        val_file=_val_file(out) if cfg.rl.val_every else None,
    )
    return build_stage_plan(
        cfg,
        [stage_data],
        model_path=base_model,
        out_dir=out / "verl",
        data_root=cfg.data_root,
        cpu=not has_cuda(),
        trackers=trackers,
    ), stage_data
