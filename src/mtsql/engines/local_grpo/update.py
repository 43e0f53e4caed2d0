"""One GRPO update of the local RL engine, built on verl's ``core_algos``.

An *episode* is one finished multi-turn trajectory in token form: the prompt, then everything after
it (model tokens and tool observations interleaved) with ``response_mask`` 1 on model tokens only,
its scalar reward, and the group (the question) it was sampled for. The update follows verl's
recipe: group-normalised outcome advantages (``compute_grpo_outcome_advantage``), the clipped
policy loss (``get_policy_loss_fn("vanilla")``), optional low-variance KL to a frozen reference
(``kl_penalty``), token-mean aggregation (``agg_loss``); observation tokens never enter the loss.
As verl's trainer does, every log-probability (old, reference, new) is of the logits divided by the
rollout's temperature (``rl.temperature``): the policy the episodes were sampled from.

Memory follows the micro-batch, not the number of episodes: each optimizer step (a mini-batch)
runs its episodes ``micro_batch`` at a time, each micro-batch padded to its own length, with one
backward per micro-batch while gradients accumulate. A micro-batch's loss is its token sum over the
whole mini-batch's token count (verl's ``batch_num_tokens``), so the accumulated gradient is the
mini-batch's token-mean gradient. Logits are computed only at the positions that predict a model
token (``logits_to_keep``): none for the prompt, observations or padding. When only the model's
last decoder layers train (:mod:`mtsql.engines.local_grpo.weights`), the backward pass stops at the first
of them.

Length limits, per episode: a prompt longer than ``rl.max_prompt_len`` tokens leaves the episode out of
the update (``drop_long_prompts``; verl's RL parquet drops such prompts before training), counted in the
step metrics. A response (everything after the prompt) never exceeds ``rl.max_response_len``: the
rollout stops there, as verl's agent loop does (``rl_engines.RolloutBounds``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mtsql.engines.rl_engines import groups_with_signal

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
    temperature: float = 1.0  # the rollout's: log-probs of the tempered policy, as verl's


def grpo_settings(rl) -> GrpoSettings:
    """The update settings of an ``RlConfig``: ``batch_size / mini_batch_size`` optimizer steps per
    batch, ``micro_batch_size_per_gpu`` episodes per pass, the rollout's temperature."""
    return GrpoSettings(
        clip_ratio=rl.clip_ratio,
        kl_coef=rl.kl_coef,
        temperature=rl.temperature,
        mini_batches=max(1, rl.batch_size // max(1, rl.mini_batch_size)),
        micro_batch=max(1, rl.micro_batch_size_per_gpu),
    )


def drop_long_prompts(episodes: list[Episode], *, max_prompt_len: int) -> tuple[list[Episode], dict]:
    """The episodes whose prompt fits ``max_prompt_len`` (see the module docstring) and how many did not:
    ``{"episodes_over_prompt_len": dropped}``."""
    kept = [ep for ep in episodes if len(ep.prompt_ids) <= max_prompt_len]
    return kept, {"episodes_over_prompt_len": len(episodes) - len(kept)}


def _actor_config(settings: GrpoSettings, batch_tokens: int):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "clip_ratio": settings.clip_ratio,
            "clip_ratio_low": None,
            "clip_ratio_high": None,
            "clip_ratio_c": 3.0,
            "global_batch_info": {"batch_num_tokens": batch_tokens},
        }
    )


def pad_batch(
    episodes: list[Episode], pad_id: int, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
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
    return {
        "input_ids": ids.to(device),
        "attention_mask": attention.to(device),
        "response_mask": mask.to(device),
        "prompt_len": p_len,
    }


def response_logprobs(model, batch: dict, temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities of the model tokens of a padded batch (batch x response length, 0 where
    ``response_mask`` is 0) under the logits divided by ``temperature``, from logits at the positions
    predicting a model token of some row only."""
    from verl.utils.torch_functional import logprobs_from_logits

    p_len, ids, attention = batch["prompt_len"], batch["input_ids"], batch["attention_mask"]
    mask = batch["response_mask"]
    columns = mask.any(0).nonzero().squeeze(-1)  # response columns with a model token in some row
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=columns + p_len - 1
    ).logits  # the logits at t predict the token at t + 1
    picked = logprobs_from_logits(logits.float() / temperature, ids[:, p_len + columns]) * mask[:, columns]
    return torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device).index_copy(1, columns, picked)


def episode_advantages(episodes: list[Episode]) -> torch.Tensor:
    """verl's GRPO advantage of each episode: its reward normalised within its group."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = torch.tensor([[ep.reward] for ep in episodes], dtype=torch.float32)
    index = np.array([ep.group for ep in episodes], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards), index)
    return adv[:, 0]


def signal_share(episodes: list[Episode]) -> float:
    """The share of the episodes' groups whose rewards differ (``rl_engines.groups_with_signal``)."""
    return groups_with_signal((ep.group, ep.reward) for ep in episodes)


def grpo_update(
    model, optimizer, episodes: list[Episode], settings: GrpoSettings, *, pad_id: int, ref_model=None
) -> dict[str, float]:
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

    def logprobs(policy, batch: dict) -> torch.Tensor:
        return response_logprobs(policy, batch, settings.temperature)

    model.eval()
    with torch.no_grad():  # before any optimizer step: with one step, the new log-probs detached are the old
        olds = [
            [None] * len(micro_batches(step))
            if len(steps) == 1
            else [logprobs(model, batch_of(part)) for part in micro_batches(step)]
            for step in steps
        ]
        refs = [
            [
                logprobs(ref_model, batch_of(part))
                if ref_model is not None and settings.kl_coef > 0
                else None
                for part in micro_batches(step)
            ]
            for step in steps
        ]
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
            new = logprobs(model, batch)
            loss, metrics = policy_loss(
                old_log_prob=new.detach() if old is None else old,
                log_prob=new,
                advantages=adv[part].unsqueeze(-1) * mask,
                response_mask=mask,
                loss_agg_mode=LOSS_AGG_MODE,
                config=config,
            )
            totals["pg_loss"] += float(loss.detach())
            totals["clipfrac"] += metrics["actor/pg_clipfrac"] * float(mask.sum()) / tokens
            if ref is not None:
                kl = agg_loss(
                    loss_mat=kl_penalty(new, ref, settings.kl_type),
                    loss_mask=mask,
                    loss_agg_mode=LOSS_AGG_MODE,
                    batch_num_tokens=tokens,
                )
                loss = loss + settings.kl_coef * kl
                totals["kl"] += float(kl.detach())
            loss.backward()  # frees this micro-batch's graph; gradients add up in .grad
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        for key, value in {**totals, "grad_norm": float(grad_norm)}.items():
            stats[key].append(value)
    model.eval()
    return {key: float(np.mean(values)) if values else 0.0 for key, values in stats.items()}
