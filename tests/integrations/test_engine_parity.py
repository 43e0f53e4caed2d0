"""Parity of the two RL engines: the local GRPO update (``grpo_update``, what CPU users and CI train
with) against verl 0.9.1's actor update (``ActorRolloutRefWorker(role="actor")``: FSDP2 engine,
``ppo_loss``), on one batch of the tiny Qwen3, float32, no padding, plain SGD.

The batch: 4 episodes in 2 groups whose rewards differ, prompts and responses of one length each (no
padding anywhere), tool observations inside two responses (response mask 0). Both engines take 2
optimizer steps of 2 episodes, 2 per micro-batch, a low-variance KL term (coefficient 0.5) to the
policy before the update, log-probs at the rollout temperature 0.7: the first step on-policy, the
second off-policy with old log-probs from before the first, where some ratios leave the clip range
and the KL is not 0.

Tolerances, float32 (eps 1.2e-7): both engines run the same model through the same kernels, but
verl's forward sees other tensor shapes (full-sequence logits of right-padded nested batches, its own
log-softmax) and sums in another order. Measured: log-probs within 1.9e-6 (2 ulp at |log p| ~ 17),
the policy loss, KL term and gradient norm within 5e-7 of the largest per-step value, parameter
updates to 1.1e-6 relative over the model and 5e-6 in the worst tensor (rounding of the parameters
themselves, |p| ~ 1 for norm weights). The bounds sit 10x or more above that; any error in the math
(a token shifted, another loss aggregation or normalisation, advantages, clipping, the KL term,
the temperature, gradient clipping) moves them by 1e-3 or more.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mtsql

pytestmark = pytest.mark.verl

VERL_SIDE = Path(__file__).with_name("verl_actor_step.py")
LR = 10.0  # SGD on gradients clipped to norm 1: an update of norm 10 per step, far above rounding
# temperature: the tiny profile's rl.temperature; both engines divide the logits by it
# (GrpoSettings' fields, kept plain: its module imports torch, which collecting this file should not)
SETTINGS = {
    "clip_ratio": 0.2,
    "kl_coef": 0.5,
    "mini_batches": 2,
    "micro_batch": 2,
    "max_grad_norm": 1.0,
    "temperature": 0.7,
}
LOGPROB_ATOL = 2e-5  # 10 ulp at |log p| in [16, 32)
STAT_RTOL = 1e-5  # of the largest per-step value: the steps' sum may cancel
UPDATE_RTOL = {"model": 1e-5, "tensor": 1e-4}
DEADLINE_S = 600


def parity_batch(model: Path) -> dict:
    import torch

    g = torch.Generator().manual_seed(7)
    prompts = torch.randint(200, 150_000, (4, 6), generator=g)
    responses = torch.randint(200, 150_000, (4, 8), generator=g)
    mask = torch.ones(4, 8, dtype=torch.long)
    mask[0, 3:5] = 0  # tool observations
    mask[2, 1:4] = 0
    return {
        "model": str(model),
        "prompts": prompts,
        "responses": responses,
        "response_mask": mask,
        "rewards": torch.tensor([1.0, 0.0, 0.2, 0.9]),
        "groups": ["a", "a", "b", "b"],
        "settings": {
            "micro_batch": SETTINGS["micro_batch"],
            "mini_batch_size": 4 // SETTINGS["mini_batches"],
            "clip_ratio": SETTINGS["clip_ratio"],
            "kl_coef": SETTINGS["kl_coef"],
            "temperature": SETTINGS["temperature"],
            "loss_agg_mode": "token-mean",
            "lr": LR,
            "max_grad_norm": SETTINGS["max_grad_norm"],
        },
    }


def episodes(batch: dict) -> list:
    from mtsql.engines.local_grpo.update import Episode

    return [
        Episode(group, p.tolist(), r.tolist(), m.tolist(), float(reward))
        for group, p, r, m, reward in zip(
            batch["groups"],
            batch["prompts"],
            batch["responses"],
            batch["response_mask"],
            batch["rewards"],
            strict=True,
        )
    ]


@pytest.fixture(scope="module")
def runs(tiny_qwen3, tmp_path_factory):
    """verl's update (a process of its own, started first) and the local one on the same batch."""
    import torch
    from transformers import AutoModelForCausalLM

    from mtsql.engines.local_grpo.update import GrpoSettings, grpo_update, pad_batch, response_logprobs

    folder = tmp_path_factory.mktemp("parity")
    batch = parity_batch(tiny_qwen3)
    torch.save(batch, folder / "batch.pt")
    src = str(Path(mtsql.__file__).resolve().parents[1])  # the verl side imports this very mtsql
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    log = folder / "verl.log"
    with log.open("w") as out:
        verl = subprocess.Popen(
            [sys.executable, str(VERL_SIDE), str(folder / "batch.pt"), str(folder / "verl.pt")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
        initial = {name: p.detach().clone() for name, p in model.named_parameters()}
        reference = copy.deepcopy(model)  # the policy before the update, as verl's reference is
        eps = episodes(batch)
        model.eval()
        with torch.no_grad():
            log_probs = response_logprobs(model, pad_batch(eps, pad_id=0), SETTINGS["temperature"])
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        stats = grpo_update(model, optimizer, eps, GrpoSettings(**SETTINGS), pad_id=0, ref_model=reference)
        verl.wait(timeout=DEADLINE_S)
    finally:
        verl.kill()
        verl.wait()
    assert verl.returncode == 0, f"verl's actor update failed ({log}):\n{log.read_text()[-4000:]}"
    local = {"log_probs": log_probs, "stats": stats, "params": dict(model.named_parameters())}
    return {"batch": batch, "initial": initial, "local": local, "verl": torch.load(folder / "verl.pt")}


def test_log_probs_agree(runs):
    mask = runs["batch"]["response_mask"].bool()
    local, verl = runs["local"]["log_probs"], runs["verl"]["old_log_probs"]
    worst = float((local - verl)[mask].abs().max())
    assert worst < LOGPROB_ATOL, f"log-probs differ by up to {worst:.2e}"


def test_advantages_agree(runs):
    """The local engine's group-normalised advantage is verl's trainer's, on every model token."""
    import torch

    from mtsql.engines.local_grpo.update import episode_advantages

    mask = runs["batch"]["response_mask"]
    expected = episode_advantages(episodes(runs["batch"])).unsqueeze(-1) * mask
    assert torch.allclose(runs["verl"]["advantages"] * mask, expected, atol=1e-6)


STATISTICS = [
    ("pg_loss", "actor/pg_loss"),
    ("kl", "kl_loss"),
    ("grad_norm", "grad_norm"),
    ("clipfrac", "actor/pg_clipfrac"),
]  # (the local engine's name, verl's)


@pytest.mark.parametrize(("local_key", "verl_key"), STATISTICS)
def test_losses_gradient_norm_and_clip_fraction_agree(runs, local_key, verl_key):
    """The local engine reports each statistic's mean over the optimizer steps; verl one per step."""
    per_step = runs["verl"]["metrics"][verl_key]
    assert len(per_step) == SETTINGS["mini_batches"]
    expected = sum(per_step) / len(per_step)
    bound = STAT_RTOL * max(map(abs, per_step))
    assert runs["local"]["stats"][local_key] == pytest.approx(expected, abs=bound)


def test_the_off_policy_step_clips_some_tokens_and_has_a_kl_term(runs):
    """So the clip range and the KL term are exercised, not only ratio 1 at the reference."""
    metrics = runs["verl"]["metrics"]
    assert metrics["actor/pg_clipfrac"][0] == 0 < metrics["actor/pg_clipfrac"][1] < 1
    assert metrics["kl_loss"][0] < 1e-9 < metrics["kl_loss"][1]  # 0 at the reference itself


def test_sgd_steps_update_every_parameter_alike(runs):
    """Two plain-SGD steps turn the gradients into parameter updates (AdamW would move every parameter
    by about lr whatever its gradient): compared per tensor and over the whole model."""
    initial, local, verl = runs["initial"], runs["local"]["params"], runs["verl"]["params"]
    assert set(local) == set(verl)
    total_error = total = 0.0
    for name, start in initial.items():
        ours, theirs = local[name].detach() - start, verl[name] - start
        error, size = float((ours - theirs).norm()), float(ours.norm())
        assert size > 0, f"{name} did not move"
        assert error <= UPDATE_RTOL["tensor"] * size, f"{name}: relative error {error / size:.2e}"
        total_error, total = total_error + error**2, total + size**2
    assert total_error**0.5 <= UPDATE_RTOL["model"] * total**0.5
