"""`mtsql rl`: multi-turn GRPO on one curriculum stage, with verl (Ray; GPUs, or the CPUs) or the local
engine.

Both engines sample with the shared agent environment, score with the configured reward family
(``reward.family``) and leave the trained model in ``model/``. The local engine (CPU or one GPU,
no Ray) logs one line per step to ``metrics.jsonl``; verl runs ``main_ppo`` then the model merger
as subprocesses (their exact commands are in ``log.txt`` and, with ``--dry-run``, printed).

Reads: ``stage-<stage>.jsonl`` of the ``curriculum`` input; the ``model`` input to start from (a
training artifact; none: the base model); config sections ``data``, ``sql``, ``env``, ``reward``,
``model``, ``sample`` (only what the selected engine's rollouts read of it: the managed vLLM server's
settings when the local engine rolls out with vLLM, nothing under verl), ``rl`` (with ``rl.<engine>``, the
engine's own settings; both engines bound a rollout by ``rl.max_message_tokens`` and ``rl.max_response_len``),
``seed``. ``rl.engine`` must be resolved (``engines.rl_engines.pick_engine``)
before the stage runs.
Writes: ``model/``, ``metrics.jsonl`` (one ``results.TrainingStep`` line per step); verl: ``data/`` (the
RL parquet) and ``verl/``.
Returns: the engine's ``results.RlStageResult`` (the same figures for both engines).
Logs (``trackers.*``): each step as ``rl/<field>``, the same names for both engines
(``rl_engines.step_metrics``).
The stage calls the engine through one contract (``engines.rl_engines``) and knows neither:
``mtsql.engines.local_grpo.engine`` and ``mtsql.engines.verl.engine``.

``rl.epochs_per_stage`` and ``rl.val_every`` / ``rl.val_pick`` (``engines.rl_schedule``) set how
long a stage trains and which step's model it keeps; verl validates on ``data/val.parquet`` (the dev
turns) and, to keep the best step, merges that step's checkpoint instead of the last one.
"""

from __future__ import annotations

from pathlib import Path

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.errors import UsageError
from mtsql.base.paths import database_path
from mtsql.core.data.records import read_turns
from mtsql.core.sql.schema import check_databases
from mtsql.engines.models.registry import stage_model
from mtsql.engines.rl_engines import rl_engine
from mtsql.engines.views import RlView

VIEW = RlView
INPUTS = {"curriculum": "curriculum", "model": None}
check = None  # hooks this stage has not (app/runner.Stage)


def hashed(cfg: RlView) -> dict:
    """What the fingerprint covers: the declared sections, of ``sample`` only what the selected engine reads
    (``sample_settings``; RL samples rl.n times at rl.temperature within its own bounds, and validates
    greedily)."""
    return cfg.hashed([name for name in VIEW.sections() if name != "sample"]) | {
        "sample": rl_engine(cfg.rl.engine).sample_settings(cfg)
    }


def engine_identity(cfg: RlView) -> dict:
    """What generates the engine's rollouts beyond the config."""
    return rl_engine(cfg.rl.engine).identity(cfg)


def run(
    ctx: StageContext, cfg: RlView, *, curriculum: Artifact, stage: int, model: Artifact | None = None
) -> dict:
    turns = read_turns(curriculum.path / f"stage-{stage}.jsonl")
    if not turns:
        raise UsageError(f"rl stage {stage}: curriculum stage {stage} of {curriculum.path} has no items")
    check_databases(
        database_path(db, cfg.data_root) for db in sorted({t.db_id for t in turns})
    )  # named, not 0
    engine = rl_engine(cfg.rl.engine)
    base = stage_model(cfg.model.name, model)
    result = engine.train_curriculum_stage(
        cfg,
        turns,
        base_model=base,
        out_dir=ctx.out,
        metrics_path=ctx.out / "metrics.jsonl",
        stage=stage,
        trackers=ctx.trackers,
    )
    return result.to_dict()


def plan(cfg: RlView, out: Path, *, curriculum: Artifact, stage: int, model: Artifact | None = None) -> str:
    """What this stage would run (``--dry-run``), as its engine plans it."""
    stage_file = Path(curriculum.path) / f"stage-{stage}.jsonl"
    rows = len(read_turns(stage_file)) if stage_file.exists() else None  # unknown before the curriculum runs
    return f"# curriculum stage {stage} of {curriculum.path}\n" + rl_engine(
        cfg.rl.engine
    ).plan_curriculum_stage(
        cfg, base_model=stage_model(cfg.model.name, model, resolve=False), out_dir=out, stage=stage, rows=rows
    )
