"""The local GRPO update on a tiny real model: verl's core_algos, the response mask respected."""

import copy

import pytest
import torch

from mtsql.integrations.grpo_local import (
    Episode,
    GrpoSettings,
    advantages,
    grpo_update,
    pad_batch,
    response_logprobs,
    signal_share,
)


@pytest.fixture(scope="module")
def tiny_model(tiny_qwen3):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)


def episodes():
    prompt = [10, 11, 12, 13]
    good = Episode("q1", prompt, [20, 21, 900, 901, 22], [1, 1, 0, 0, 1], reward=1.0)
    bad = Episode("q1", prompt, [30, 31, 32], [1, 1, 1], reward=0.0)
    return [good, bad]


def test_padding_aligns_responses():
    batch = pad_batch(episodes(), pad_id=0)
    assert batch["input_ids"].shape == (2, 4 + 5) and batch["prompt_len"] == 4
    assert batch["response_mask"].tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 1, 1, 1, 1, 0, 0]


def test_group_normalised_advantages_only_on_model_tokens():
    eps = episodes()
    adv = advantages(eps, pad_batch(eps, 0)["response_mask"])
    assert adv[0, 0] > 0 > adv[1, 0]
    assert adv[0, 2] == 0 and adv[0, 3] == 0, "observation tokens get no advantage"


def test_signal_share_counts_groups_whose_rewards_differ():
    prompt = [1, 2]
    flat = [Episode("q2", prompt, [5], [1], reward=0.0), Episode("q2", prompt, [6], [1], reward=0.0)]
    assert signal_share(episodes()) == 1.0
    assert signal_share(episodes() + flat) == 0.5
    assert signal_share(flat) == 0.0 and signal_share([]) == 0.0


def test_update_moves_probability_towards_the_rewarded_episode(tiny_model):
    model = copy.deepcopy(tiny_model)
    eps = episodes()
    batch = pad_batch(eps, 0)
    with torch.no_grad():
        before = response_logprobs(model, batch, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = grpo_update(model, optimizer, eps, GrpoSettings(kl_coef=0.1), pad_id=0, ref_model=tiny_model)
    with torch.no_grad():
        after = response_logprobs(model, batch, 4)
    assert set(stats) == {"pg_loss", "kl", "grad_norm", "clipfrac"} and stats["grad_norm"] > 0
    assert after[0, :2].sum() > before[0, :2].sum(), "rewarded tokens became likelier"
    assert after[1, :3].sum() < before[1, :3].sum(), "unrewarded tokens became less likely"


def test_observation_tokens_get_no_gradient(tiny_model):
    """Changing an observation token's *target* must not change the loss gradient."""
    grads = []
    for obs in ([900, 901], [500, 501]):
        model = copy.deepcopy(tiny_model)
        eps = [Episode("q", [10, 11], [20, *obs], [1, 0, 0], 1.0), Episode("q", [10, 11], [30, 31, 32], [1, 1, 1], 0.0)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        grpo_update(model, optimizer, eps, GrpoSettings(), pad_id=0)
        grads.append(model.lm_head.weight.grad.clone() if model.lm_head.weight.grad is not None
                     else model.get_input_embeddings().weight.grad.clone())
    assert torch.allclose(grads[0], grads[1])
