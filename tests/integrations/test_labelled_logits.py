"""The SFT hook that projects only labelled positions: same loss and gradients, fewer logits."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 40 ids whose labels (assistant spans) cover a few positions, at different places."""
    import torch

    from mtsql.engines.llamafactory.labelled_logits import IGNORE_INDEX

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 40), generator=generator)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 10:15] = ids[0, 10:15]
    labels[0, 30:34] = ids[0, 30:34]
    labels[1, 20:26] = ids[1, 20:26]
    return ids, labels


def loss_and_grads(model, ids, labels) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:

    model.zero_grad()
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    return out.loss.detach(), out.logits, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_logits_only_at_labelled_positions_give_the_same_loss_and_gradients(tiny_qwen3):
    import torch
    from transformers import AutoModelForCausalLM

    from mtsql.engines.llamafactory.labelled_logits import LabelledLogits

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    model.train()
    ids, labels = batch(model.config.vocab_size)
    loss, logits, grads = loss_and_grads(model, ids, labels)
    LabelledLogits().on_train_begin(None, None, None, model=model)
    kept_loss, kept_logits, kept_grads = loss_and_grads(model, ids, labels)

    # positions whose next id is labelled: 9..13, 29..32 (row 0) and 19..24 (row 1)
    assert logits.shape[1] == 40 and kept_logits.shape[1] == 5 + 4 + 6
    torch.testing.assert_close(kept_loss, loss)
    assert len(kept_grads) == len(grads)
    for kept, full in zip(kept_grads, grads, strict=True):
        torch.testing.assert_close(kept, full, rtol=1e-4, atol=1e-6)


def test_the_hook_leaves_inference_and_unlabelled_batches_alone(tiny_qwen3):
    import torch
    from transformers import AutoModelForCausalLM

    from mtsql.engines.llamafactory.labelled_logits import IGNORE_INDEX, keep_labelled

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    ids, labels = batch(model.config.vocab_size)
    model.eval()
    assert keep_labelled(model, (), {"input_ids": ids, "labels": labels}) is None
    model.train()
    assert keep_labelled(model, (), {"input_ids": ids}) is None
    assert (
        keep_labelled(model, (), {"input_ids": ids, "labels": torch.full_like(labels, IGNORE_INDEX)}) is None
    )
    _, kwargs = keep_labelled(model, (), {"input_ids": ids, "labels": labels})
    assert kwargs["logits_to_keep"].tolist() == [*range(9, 14), *range(19, 25), *range(29, 33)]
    assert kwargs["shift_labels"].shape == (2, 15) and kwargs["labels"] is labels
