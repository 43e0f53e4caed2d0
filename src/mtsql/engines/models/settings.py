"""The ``model`` section: which model a stage starts from, its chat family and dtype; ``resolve_dtype``,
what ``model.dtype`` means on a device for every engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtsql.base.config import result
from mtsql.base.errors import UsageError

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ModelConfig:
    """A model: an alias known to ``mtsql models`` (smollm2-135m, tiny-qwen3, tiny-qwen25, tiny-llama3,
    tiny-smollm2), an HF id or a folder."""

    name: str = result("smollm2-135m")
    # the chat family (mtsql.core.chat_format), by the name of LLaMA-Factory's template SFT uses:
    # qwen3_nothink / qwen3 (Qwen3 without / with thinking), qwen (Qwen2.5, Qwen2.5-Coder, OmniSQL), smollm2,
    # llama3; auto: the model's own tokenizer.chat_template (LLaMA-Factory parses it)
    template: Literal["qwen3_nothink", "qwen3", "qwen", "smollm2", "llama3", "auto"] = result("qwen3_nothink")
    # auto: bfloat16 on CUDA, float32 on CPU (resolve_dtype), but vLLM also takes bfloat16 on CPUs that
    # compute it natively and the local RL engine trains in float32 everywhere (each says why where it
    # decides)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = result("auto")
    # cpu | cuda | cuda:N, where the model runs in mtsql's processes: the hf backend, the local RL trainer and
    # the vLLM server mtsql starts all read it (it picks dtype auto's dtype and the kernels), so it is the
    # model's setting rather than one engine's
    device: str = result("cpu")


def resolve_dtype(dtype: str, device: str, *, auto: str | None = None) -> str:
    """The dtype ``model.dtype`` names on ``device``: ``auto`` is bfloat16 on CUDA and float32 elsewhere (most
    CPUs emulate bfloat16 arithmetic, slower than float32), or ``auto=`` where an engine decides otherwise;
    that engine says why at its call."""
    if dtype == "auto":
        return auto or ("bfloat16" if device.startswith("cuda") else "float32")
    if dtype not in DTYPES:
        raise UsageError(f"model.dtype: unknown '{dtype}'; choose auto, {', '.join(DTYPES)}")
    return dtype
