"""`mtsql rl`: multi-turn GRPO on one curriculum stage, with verl (Ray; GPUs, or the CPUs) or the local engine.

Both engines sample with the shared agent environment, score with the configured reward family
(``reward.family``) and leave the trained model in ``model/``. The local engine (CPU or one GPU,
no Ray) logs one line per step to ``metrics.jsonl``; verl runs ``main_ppo`` then the model merger
as subprocesses (their exact commands are in ``log.txt`` and, with ``--dry-run``, printed).

Reads: ``stage-<stage>.jsonl`` of the ``curriculum`` input; the ``model`` input to start from (a
training artifact; none: the base model); config sections ``data``, ``sql``, ``env``, ``reward``,
``model``, ``sample`` (generation settings of the local engine), ``rl``, ``seed``. ``rl.engine``
must be resolved (``verl`` or ``local``, see ``pick_engine``) before the stage runs.
Writes: ``model/``, ``metrics.jsonl`` (one ``results.TrainingStep`` line per step); verl: ``data/`` (the RL parquet) and ``verl/``.
Each engine is called through its ``train_stage`` (``train_stage_of``): ``mtsql.engines.local_grpo.trainer``
and ``mtsql.engines.verl.stage``.

``rl.epochs_per_stage`` and ``rl.val_every`` / ``rl.val_pick`` (``engines.rl_schedule``) set how
long a stage trains and which step's model it keeps; verl validates on ``data/val.parquet`` (the dev
turns) and, to keep the best step, merges that step's checkpoint instead of the last one.
"""

from __future__ import annotations

from pathlib import Path

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.config import ConfigView
from mtsql.base.errors import UsageError
from mtsql.core.data.records import read_turns
from mtsql.engines import backends
from mtsql.engines.models.registry import stage_model
from mtsql.engines.rl_schedule import epochs_note

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


def train_stage_of(engine: str):
    """The engine's ``train_stage(cfg, turns, *, base_model, out_dir, metrics_path, stage)``: the one entry
    point of each RL engine (imported on use: torch, verl)."""
    if engine == "local":
        from mtsql.engines.local_grpo.trainer import train_stage
    elif engine == "verl":
        from mtsql.engines.verl.stage import train_stage
    else:
        raise UsageError(f"rl.engine={engine}: resolve 'auto' with pick_engine before running the stage")
    return train_stage


def run(ctx: StageContext, cfg: ConfigView, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> dict:
    turns = read_turns(curriculum.path / f"stage-{stage}.jsonl")
    if not turns:
        raise UsageError(f"rl stage {stage}: curriculum stage {stage} of {curriculum.path} has no items")
    train_stage = train_stage_of(cfg.rl.engine)
    base = stage_model(cfg.model.name, model)
    return {"engine": cfg.rl.engine, "items": len(turns),
            **train_stage(cfg, turns, base_model=base, out_dir=ctx.out, metrics_path=ctx.out / "metrics.jsonl",
                          stage=stage)}


def plan(cfg: ConfigView, out: Path, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> str:
    """What this stage would run (``--dry-run``): the verl files and commands, or the local engine's steps."""
    base = stage_model(cfg.model.name, model, resolve=False)
    if cfg.rl.engine == "local":
        weights = f"the last {cfg.rl.trainable_layers} decoder layers of " if cfg.rl.trainable_layers else ""
        return (f"# local GRPO in this process: {epochs_note(cfg.rl)} of {cfg.rl.batch_size} questions "
                f"x {cfg.rl.n} samples, training {weights}{base}; curriculum stage {stage} of {curriculum.path}\n")
    from mtsql.engines.verl.stage import plan_stage

    stage_file = Path(curriculum.path) / f"stage-{stage}.jsonl"
    rows = len(read_turns(stage_file)) if stage_file.exists() else None  # unknown before the curriculum runs
    items = f"{rows} items" if rows is not None else f"the items of curriculum stage {stage} ({curriculum.path})"
    return (f"# curriculum stage {stage}: {items}; the RL parquet is written by the stage itself\n"
            + plan_stage(cfg, base_model=base, out_dir=out, stage=stage, rows=rows))
