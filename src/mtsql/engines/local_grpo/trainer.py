"""The local GRPO engine's training loop (CPU or one GPU, no Ray): rollouts with the model being
trained, rewards, one GRPO update (:mod:`mtsql.engines.local_grpo.update`) per step, validation and saving."""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from mtsql.base.progress import progress_bar
from mtsql.base.trackers import Trackers
from mtsql.core.data.records import Turn
from mtsql.core.results import RlStageResult, TrainingStep
from mtsql.core.trajectories import episode_behaviour, scorer, step_behaviour
from mtsql.engines.backends import training_backend
from mtsql.engines.local_grpo.update import (
    Episode,
    drop_long_prompts,
    grpo_settings,
    grpo_update,
    signal_share,
)
from mtsql.engines.local_grpo.weights import load_model, save_model, trainable
from mtsql.engines.models.settings import ModelConfig, resolve_dtype
from mtsql.engines.rl_engines import step_metrics
from mtsql.engines.rl_schedule import LocalValidation, local_rollouts, stage_steps
from mtsql.engines.rollout import SERVER_LOG, derive_seed
from mtsql.engines.views import RlView


def train_curriculum_stage(
    cfg: RlView,
    turns: list[Turn],
    *,
    base_model: str,
    out_dir: Path,
    metrics_path: Path,
    stage: int = 1,
    trackers: Trackers | None = None,
) -> RlStageResult:
    """GRPO on ``turns`` for ``stage_steps`` steps (``rl.steps_per_stage``, or ``rl.epochs_per_stage``
    epochs) from ``base_model``; saves ``out_dir/model``: the last step's weights, or with
    ``rl.val_pick: best`` those of the best step validated every ``rl.val_every`` steps (``rl_schedule``).

    Each step draws ``rl.batch_size`` questions (a seeded shuffle, cycling), samples ``rl.n``
    trajectories of each with the current weights at ``rl.temperature`` (``rl_schedule.local_rollouts``:
    within ``rl.max_message_tokens`` a message and ``rl.max_response_len`` a response, as verl's rollouts),
    scores them with the configured reward family and applies one GRPO update (``rl.mini_batch_size``
    questions per optimizer step, ``rl.micro_batch_size_per_gpu`` episodes per pass). Within a step, the
    backend's prefix cache spares recomputing each conversation's earlier messages; every update clears it.
    One ``TrainingStep`` line per step goes to ``metrics_path``, which starts empty (this engine keeps no
    checkpoint: a rerun starts again at step 1) and to ``trackers`` (``rl_engines.step_metrics``); a
    progress bar shows the step and its mean reward.
    """

    torch.manual_seed(cfg.seed)
    dtype = train_dtype(cfg.model)
    backend = training_backend(cfg, base_model, dtype=dtype, log_path=Path(out_dir) / SERVER_LOG)
    try:
        model = trained_model(cfg, backend, base_model, dtype, Path(out_dir) / "rollout-weights")
        return _train(
            cfg,
            turns,
            backend,
            model,
            out_dir=Path(out_dir),
            metrics_path=metrics_path,
            stage=stage,
            trackers=trackers or Trackers.off(),
        )
    finally:
        backend.close()


def train_dtype(model: ModelConfig) -> str:
    """The dtype the local engine trains in. ``auto`` is float32 on every device, unlike the backends'
    bfloat16 on CUDA: a GRPO step at ``rl.lr`` ~1e-6 moves a weight by far less than bfloat16 can tell apart
    (8 bits of mantissa), so in bfloat16 most updates would round away."""
    return resolve_dtype(model.dtype, model.device, auto="float32")


def trained_model(cfg, backend, base_model: str, dtype: str, folder: Path):
    """The model that trains (``rl.lora_rank``, ``rl.local.trainable_layers``): the backend's own when it
    generates in this process (one model for both; the backend then generates with its trainable
    form), else a copy of the same weights loaded here (beside a server, e.g. a managed vLLM)."""
    shared = backend.in_process_model()
    if shared is None:
        return trainable(load_model(base_model, dtype, cfg.model.device), cfg.rl)
    model = trainable(shared, cfg.rl)
    backend.load_weights(model, folder)
    return model


def _train(
    cfg, turns, backend, model, *, out_dir: Path, metrics_path, stage: int, trackers: Trackers
) -> RlStageResult:
    ref_model = copy.deepcopy(model).eval() if cfg.rl.kl_coef > 0 else None
    pad_id = backend.tokenizer.pad_token_id
    pad_id = min(backend.end_of_turn_ids) if pad_id is None else pad_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.rl.lr, weight_decay=0.0)
    root = cfg.data_root
    engine = local_rollouts(cfg, backend, temperature=cfg.rl.temperature)
    settings = grpo_settings(cfg.rl)
    steps = stage_steps(cfg.rl, len(turns))
    validation = LocalValidation(cfg, backend, stage=stage, last_step=steps) if cfg.rl.val_every else None
    order: list = []
    rng = random.Random(derive_seed(cfg.seed, "rl", stage))
    history: list[TrainingStep] = []
    Path(metrics_path).write_text("")
    columns = (
        TextColumn(f"rl stage {stage}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}"),
        TimeElapsedColumn(),
    )
    with progress_bar(*columns) as progress:
        task = progress.add_task("rl", total=steps, reward="-")
        for step in range(1, steps + 1):
            started = time.perf_counter()
            if len(order) < cfg.rl.batch_size:
                order += rng.sample(turns, len(turns))
            batch, order = order[: cfg.rl.batch_size], order[cfg.rl.batch_size :]
            rows = engine.run(
                batch,
                n=cfg.rl.n,
                seed=derive_seed(cfg.seed, stage, step),
                progress=False,
                score=scorer(cfg, root),
            )
            episodes, over = drop_long_prompts(
                [
                    Episode(r.uid, r.prompt_ids, r.response_ids, r.response_mask, r.reward["score"])
                    for r in rows
                    if r.response_ids
                ],
                max_prompt_len=cfg.rl.max_prompt_len,
            )
            stats = grpo_update(model, optimizer, episodes, settings, pad_id=pad_id, ref_model=ref_model)
            if step < steps or validation:  # the next rollouts (or the validation) sample the updated weights
                backend.load_weights(model, out_dir / "rollout-weights")
            rewards = [r.reward["score"] for r in rows]
            line = TrainingStep(
                stage=stage,
                step=step,
                reward_mean=float(np.mean(rewards)),
                reward_std=float(np.std(rewards)),
                **step_behaviour(
                    [episode_behaviour(r.trajectory) for r in rows], [r.response_tokens for r in rows]
                ),
                ex=float(np.mean([r.execution or 0 for r in rows])),
                em=float(np.mean([r.exact or 0 for r in rows])),
                protocol_valid=float(np.mean([r.protocol_valid for r in rows])),
                groups_with_signal=signal_share(episodes),
                **stats,
                **(validation.after_step(step, model) if validation else {}),
                extra={
                    "episodes_trained": len(episodes),
                    **over,
                    "wall_s": round(time.perf_counter() - started, 2),
                },
            )
            history.append(line)
            with open(metrics_path, "a") as handle:
                handle.write(json.dumps(line.to_dict()) + "\n")
            trackers.log_metrics(step, step_metrics(line))
            progress.update(task, completed=step, reward=f"{line.reward_mean:.3f}")
    picked = validation.finish(model) if validation else steps
    save_model(model, backend.tokenizer, out_dir / "model")
    shutil.rmtree(out_dir / "rollout-weights", ignore_errors=True)
    return RlStageResult.of_steps(history, engine="local", items=len(turns), picked_step=picked)
