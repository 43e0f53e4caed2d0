"""`mtsql rl`: multi-turn GRPO on one curriculum stage, with verl (Ray; GPUs, or the CPUs) or the local engine.

Both engines sample with the shared agent environment, score with the configured reward family
(``reward.family``) and leave the trained model in ``model/``. The local engine (CPU or one GPU,
no Ray) logs one line per step to ``metrics.jsonl``; verl runs ``main_ppo`` then the model merger
as subprocesses (their exact commands are in ``log.txt`` and, with ``--dry-run``, printed).

Reads: ``stage-<stage>.jsonl`` of the ``curriculum`` input; the ``model`` input to start from (a
training artifact; none: the base model); config sections ``data``, ``sql``, ``env``, ``reward``,
``model``, ``sample`` (generation settings of the local engine), ``rl``, ``seed``. ``rl.engine``
must be resolved (``verl`` or ``local``, see ``pick_engine``) before the stage runs.
Writes: ``model/``, ``metrics.jsonl`` (one line per step); verl: ``data/`` (the RL parquet) and ``verl/``.

``rl.epochs_per_stage`` and ``rl.val_every`` / ``rl.val_pick`` (``engines.rl_schedule``) set how
long a stage trains and which step's model it keeps; verl validates on ``data/val.parquet`` (the dev
turns) and, to keep the best step, merges that step's checkpoint instead of the last one.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from mtsql.base.artifacts import MODEL_DIR, Artifact, StageContext
from mtsql.base.config import ConfigView
from mtsql.base.errors import UsageError
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data.records import Turn, read_turns
from mtsql.engines import backends
from mtsql.engines.models.registry import stage_model
from mtsql.engines.process import run_logged
from mtsql.engines.rl_schedule import best_step, epochs_note, stage_steps, validation_turns
from mtsql.engines.verl.dataset import write_rl_parquet
from mtsql.engines.verl.launch import (
    ROLLOUTS_DIR,
    StageData,
    build_stage_plan,
    checkpoint_dir,
    has_cuda,
    merge_command,
    read_metrics,
    render_plan,
    run_stage_plan,
    step_behaviour_of,
)

SECTIONS = ("data", "sql", "env", "reward", "model", "sample", "rl", "seed")
INPUTS = {"curriculum": "curriculum", "model": None}
ENGINES = ("verl", "local")


def pick_engine(name: str) -> str:
    """``auto``: verl where a CUDA device is visible, else the local engine."""
    if name != "auto":
        return name
    import torch  # only to look for a GPU

    return "verl" if torch.cuda.is_available() else "local"


def hashed(cfg: ConfigView) -> dict:
    """What the fingerprint covers: the declared sections but the sampling settings RL sets itself (it
    samples the model rl.n times at rl.temperature, and validates greedily)."""
    return cfg.hashed(without=("sample.policy", "sample.n", "sample.temperature"))


def engine_identity(cfg: ConfigView) -> dict:
    """The local engine's rollout server, for the fingerprint (verl's rollouts are verl's own)."""
    if cfg.rl.engine == "local" and cfg.rl.rollout_backend == "vllm":
        return backends.engine_identity(cfg.replace(sample={"backend": "vllm"}))
    return {}


def run(ctx: StageContext, cfg: ConfigView, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> dict:
    turns = read_turns(curriculum.path / f"stage-{stage}.jsonl")
    if not turns:
        raise UsageError(f"rl stage {stage}: curriculum stage {stage} of {curriculum.path} has no items")
    base = stage_model(cfg.model.name, model)
    if cfg.rl.engine == "local":
        from mtsql.engines.local_grpo.trainer import train_stage  # torch and verl's core_algos: load on use

        return {"engine": "local", "items": len(turns),
                **train_stage(cfg, turns, base_model=base, out_dir=ctx.out, metrics_path=ctx.out / "metrics.jsonl",
                              stage=stage)}
    if cfg.rl.engine != "verl":
        raise UsageError(f"rl.engine={cfg.rl.engine}: resolve 'auto' with pick_engine before running the stage")
    rows = _write_parquet(cfg, turns, base, _train_file(ctx.out, stage))
    if cfg.rl.val_every:
        _write_parquet(cfg, validation_turns(cfg), base, _val_file(ctx.out))
    commands, stage_data = _verl_plan(cfg, base_model=base, out=ctx.out, stage=stage, rows=rows)
    steps = stage_steps(cfg.rl, rows)
    run_stage_plan(commands, ctx.log_path, steps=steps)
    stage_dir = ctx.out / "verl" / stage_data.name
    curve = _verl_curve(stage_dir, stage)
    picked = best_step(curve) if cfg.rl.val_pick == "best" else None
    if picked is not None and picked != steps:
        merge = merge_command(checkpoint_dir(stage_dir, picked), stage_dir / f"merged-step-{picked}",
                              name=f"{stage_data.name} merge step {picked}", cwd=stage_dir, python=commands[0].argv[0])
        run_logged(merge, ctx.log_path)
        shutil.move(str(merge.produces["merged_model"]), ctx.out / MODEL_DIR)
    else:
        shutil.move(str(stage_dir / "merged"), ctx.out / MODEL_DIR)
    (ctx.out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in curve))
    dump = ctx.out / "verl" / stage_data.name / ROLLOUTS_DIR
    if dump.exists():  # read into metrics.jsonl; every sample's text, tens of MB a step at the paper's sizes
        shutil.rmtree(dump)
    last = curve[-1] if curve else {}
    return {"engine": "verl", "items": stage_data.rows, "steps": len(curve),
            "reward_last": last.get("reward_mean"), "response_length_last": last.get("response_length"),
            "picked_step": picked or steps}


def plan(cfg: ConfigView, out: Path, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> str:
    """What this stage would run (``--dry-run``): the verl files and commands, or the local engine's steps."""
    base = stage_model(cfg.model.name, model, resolve=False)
    if cfg.rl.engine == "local":
        weights = f"the last {cfg.rl.trainable_layers} decoder layers of " if cfg.rl.trainable_layers else ""
        return (f"# local GRPO in this process: {epochs_note(cfg.rl)} of {cfg.rl.batch_size} questions "
                f"x {cfg.rl.n} samples, training {weights}{base}; curriculum stage {stage} of {curriculum.path}\n")
    stage_file = Path(curriculum.path) / f"stage-{stage}.jsonl"
    rows = len(read_turns(stage_file)) if stage_file.exists() else None  # unknown before the curriculum runs
    commands, _ = _verl_plan(cfg, base_model=base, out=out, stage=stage, rows=rows)
    items = f"{rows} items" if rows is not None else f"the items of curriculum stage {stage} ({curriculum.path})"
    return f"# curriculum stage {stage}: {items}; the RL parquet is written by the stage itself\n" + render_plan(commands)


def _train_file(out: Path, stage: int) -> Path:
    return out / "data" / f"stage-{stage}.parquet"


def _val_file(out: Path) -> Path:
    return out / "data" / "val.parquet"


def _write_parquet(cfg: ConfigView, turns: list[Turn], base_model: str, path: Path) -> int:
    """Export the stage's turns as verl's RL parquet; returns the rows written."""
    from transformers import AutoTokenizer

    chat = ChatFormat.for_template(AutoTokenizer.from_pretrained(base_model), cfg.model.template)
    return write_rl_parquet(turns, path, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=cfg.data_root,
                            chat=chat, max_prompt_len=cfg.rl.max_prompt_len).rows


def _verl_plan(cfg: ConfigView, *, base_model: str, out: Path, stage: int, rows: int | None):
    """The verl train + merge commands of one curriculum stage (``rows``: None when not known yet)."""
    stage_data = StageData(name=f"stage-{stage}", train_file=_train_file(out, stage), rows=rows,
                           val_file=_val_file(out) if cfg.rl.val_every else None)
    return build_stage_plan(cfg, [stage_data], model_path=base_model, out_dir=out / "verl",
                            data_root=cfg.data_root, cpu=not has_cuda()), stage_data


VERL_KEYS = {"reward_mean": "critic/score/mean", "response_length": "response_length/mean", "pg_loss": "actor/pg_loss",
             "kl": "actor/kl_loss", "grad_norm": "actor/grad_norm"}
VERL_VAL_REWARD = re.compile(r"^val-core/.+/reward/mean@\d+$")  # one per data source (dataset)


def _verl_curve(stage_dir: Path, stage: int) -> list[dict]:
    """verl's per-step metrics (every attempt) in the local engine's shape (the report reads both alike),
    with the agent's behaviour from each step's samples (its response length in model tokens, as the
    local engine counts it, replacing verl's); ``val_reward_mean``: the mean over datasets of the greedy
    validation reward, on validated steps; ``verl``: every metric verl logged for the step, by its name."""
    curve = []
    for row in read_metrics(stage_dir):
        line = {"stage": stage, "step": row["step"], **{ours: row.get(theirs) for ours, theirs in VERL_KEYS.items()},
                **step_behaviour_of(stage_dir, row["step"])}
        validated = [value for key, value in row.items() if VERL_VAL_REWARD.match(key)]
        if validated:
            line["val_reward_mean"] = sum(validated) / len(validated)
        line["verl"] = {key: value for key, value in row.items() if key != "step"}
        curve.append(line)
    return curve
