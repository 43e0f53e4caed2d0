"""The local GRPO engine's side of the RL contract (``engines.rl_engines``); the loop is ``trainer``."""

from __future__ import annotations

from pathlib import Path

from mtsql.base.config import hashed_settings
from mtsql.base.trackers import Trackers
from mtsql.core.data.records import Turn
from mtsql.core.results import RlStageResult
from mtsql.engines import backends
from mtsql.engines.rl_schedule import epochs_note
from mtsql.engines.views import RlView


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
    """GRPO in this process (``trainer.train_curriculum_stage``; imports torch)."""
    from mtsql.engines.local_grpo.trainer import train_curriculum_stage as train

    return train(
        cfg,
        turns,
        base_model=base_model,
        out_dir=out_dir,
        metrics_path=metrics_path,
        stage=stage,
        trackers=trackers,
    )


def plan_curriculum_stage(
    cfg: RlView, *, base_model: str, out_dir: Path, stage: int, rows: int | None
) -> str:
    """One comment line: the steps, the batch and which weights train."""
    layers = cfg.rl.local.trainable_layers
    weights = f"the last {layers} decoder layers of " if layers else ""
    return (
        f"# local GRPO in this process: {epochs_note(cfg.rl)} of {cfg.rl.batch_size} questions "
        f"x {cfg.rl.n} samples, training {weights}{base_model}\n"
    )


def identity(cfg: RlView) -> dict:
    """The managed vLLM server that rolls out with ``rl.local.rollout_backend: vllm``; {} with hf."""
    if cfg.rl.local.rollout_backend == "vllm":
        return backends.engine_identity(cfg.replace(sample={"backend": "vllm"}))
    return {}


def sample_settings(cfg: RlView) -> dict:
    """The managed vLLM server's settings (``sample.vllm``) with ``rl.local.rollout_backend: vllm``; nothing
    else of ``sample``: the rollouts sample at ``rl.temperature``, bounded by ``rl_engines.RolloutBounds``."""
    if cfg.rl.local.rollout_backend == "vllm":
        return {"vllm": hashed_settings(cfg.sample.vllm)}
    return {}
