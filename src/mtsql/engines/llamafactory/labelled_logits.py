"""LLaMA-Factory's trainer in this process, with the vocabulary projection only where a label is.

    python -m mtsql.engines.llamafactory.labelled_logits train.yaml

In a tool-integrated trajectory only the assistant's ids carry a label: the prompt, the schema and
every tool observation are masked (in the tiny profile ~9 % of the ids are labelled). The trainer
still projects every position onto the vocabulary and takes a softmax there, which on a CPU is
~16 % of a float32 step for SmolLM2 (49,152 entries). ``LabelledLogits`` registers a forward
pre-hook on the model that asks it for logits at the labelled positions only (transformers'
``logits_to_keep`` given as indices) and passes the labels already shifted (``shift_labels``), so
the loss and its gradients are those of the full computation (to float rounding).

``train_command`` uses this entry for single-process CPU training; GPU and multi-process launches
stay ``llamafactory-cli train`` as LLaMA-Factory ships it.
"""

from __future__ import annotations

import inspect
import sys

import torch
from transformers import TrainerCallback

IGNORE_INDEX = -100  # the label of a position without loss (LLaMA-Factory, transformers)


def keep_labelled(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook: logits only at the positions whose next id is labelled.

    Positions are shared by the batch's rows (a position kept for one row is kept for all; the
    others' labels there stay ignored). Left alone: no labels, a caller that already chose
    ``logits_to_keep`` or ``shift_labels``, eval mode, or a batch without any label.
    """
    labels = kwargs.get("labels")
    if (
        labels is None
        or not module.training
        or kwargs.get("logits_to_keep") is not None
        or kwargs.get("shift_labels") is not None
    ):
        return None
    shifted = torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    keep = (shifted != IGNORE_INDEX).any(dim=0).nonzero().squeeze(1)
    if keep.numel() == 0:
        return None
    return args, {**kwargs, "logits_to_keep": keep, "shift_labels": shifted[:, keep].contiguous()}


def supports_labelled_logits(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (transformers' causal LMs do)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


class LabelledLogits(TrainerCallback):
    """Install ``keep_labelled`` on the trained model when training begins (a LoRA model's base)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        target = model.get_base_model() if hasattr(model, "get_base_model") else model
        if target is not None and supports_labelled_logits(target):
            target.register_forward_pre_hook(keep_labelled, with_kwargs=True)


def main(argv: list[str]) -> None:
    """Train as ``llamafactory-cli train YAML`` does, with ``LabelledLogits`` among the callbacks."""
    from llamafactory.train.tuner import run_exp

    sys.argv = [sys.argv[0], *argv]  # LLaMA-Factory reads its YAML (and key=value overrides) from argv
    run_exp(callbacks=[LabelledLogits()])


if __name__ == "__main__":
    main(sys.argv[1:])
