"""The ``model`` section: which model a stage starts from, its chat family and dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtsql.base.config import result


@dataclass(frozen=True)
class ModelConfig:
    """A model: an alias known to ``mtsql models`` (smollm2-135m, tiny-qwen3, tiny-qwen25, tiny-llama3), an HF
    id or a folder."""

    name: str = result("smollm2-135m")
    # the chat family (mtsql.core.chat_format), by the name of LLaMA-Factory's template SFT uses: qwen3_nothink /
    # qwen3 (Qwen3 without / with thinking), qwen (Qwen2.5, Qwen2.5-Coder, OmniSQL), llama3; auto: the model's own
    # tokenizer.chat_template (LLaMA-Factory parses it)
    template: Literal["qwen3_nothink", "qwen3", "qwen", "llama3", "auto"] = result("qwen3_nothink")
    # sampling with auto: float32 on CPU and bfloat16 on CUDA (hf), vLLM's own choice (vllm); the local RL
    # engine trains in this dtype, and in float32 for auto
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = result("auto")
    device: str = result("cpu")  # hf backend: cpu | cuda | cuda:N (the device picks dtype auto's dtype and kernels)
