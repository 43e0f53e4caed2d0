"""GRPO update for the local RL engine (CPU or one GPU, no Ray), built on verl's ``core_algos``.

An *episode* is one finished multi-turn trajectory in token form: the prompt, then everything after
it (model tokens and tool observations interleaved) with ``response_mask`` 1 on model tokens only,
its scalar reward, and the group (the question) it was sampled for. The update follows verl's
recipe: group-normalised outcome advantages (``compute_grpo_outcome_advantage``), the clipped
policy loss (``get_policy_loss_fn("vanilla")``), optional low-variance KL to a frozen reference
(``kl_penalty``), token-mean aggregation (``agg_loss``); observation tokens never enter the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


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
    micro_batch: int = 4  # sequences per forward pass
    max_grad_norm: float = 1.0
    loss_agg_mode: str = "token-mean"


def _actor_config(settings: GrpoSettings):
    from omegaconf import OmegaConf

    return OmegaConf.create({"clip_ratio": settings.clip_ratio, "clip_ratio_low": None, "clip_ratio_high": None,
                             "clip_ratio_c": 3.0, "global_batch_info": {}})


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


def response_logprobs(model, batch: dict, micro_batch: int) -> torch.Tensor:
    """Log-probabilities of every response token under ``model`` (shape: batch x response length)."""
    from verl.utils.torch_functional import logprobs_from_logits

    p_len = batch["prompt_len"]
    out = []
    for start in range(0, batch["input_ids"].shape[0], micro_batch):
        ids = batch["input_ids"][start : start + micro_batch]
        attention = batch["attention_mask"][start : start + micro_batch]
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        keep = ids.shape[1] - p_len + 1  # logits only where they predict a response token
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep).logits
        out.append(logprobs_from_logits(logits[:, :-1].float(), ids[:, p_len:]))
    return torch.cat(out)


def advantages(episodes: list[Episode], response_mask: torch.Tensor) -> torch.Tensor:
    """verl's GRPO advantages: the reward sits on the last response token, normalised per group."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_rewards = torch.zeros_like(response_mask)
    for row, ep in enumerate(episodes):
        token_rewards[row, len(ep.response_ids) - 1] = ep.reward
    index = np.array([ep.group for ep in episodes], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(token_rewards, response_mask, index)
    return adv


def signal_share(episodes: list[Episode]) -> float:
    """The share of groups whose rewards differ: a group of equal rewards has zero advantage and
    gives no policy gradient."""
    groups: dict[str, set[float]] = {}
    for ep in episodes:
        groups.setdefault(ep.group, set()).add(ep.reward)
    return sum(len(rewards) > 1 for rewards in groups.values()) / len(groups) if groups else 0.0


def grpo_update(model, optimizer, episodes: list[Episode], settings: GrpoSettings, *, pad_id: int,
                ref_model=None) -> dict[str, float]:
    """One rollout batch of GRPO: old log-probs, advantages, then ``mini_batches`` optimizer steps."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty

    policy_loss = get_policy_loss_fn("vanilla")
    device = next(model.parameters()).device
    actor_cfg = _actor_config(settings)
    model.eval()
    with torch.no_grad():
        full = pad_batch(episodes, pad_id, device)
        adv_all = advantages(episodes, full["response_mask"])
    stats: dict[str, list[float]] = {"pg_loss": [], "kl": [], "grad_norm": [], "clipfrac": []}
    order = list(range(len(episodes)))
    size = max(1, -(-len(order) // settings.mini_batches))
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    with torch.no_grad():  # one update per batch is on-policy: the old log-probs are the new ones, detached
        olds = [None if len(chunks) == 1 else
                response_logprobs(model, pad_batch([episodes[i] for i in chunk], pad_id, device), settings.micro_batch)
                for chunk in chunks]
        refs = ([response_logprobs(ref_model, pad_batch([episodes[i] for i in chunk], pad_id, device), settings.micro_batch)
                 for chunk in chunks] if ref_model is not None and settings.kl_coef > 0 else [None] * len(chunks))
    model.train()
    for chunk, old, ref in zip(chunks, olds, refs, strict=True):
        batch = pad_batch([episodes[i] for i in chunk], pad_id, device)
        mask = batch["response_mask"]
        adv = torch.stack([adv_all[i, : mask.shape[1]] for i in chunk])
        new = response_logprobs(model, batch, settings.micro_batch)
        old = new.detach() if old is None else old
        loss, metrics = policy_loss(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask,
                                    loss_agg_mode=settings.loss_agg_mode, config=actor_cfg)
        kl_value = 0.0
        if ref is not None:
            kl = agg_loss(loss_mat=kl_penalty(new, ref, settings.kl_type), loss_mask=mask,
                          loss_agg_mode=settings.loss_agg_mode)
            loss = loss + settings.kl_coef * kl
            kl_value = float(kl.detach())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        stats["pg_loss"].append(float(loss.detach()))
        stats["kl"].append(kl_value)
        stats["grad_norm"].append(float(grad_norm))
        stats["clipfrac"].append(float(metrics["actor/pg_clipfrac"]))
    model.eval()
    return {key: float(np.mean(values)) for key, values in stats.items()}


# ---------------------------------------------------------------------------------------------
# The training loop: rollouts with the model being trained, rewards, one GRPO update per step.


def train_stage(cfg, turns, *, base_model: str, out_dir, metrics_path, stage: int = 1) -> dict:
    """GRPO on ``turns`` for ``rl.steps_per_stage`` steps from ``base_model``; saves ``out_dir/model``.

    Each step draws ``rl.batch_size`` questions (a seeded shuffle, cycling), samples ``rl.n``
    trajectories of each with the current weights at ``rl.temperature``, scores them with the
    configured reward family and applies one GRPO update (``rl.mini_batch_size`` questions per
    optimizer step). One JSON line per step goes to ``metrics_path``.
    """
    import copy
    import json
    import random
    import time
    from functools import partial

    from mtsql.backends.hf import HFBackend
    from mtsql.paths import data_dir
    from mtsql.rollout import RolloutEngine, derive_seed
    from mtsql.trajectories import score_record

    torch.manual_seed(cfg.seed)
    dtype = "float32" if cfg.model.dtype == "auto" else cfg.model.dtype  # trained weights stay float32
    backend = HFBackend(base_model, dtype=dtype, device=cfg.model.device, prefix_cache=False)
    model = backend.model
    if cfg.rl.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.rl.lora_rank, lora_alpha=2 * cfg.rl.lora_rank,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
        backend.model = model
    ref_model = copy.deepcopy(model).eval() if cfg.rl.kl_coef > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.rl.lr, weight_decay=0.0)
    root = data_dir(cfg.data.root)
    engine = RolloutEngine.from_config(cfg, data_root=root, policy="model", temperature=cfg.rl.temperature,
                                       backend=backend)
    settings = GrpoSettings(clip_ratio=cfg.rl.clip_ratio, kl_coef=cfg.rl.kl_coef,
                            mini_batches=max(1, cfg.rl.batch_size // max(1, cfg.rl.mini_batch_size)))
    order: list = []
    rng = random.Random(derive_seed(cfg.seed, "rl", stage))
    history = []
    for step in range(1, cfg.rl.steps_per_stage + 1):
        started = time.perf_counter()
        if len(order) < cfg.rl.batch_size:
            order += rng.sample(turns, len(turns))
        batch, order = order[: cfg.rl.batch_size], order[cfg.rl.batch_size :]
        rows = engine.run(batch, n=cfg.rl.n, seed=derive_seed(cfg.seed, stage, step), progress=False,
                          score=partial(score_record, reward=cfg.reward, sql=cfg.sql, data_root=root))
        episodes = [Episode(r["uid"], r["prompt_ids"], r["response_ids"], r["response_mask"], r["reward"]["score"])
                    for r in rows if r["response_ids"]]
        stats = grpo_update(model, optimizer, episodes, settings, pad_id=backend.pad_id, ref_model=ref_model)
        rewards = [r["reward"]["score"] for r in rows]
        line = {
            "stage": stage, "step": step, "reward_mean": float(np.mean(rewards)), "reward_std": float(np.std(rewards)),
            "response_length": float(np.mean([r["response_tokens"] for r in rows])),
            "tool_calls_per_turn": float(np.mean([r["tool_calls"] for r in rows])),
            "ex": float(np.mean([r["execution"] or 0 for r in rows])), "em": float(np.mean([r["exact"] or 0 for r in rows])),
            "protocol_valid": float(np.mean([r["protocol_valid"] for r in rows])),
            "groups_with_signal": signal_share(episodes),
            **stats, "wall_s": round(time.perf_counter() - started, 2),
        }
        history.append(line)
        with open(metrics_path, "a") as handle:
            handle.write(json.dumps(line) + "\n")
    save_model(model, backend.tokenizer, out_dir / "model")
    first, last = history[0], history[-1]
    return {"steps": len(history), "reward_first": first["reward_mean"], "reward_last": last["reward_mean"],
            "ex_last": last["ex"], "response_length_last": last["response_length"],
            "steps_without_signal": sum(line["groups_with_signal"] == 0 for line in history)}


def save_model(model, tokenizer, folder) -> None:
    """An HF folder (LoRA merged into the weights) that every other stage can load."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
