"""The local GRPO update on a tiny real model: verl's core_algos, the response mask respected,
gradients accumulated over micro-batches equal to the one-shot token-mean gradient."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pytest

from mtsql.base.errors import UsageError
from mtsql.engines.local_grpo.update import (
    Episode,
    GrpoSettings,
    drop_long_prompts,
    episode_advantages,
    grpo_settings,
    grpo_update,
    pad_batch,
    response_logprobs,
    signal_share,
)
from mtsql.engines.local_grpo.weights import trainable, with_lora
from mtsql.engines.rl_settings import RlConfig

if TYPE_CHECKING:
    import torch


@pytest.fixture(scope="module")
def tiny_model(tiny_qwen3):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)


def episodes():
    prompt = [10, 11, 12, 13]
    good = Episode("q1", prompt, [20, 21, 900, 901, 22], [1, 1, 0, 0, 1], reward=1.0)
    bad = Episode("q1", prompt, [30, 31, 32], [1, 1, 1], reward=0.0)
    return [good, bad]


def mixed_episodes():
    """Two groups, prompts and responses of different lengths, observation tokens inside responses."""
    return [
        Episode("a", [10, 11, 12], [20, 21, 900, 901, 22, 23], [1, 1, 0, 0, 1, 1], reward=1.0),
        Episode("a", [10, 11, 12], [30, 31], [1, 1], reward=0.0),
        Episode("a", [10, 11, 12], [40, 41, 42, 902, 43], [1, 1, 1, 0, 1], reward=0.5),
        Episode("b", [14, 15, 16, 17, 18], [50, 903, 904, 51], [1, 0, 0, 1], reward=0.2),
        Episode("b", [14, 15, 16, 17, 18], [60, 61, 62], [1, 1, 1], reward=0.9),
    ]


def gradient(model, eps, settings, ref_model=None) -> torch.Tensor:
    import torch

    model = copy.deepcopy(model)
    grpo_update(
        model, torch.optim.SGD(model.parameters(), lr=0.0), eps, settings, pad_id=0, ref_model=ref_model
    )
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """float32 sums in another order differ by ~1e-5 of the norm; a wrong loss scale by far more."""

    return float((got - expected).norm() / expected.norm())


def test_padding_aligns_responses():
    batch = pad_batch(episodes(), pad_id=0)
    assert batch["input_ids"].shape == (2, 4 + 5) and batch["prompt_len"] == 4
    assert batch["response_mask"].tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 1, 1, 1, 1, 0, 0]


@pytest.mark.verl
def test_group_normalised_advantages():
    adv = episode_advantages(mixed_episodes())
    assert adv[0] > 0 > adv[1] and abs(float(adv[2])) < 1e-6 and adv[4] > 0 > adv[3]  # group a's mean is 0.5
    assert abs(float(adv[:3].sum())) < 1e-5 and abs(float(adv[3:].sum())) < 1e-5


def test_signal_share_counts_groups_whose_rewards_differ():
    prompt = [1, 2]
    flat = [Episode("q2", prompt, [5], [1], reward=0.0), Episode("q2", prompt, [6], [1], reward=0.0)]
    assert signal_share(episodes()) == 1.0
    assert signal_share(episodes() + flat) == 0.5
    assert signal_share(flat) == 0.0 and signal_share([]) == 0.0


def test_logprobs_at_model_tokens_match_the_full_forward(tiny_model):
    import torch

    batch = pad_batch(mixed_episodes(), pad_id=0)
    p_len, mask = batch["prompt_len"], batch["response_mask"]
    with torch.no_grad():
        ours = response_logprobs(tiny_model, batch)
        logits = tiny_model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=(batch["attention_mask"].cumsum(-1) - 1).clamp(min=0),
        ).logits
    full = torch.log_softmax(logits[:, p_len - 1 : -1].float(), -1).gather(
        -1, batch["input_ids"][:, p_len:, None]
    )[..., 0]
    assert torch.allclose(ours * mask, full * mask, atol=1e-5)
    assert (ours[mask == 0] == 0).all(), "no log-prob where there is no model token"
    with torch.no_grad():
        tempered = response_logprobs(tiny_model, batch, temperature=0.7)
    expected = torch.log_softmax(logits[:, p_len - 1 : -1].float() / 0.7, -1).gather(
        -1, batch["input_ids"][:, p_len:, None]
    )
    assert torch.allclose(tempered * mask, expected[..., 0] * mask, atol=1e-5)


def test_accumulated_gradient_equals_the_one_shot_token_mean_gradient(tiny_model):
    """On-policy (one optimizer step), the clipped loss has the gradient of
    -sum(advantage * logp over model tokens) / model tokens: computed here directly, in one pass."""
    import torch

    eps = mixed_episodes()
    batch = pad_batch(eps, pad_id=0)
    model = copy.deepcopy(tiny_model)
    adv = episode_advantages(eps).unsqueeze(-1) * batch["response_mask"]
    loss = -(adv * response_logprobs(model, batch)).sum() / batch["response_mask"].sum()
    loss.backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    for micro in (1, 2, len(eps)):
        got = gradient(tiny_model, eps, GrpoSettings(micro_batch=micro, max_grad_norm=1e9))
        assert relative_error(got, expected) < 1e-4, f"micro_batch={micro}"


def test_micro_batch_size_does_not_change_kl_or_off_policy_steps(tiny_model):
    import torch

    ref = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for param in ref.parameters():
            param.add_(0.01 * torch.randn_like(param))
    settings = GrpoSettings(kl_coef=0.5, mini_batches=2, max_grad_norm=1e9)
    one_shot = gradient(tiny_model, mixed_episodes(), settings, ref_model=ref)
    for micro in (1, 2):
        got = gradient(
            tiny_model, mixed_episodes(), GrpoSettings(**{**settings.__dict__, "micro_batch": micro}), ref
        )
        assert relative_error(got, one_shot) < 1e-4, f"micro_batch={micro}"


def test_each_micro_batch_is_backpropagated_before_the_next_forward(tiny_model):
    """What keeps memory flat: no graph outlives its micro-batch."""
    import torch

    model = copy.deepcopy(tiny_model)
    events = []
    model.register_forward_hook(lambda *args: events.append("forward"))
    model.get_input_embeddings().weight.register_hook(lambda grad: events.append("backward"))
    grpo_update(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        mixed_episodes(),
        GrpoSettings(micro_batch=2),
        pad_id=0,
    )
    assert events == ["forward", "backward"] * 3


def test_update_moves_probability_towards_the_rewarded_episode(tiny_model):
    import torch

    model = copy.deepcopy(tiny_model)
    eps = episodes()
    batch = pad_batch(eps, 0)
    with torch.no_grad():
        before = response_logprobs(model, batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = grpo_update(model, optimizer, eps, GrpoSettings(kl_coef=0.1), pad_id=0, ref_model=tiny_model)
    with torch.no_grad():
        after = response_logprobs(model, batch)
    assert set(stats) == {"pg_loss", "kl", "grad_norm", "clipfrac"} and stats["grad_norm"] > 0
    assert after[0, :2].sum() > before[0, :2].sum(), "rewarded tokens became likelier"
    assert after[1, :3].sum() < before[1, :3].sum(), "unrewarded tokens became less likely"


def test_observation_tokens_get_no_gradient(tiny_model):
    """Changing an observation token's *target* must not change the loss gradient."""
    import torch

    grads = []
    for obs in ([900, 901], [500, 501]):
        eps = [
            Episode("q", [10, 11], [20, *obs], [1, 0, 0], 1.0),
            Episode("q", [10, 11], [30, 31, 32], [1, 1, 1], 0.0),
        ]
        grads.append(gradient(tiny_model, eps, GrpoSettings()))
    assert torch.allclose(grads[0], grads[1])


def test_episodes_with_a_prompt_past_the_limit_are_dropped():
    eps = mixed_episodes()
    kept, counts = drop_long_prompts(eps, max_prompt_len=4)
    assert counts == {"episodes_over_prompt_len": 2} and kept == eps[:3]
    assert drop_long_prompts(eps, max_prompt_len=10) == (eps, {"episodes_over_prompt_len": 0})


def test_settings_follow_the_rl_config():
    settings = grpo_settings(
        RlConfig(
            micro_batch_size_per_gpu=3,
            batch_size=8,
            mini_batch_size=4,
            kl_coef=0.01,
            clip_ratio=0.3,
            temperature=0.7,
        )
    )
    assert (settings.micro_batch, settings.mini_batches, settings.kl_coef, settings.clip_ratio) == (
        3,
        2,
        0.01,
        0.3,
    )
    assert settings.temperature == 0.7  # the update's log-probs are the sampling policy's, as verl's


def test_lora_uses_rl_lora_alpha(tiny_model):
    model = with_lora(copy.deepcopy(tiny_model), RlConfig(lora_rank=4, lora_alpha=32))
    assert model.peft_config["default"].lora_alpha == 32
    scales = {
        m.scaling["default"] for m in model.modules() if hasattr(m, "scaling") and isinstance(m.scaling, dict)
    }
    assert scales == {32 / 4}


def named_gradients(model, eps) -> dict[str, torch.Tensor]:
    import torch

    unclipped = GrpoSettings(max_grad_norm=float("inf"))  # clipping scales by the norm over what trains
    grpo_update(
        model,
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0),
        eps,
        unclipped,
        pad_id=0,
    )
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def test_trainable_layers_trains_the_last_layers_with_their_full_model_gradient(tiny_model):
    """Freezing what lies below changes no gradient above it: the last layer gets exactly the
    gradient it gets in full training, and nothing else gets one."""
    import torch

    layers = len(tiny_model.base_model.layers)
    frozen = trainable(copy.deepcopy(tiny_model), RlConfig().with_engine("local", trainable_layers=1))
    grads = named_gradients(frozen, mixed_episodes())
    full = named_gradients(copy.deepcopy(tiny_model), mixed_episodes())
    last = f"model.layers.{layers - 1}."
    assert grads and all(name.startswith(last) for name in grads)
    assert set(grads) == {name for name in full if name.startswith(last)}
    for name, grad in grads.items():
        assert torch.allclose(grad, full[name], atol=1e-6), name
    assert len(full) > len(grads), "full training also reaches the embeddings and the lower layers"


def test_trainable_layers_outside_the_model_or_beside_lora_is_refused(tiny_model):
    import torch

    layers = len(tiny_model.base_model.layers)
    with pytest.raises(
        UsageError, match=rf"rl.local.trainable_layers={layers + 1}: the model has {layers} decoder layers"
    ):
        trainable(copy.deepcopy(tiny_model), RlConfig().with_engine("local", trainable_layers=layers + 1))
    with pytest.raises(UsageError, match="choose one way to train fewer weights"):
        trainable(copy.deepcopy(tiny_model), RlConfig(lora_rank=4).with_engine("local", trainable_layers=1))
    with pytest.raises(UsageError, match="Linear keeps no decoder layers at base_model.layers"):
        trainable(torch.nn.Linear(2, 2), RlConfig().with_engine("local", trainable_layers=1))
    whole = trainable(copy.deepcopy(tiny_model), RlConfig())
    assert all(p.requires_grad for p in whole.parameters())


@pytest.mark.parametrize("shared", [True, False])
def test_the_trainer_hands_the_backend_its_model_and_closes_it_after_a_failure(
    tiny_qwen3, tmp_path, monkeypatch, shared
):
    """Through the backend interface only: an in-process backend generates with the model that trains
    (here its LoRA form); beside a server the trainer loads its own copy. The backend is closed also
    when training fails."""
    from mtsql.app.config import load_config
    from mtsql.engines.backends.hf import HFBackend
    from mtsql.engines.local_grpo import trainer

    calls = []

    class Recording(HFBackend):
        def in_process_model(self):
            return super().in_process_model() if shared else None

        def load_weights(self, model, folder):
            calls.append(("load_weights", model))
            super().load_weights(model, folder)

        def close(self):
            calls.append(("close",))

    def made(cfg, model, *, dtype, log_path):
        calls.append(("made", dtype, log_path.name))
        return Recording(model, **HFBackend.training_options(cfg, dtype=dtype))

    def fails(cfg, turns, backend, model, **kwargs):
        calls.append(("trains", model, model is backend.model))
        raise RuntimeError("the first step failed")

    monkeypatch.setattr(trainer, "training_backend", made)
    monkeypatch.setattr(trainer, "_train", fails)
    cfg = load_config(None, ["rl.lora_rank=2"])
    with pytest.raises(RuntimeError, match="the first step failed"):
        trainer.train_curriculum_stage(
            cfg, [], base_model=str(tiny_qwen3), out_dir=tmp_path, metrics_path=tmp_path / "m.jsonl"
        )
    model = calls[1][1]
    assert hasattr(model, "peft_config")  # the trainable (LoRA) form
    if shared:
        assert calls == [
            ("made", "float32", "vllm-server.log"),
            ("load_weights", model),
            ("trains", model, True),
            ("close",),
        ]
    else:
        assert calls == [("made", "float32", "vllm-server.log"), ("trains", model, False), ("close",)]
