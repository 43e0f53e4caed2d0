"""Which weights the local GRPO engine trains, and how the trained model is saved: LoRA adapters,
only the last decoder layers, or every weight; an HF folder with LoRA merged in."""

from __future__ import annotations

import torch

from mtsql.base.errors import UsageError


def load_model(path: str, dtype: str, device: str):
    """The causal LM at ``path`` in ``dtype`` (a torch dtype's name) on ``device``, in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()


def trainable(model, rl):
    """``model`` set to train what ``rl`` asks: LoRA adapters (``rl.lora_rank``), only the last
    ``rl.local.trainable_layers`` decoder layers, or (both 0) every weight."""
    if rl.lora_rank > 0 and rl.local.trainable_layers > 0:
        raise UsageError(
            f"rl.lora_rank={rl.lora_rank} and rl.local.trainable_layers={rl.local.trainable_layers}: "
            "choose one way to train fewer weights and set the other to 0"
        )
    if rl.lora_rank > 0:
        return with_lora(model, rl)
    if rl.local.trainable_layers > 0:
        train_last_layers(model, rl.local.trainable_layers)
    return model


def with_lora(model, rl):
    """``model`` wrapped with LoRA adapters of rank ``rl.lora_rank`` and scale ``rl.lora_alpha`` on
    every linear layer (what verl's ``target_modules=all-linear`` means)."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model,
        LoraConfig(
            r=rl.lora_rank, lora_alpha=rl.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
    )


def train_last_layers(model, count: int) -> None:
    """Only the last ``count`` decoder layers of ``model`` train; the embeddings (and a tied output
    projection), the layers below and the final norm stay fixed, as with LLaMA-Factory's
    ``finetuning_type: freeze``. The backward pass then stops at the first trainable layer."""
    layers = getattr(getattr(model, "base_model", model), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise UsageError(
            f"rl.local.trainable_layers={count}: {type(model).__name__} keeps no decoder layers at "
            "base_model.layers; set rl.local.trainable_layers: 0 (or rl.lora_rank) for this model"
        )
    if not 1 <= count <= len(layers):
        raise UsageError(
            f"rl.local.trainable_layers={count}: the model has {len(layers)} decoder layers; "
            f"train 1 to {len(layers)} of them, or set 0 to train every weight"
        )
    model.requires_grad_(False)
    for layer in layers[-count:]:
        layer.requires_grad_(True)


def save_model(model, tokenizer, folder) -> None:
    """An HF folder (LoRA merged into the weights) that every other stage can load."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
