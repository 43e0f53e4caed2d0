"""GRPO update for the local RL engine (CPU or one GPU, no Ray), built on verl's ``core_algos``.

An *episode* is one finished multi-turn trajectory in token form: the prompt, then everything after
it (model tokens and tool observations interleaved) with ``response_mask`` 1 on model tokens only,
its scalar reward, and the group (the question) it was sampled for. The update follows verl's
recipe: group-normalised outcome advantages (``compute_grpo_outcome_advantage``), the clipped
policy loss (``get_policy_loss_fn("vanilla")``), optional low-variance KL to a frozen reference
(``kl_penalty``), token-mean aggregation (``agg_loss``); observation tokens never enter the loss.

Memory follows the micro-batch, not the number of episodes: each optimizer step (a mini-batch)
runs its episodes ``micro_batch`` at a time, each micro-batch padded to its own length, with one
backward per micro-batch while gradients accumulate. A micro-batch's loss is its token sum over the
whole mini-batch's token count (verl's ``batch_num_tokens``), so the accumulated gradient is the
mini-batch's token-mean gradient. Logits are computed only at the positions that predict a model
token (``logits_to_keep``): none for the prompt, observations or padding. With ``rl.freeze_layers``
only the model's last decoder layers train, so the backward pass stops at the first of them.

Length limits, per episode (``fit_lengths``): a prompt longer than ``rl.max_prompt_len`` tokens
leaves the episode out of the update (verl's RL parquet drops such prompts before training); a
response (everything after the prompt) longer than ``rl.max_response_len`` is cut to its first
``rl.max_response_len`` tokens, which alone get gradient, and keeps the reward of its whole
trajectory (the local rollout is not stopped at the limit, as verl's agent loop is). Both are
counted in the step metrics.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from mtsql.backends import make_backend, server_options
from mtsql.backends.hf import HFBackend, resolve_dtype
from mtsql.backends.vllm import VLLMBackend
from mtsql.errors import UsageError
from mtsql.integrations.rl_schedule import LocalValidation, stage_steps
from mtsql.progress import progress_bar
from mtsql.rollout import SERVER_LOG, RolloutEngine, derive_seed
from mtsql.trajectories import episode_behaviour, scorer, step_behaviour

LOSS_AGG_MODE = "token-mean"
STATS = ("pg_loss", "kl", "grad_norm", "clipfrac")


@dataclass
class Episode:
    group: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    reward: float


@dataclass(frozen=True)
class GrpoSettings:
    clip_ratio: float = 0.2
    kl_coef: float = 0.0
    kl_type: str = "low_var_kl"
    mini_batches: int = 1  # optimizer updates per rollout batch
    micro_batch: int = 1  # episodes per forward and backward pass
    max_grad_norm: float = 1.0


def grpo_settings(rl) -> GrpoSettings:
    """The update settings of an ``RlConfig``: ``batch_size / mini_batch_size`` optimizer steps per
    batch, ``micro_batch_size_per_gpu`` episodes per pass."""
    return GrpoSettings(clip_ratio=rl.clip_ratio, kl_coef=rl.kl_coef,
                        mini_batches=max(1, rl.batch_size // max(1, rl.mini_batch_size)),
                        micro_batch=max(1, rl.micro_batch_size_per_gpu))


def fit_lengths(episodes: list[Episode], *, max_prompt_len: int, max_response_len: int) -> tuple[list[Episode], dict]:
    """The episodes within the length limits (see the module docstring) and how many were not:
    ``{"episodes_over_prompt_len": dropped, "episodes_over_response_len": cut}``."""
    kept, dropped, cut = [], 0, 0
    for ep in episodes:
        if len(ep.prompt_ids) > max_prompt_len:
            dropped += 1
            continue
        if len(ep.response_ids) > max_response_len:
            cut += 1
            ep = dataclasses.replace(ep, response_ids=ep.response_ids[:max_response_len],
                                     response_mask=ep.response_mask[:max_response_len])
        kept.append(ep)
    return kept, {"episodes_over_prompt_len": dropped, "episodes_over_response_len": cut}


def _actor_config(settings: GrpoSettings, batch_tokens: int):
    from omegaconf import OmegaConf

    return OmegaConf.create({"clip_ratio": settings.clip_ratio, "clip_ratio_low": None, "clip_ratio_high": None,
                             "clip_ratio_c": 3.0, "global_batch_info": {"batch_num_tokens": batch_tokens}})


def pad_batch(episodes: list[Episode], pad_id: int, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Left-pad prompts and right-pad responses so every response starts at the same column."""
    p_len = max(len(e.prompt_ids) for e in episodes)
    r_len = max(len(e.response_ids) for e in episodes)
    ids = torch.full((len(episodes), p_len + r_len), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros((len(episodes), r_len), dtype=torch.float32)
    for row, ep in enumerate(episodes):
        p, r = len(ep.prompt_ids), len(ep.response_ids)
        ids[row, p_len - p : p_len] = torch.tensor(ep.prompt_ids)
        ids[row, p_len : p_len + r] = torch.tensor(ep.response_ids)
        attention[row, p_len - p : p_len + r] = 1
        mask[row, :r] = torch.tensor(ep.response_mask, dtype=torch.float32)
    return {"input_ids": ids.to(device), "attention_mask": attention.to(device), "response_mask": mask.to(device),
            "prompt_len": p_len}


def response_logprobs(model, batch: dict) -> torch.Tensor:
    """Log-probabilities of the model tokens of a padded batch (batch x response length, 0 where
    ``response_mask`` is 0), from logits at the positions predicting a model token of some row only."""
    from verl.utils.torch_functional import logprobs_from_logits

    p_len, ids, attention = batch["prompt_len"], batch["input_ids"], batch["attention_mask"]
    mask = batch["response_mask"]
    columns = mask.any(0).nonzero().squeeze(-1)  # response columns with a model token in some row
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                   logits_to_keep=columns + p_len - 1).logits  # the logits at t predict the token at t + 1
    picked = logprobs_from_logits(logits.float(), ids[:, p_len + columns]) * mask[:, columns]
    return torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device).index_copy(1, columns, picked)


def episode_advantages(episodes: list[Episode]) -> torch.Tensor:
    """verl's GRPO advantage of each episode: its reward normalised within its group."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = torch.tensor([[ep.reward] for ep in episodes], dtype=torch.float32)
    index = np.array([ep.group for ep in episodes], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards), index)
    return adv[:, 0]


def signal_share(episodes: list[Episode]) -> float:
    """The share of groups whose rewards differ: a group of equal rewards has zero advantage and
    gives no policy gradient."""
    groups: dict[str, set[float]] = {}
    for ep in episodes:
        groups.setdefault(ep.group, set()).add(ep.reward)
    return sum(len(rewards) > 1 for rewards in groups.values()) / len(groups) if groups else 0.0


def grpo_update(model, optimizer, episodes: list[Episode], settings: GrpoSettings, *, pad_id: int,
                ref_model=None) -> dict[str, float]:
    """One rollout batch of GRPO: advantages, then ``mini_batches`` optimizer steps, each
    accumulating gradients over micro-batches of ``micro_batch`` episodes. Returns the mean over
    steps of the token-mean policy loss, KL, gradient norm and clip fraction."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty

    if not episodes:
        return dict.fromkeys(STATS, 0.0)
    policy_loss = get_policy_loss_fn("vanilla")
    device = next(model.parameters()).device
    adv = episode_advantages(episodes).to(device)
    size = max(1, -(-len(episodes) // settings.mini_batches))
    steps = [list(range(start, min(start + size, len(episodes)))) for start in range(0, len(episodes), size)]

    def micro_batches(step: list[int]) -> list[list[int]]:
        parts = [step[i : i + settings.micro_batch] for i in range(0, len(step), settings.micro_batch)]
        return [part for part in parts if any(any(episodes[i].response_mask) for i in part)]

    def batch_of(part: list[int]) -> dict:
        return pad_batch([episodes[i] for i in part], pad_id, device)

    model.eval()
    with torch.no_grad():  # before any optimizer step: with one step, the new log-probs detached are the old
        olds = [[None] * len(micro_batches(step)) if len(steps) == 1 else
                [response_logprobs(model, batch_of(part)) for part in micro_batches(step)] for step in steps]
        refs = [[response_logprobs(ref_model, batch_of(part)) if ref_model is not None and settings.kl_coef > 0
                 else None for part in micro_batches(step)] for step in steps]
    stats: dict[str, list[float]] = {key: [] for key in STATS}
    model.train()
    for step, step_olds, step_refs in zip(steps, olds, refs, strict=True):
        tokens = sum(sum(episodes[i].response_mask) for i in step)
        if not tokens:
            continue
        config = _actor_config(settings, tokens)
        optimizer.zero_grad(set_to_none=True)
        totals = dict.fromkeys(("pg_loss", "kl", "clipfrac"), 0.0)
        for part, old, ref in zip(micro_batches(step), step_olds, step_refs, strict=True):
            batch = batch_of(part)
            mask = batch["response_mask"]
            new = response_logprobs(model, batch)
            loss, metrics = policy_loss(old_log_prob=new.detach() if old is None else old, log_prob=new,
                                        advantages=adv[part].unsqueeze(-1) * mask, response_mask=mask,
                                        loss_agg_mode=LOSS_AGG_MODE, config=config)
            totals["pg_loss"] += float(loss.detach())
            totals["clipfrac"] += metrics["actor/pg_clipfrac"] * float(mask.sum()) / tokens
            if ref is not None:
                kl = agg_loss(loss_mat=kl_penalty(new, ref, settings.kl_type), loss_mask=mask,
                              loss_agg_mode=LOSS_AGG_MODE, batch_num_tokens=tokens)
                loss = loss + settings.kl_coef * kl
                totals["kl"] += float(kl.detach())
            loss.backward()  # frees this micro-batch's graph; gradients add up in .grad
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        for key, value in {**totals, "grad_norm": float(grad_norm)}.items():
            stats[key].append(value)
    model.eval()
    return {key: float(np.mean(values)) if values else 0.0 for key, values in stats.items()}


# ---------------------------------------------------------------------------------------------
# The training loop: rollouts with the model being trained, rewards, one GRPO update per step.


def train_stage(cfg, turns, *, base_model: str, out_dir, metrics_path, stage: int = 1) -> dict:
    """GRPO on ``turns`` for ``stage_steps`` steps (``rl.steps_per_stage``, or ``rl.epochs_per_stage``
    epochs) from ``base_model``; saves ``out_dir/model``: the last step's weights, or with
    ``rl.val_pick: best`` those of the best step validated every ``rl.val_every`` steps (``rl_schedule``).

    Each step draws ``rl.batch_size`` questions (a seeded shuffle, cycling), samples ``rl.n``
    trajectories of each with the current weights at ``rl.temperature``, scores them with the
    configured reward family and applies one GRPO update (``rl.mini_batch_size`` questions per
    optimizer step, ``rl.micro_batch_size_per_gpu`` episodes per pass). Within a step, the backend's
    prefix cache spares recomputing each conversation's earlier messages; every update clears it.
    One JSON line per step goes to ``metrics_path``, which starts empty (this engine keeps no
    checkpoint: a rerun starts again at step 1); a progress bar shows the step and its mean reward.
    """

    torch.manual_seed(cfg.seed)
    dtype = "float32" if cfg.model.dtype == "auto" else cfg.model.dtype  # trained weights stay float32
    backend, model = rollout_backend(cfg, base_model, dtype, Path(out_dir) / SERVER_LOG)
    try:
        return _train(cfg, turns, backend, model, out_dir=Path(out_dir), metrics_path=metrics_path, stage=stage)
    finally:
        if isinstance(backend, VLLMBackend):
            backend.close()


def rollout_backend(cfg, base_model: str, dtype: str, log_path: Path):
    """The backend that rolls out and the model that trains (``rl.rollout_backend``): one HF model
    for both, or a managed vLLM server beside a trainable HF copy of the same weights."""
    if cfg.rl.rollout_backend == "hf":
        backend = HFBackend(base_model, dtype=dtype, device=cfg.model.device)
        backend.model = trainable(backend.model, cfg.rl)
        return backend, backend.model
    if cfg.rl.lora_rank:
        raise UsageError("rl.rollout_backend=vllm trains full weights or the last rl.freeze_layers layers; "
                         "with rl.lora_rank set rl.rollout_backend=hf")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=resolve_dtype(dtype, cfg.model.device))
    model = trainable(model.to(cfg.model.device).eval(), cfg.rl)
    backend = make_backend("vllm", base_model, log_path=log_path, **server_options(cfg),
                           gpu_memory_utilization=cfg.rl.gpu_memory_utilization)  # CUDA: beside the trained model
    return backend, model


def _train(cfg, turns, backend, model, *, out_dir: Path, metrics_path, stage: int) -> dict:
    ref_model = copy.deepcopy(model).eval() if cfg.rl.kl_coef > 0 else None
    pad_id = backend.tokenizer.pad_token_id
    pad_id = min(backend.end_of_turn_ids) if pad_id is None else pad_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.rl.lr, weight_decay=0.0)
    root = cfg.data_root
    engine = RolloutEngine.from_config(cfg, data_root=root, policy="model", temperature=cfg.rl.temperature,
                                       backend=backend)
    settings = grpo_settings(cfg.rl)
    steps = stage_steps(cfg.rl, len(turns))
    validation = LocalValidation(cfg, backend, stage=stage, last_step=steps) if cfg.rl.val_every else None
    order: list = []
    rng = random.Random(derive_seed(cfg.seed, "rl", stage))
    history = []
    Path(metrics_path).write_text("")
    columns = (TextColumn(f"rl stage {stage}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("reward {task.fields[reward]}"), TimeElapsedColumn())
    with progress_bar(*columns) as progress:
        task = progress.add_task("rl", total=steps, reward="-")
        for step in range(1, steps + 1):
            started = time.perf_counter()
            if len(order) < cfg.rl.batch_size:
                order += rng.sample(turns, len(turns))
            batch, order = order[: cfg.rl.batch_size], order[cfg.rl.batch_size :]
            rows = engine.run(batch, n=cfg.rl.n, seed=derive_seed(cfg.seed, stage, step), progress=False,
                              score=scorer(cfg, root))
            episodes, over = fit_lengths(
                [Episode(r.uid, r.prompt_ids, r.response_ids, r.response_mask, r.reward["score"])
                 for r in rows if r.response_ids], max_prompt_len=cfg.rl.max_prompt_len,
                max_response_len=cfg.rl.max_response_len)
            stats = grpo_update(model, optimizer, episodes, settings, pad_id=pad_id, ref_model=ref_model)
            if step < steps or validation:  # the next rollouts (or the validation) sample the updated weights
                refresh(backend, model, out_dir / "rollout-weights")
            rewards = [r.reward["score"] for r in rows]
            line = {
                "stage": stage, "step": step, "reward_mean": float(np.mean(rewards)), "reward_std": float(np.std(rewards)),
                **step_behaviour([episode_behaviour(r.trajectory) for r in rows], [r.response_tokens for r in rows]),
                "ex": float(np.mean([r.execution or 0 for r in rows])), "em": float(np.mean([r.exact or 0 for r in rows])),
                "protocol_valid": float(np.mean([r.protocol_valid for r in rows])),
                "groups_with_signal": signal_share(episodes), "episodes_trained": len(episodes), **over,
                **stats, "wall_s": round(time.perf_counter() - started, 2),
            }
            if validation:
                line |= validation.after_step(step, model)
            history.append(line)
            with open(metrics_path, "a") as handle:
                handle.write(json.dumps(line) + "\n")
            progress.update(task, completed=step, reward=f"{line['reward_mean']:.3f}")
    picked = validation.finish(model) if validation else steps
    save_model(model, backend.tokenizer, out_dir / "model")
    shutil.rmtree(out_dir / "rollout-weights", ignore_errors=True)
    first, last = history[0], history[-1]
    return {"steps": len(history), "reward_first": first["reward_mean"], "reward_last": last["reward_mean"],
            "ex_last": last["ex"], "response_length_last": last["response_length"],
            "steps_without_signal": sum(line["groups_with_signal"] == 0 for line in history), "picked_step": picked,
            "val_reward_picked": history[picked - 1].get("val_reward_mean")}


def refresh(backend, model, folder: Path) -> None:
    """Make ``backend`` sample from ``model``'s current weights: the HF backend shares the model and
    drops its kept keys/values; a vLLM server restarts on the weights saved to ``folder``."""
    if isinstance(backend, HFBackend):
        backend.clear_prefix_cache()  # its keys/values were computed with the weights before this update
        return
    save_model(model, backend.tokenizer, folder)
    backend.reload(folder)


def trainable(model, rl):
    """``model`` set to train what ``rl`` asks: LoRA adapters (``rl.lora_rank``), only the last
    ``rl.freeze_layers`` decoder layers, or (both 0) every weight."""
    if rl.lora_rank > 0 and rl.freeze_layers > 0:
        raise UsageError(f"rl.lora_rank={rl.lora_rank} and rl.freeze_layers={rl.freeze_layers}: "
                         "choose one way to train fewer weights and set the other to 0")
    if rl.lora_rank > 0:
        return with_lora(model, rl)
    if rl.freeze_layers > 0:
        train_last_layers(model, rl.freeze_layers)
    return model


def with_lora(model, rl):
    """``model`` wrapped with LoRA adapters of rank ``rl.lora_rank`` and scale ``rl.lora_alpha`` on
    every linear layer (what verl's ``target_modules=all-linear`` means)."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=rl.lora_rank, lora_alpha=rl.lora_alpha, target_modules="all-linear",
                                            task_type="CAUSAL_LM"))


def train_last_layers(model, count: int) -> None:
    """Only the last ``count`` decoder layers of ``model`` train; the embeddings (and a tied output
    projection), the layers below and the final norm stay fixed, as with LLaMA-Factory's
    ``finetuning_type: freeze``. The backward pass then stops at the first trainable layer."""
    layers = getattr(getattr(model, "base_model", model), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise UsageError(f"rl.freeze_layers={count}: {type(model).__name__} keeps no decoder layers at "
                         "base_model.layers; set rl.freeze_layers: 0 (or rl.lora_rank) for this model")
    if not 1 <= count <= len(layers):
        raise UsageError(f"rl.freeze_layers={count}: the model has {len(layers)} decoder layers; "
                         f"train 1 to {len(layers)} of them, or set 0 to train every weight")
    model.requires_grad_(False)
    for layer in layers[-count:]:
        layer.requires_grad_(True)


def save_model(model, tokenizer, folder) -> None:
    """An HF folder (LoRA merged into the weights) that every other stage can load."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
