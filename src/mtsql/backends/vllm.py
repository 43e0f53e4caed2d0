"""Generation with vLLM's offline engine (GPU only; the optional ``gpu`` extra, vllm 0.24).

Prompts go in as token ids (``{"prompt_token_ids": ...}``) and the engine keeps automatic prefix
caching on, so the shared system prompt and each conversation's earlier turns are not recomputed.
Every prompt gets its own ``SamplingParams`` carrying its seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mtsql.backends.base import Backend, Generation, SamplingParams, end_of_turn_ids
from mtsql.errors import UsageError

INSTALL_HINT = "install the GPU extra on a CUDA machine: pip install 'mtsql[gpu]' (vllm==0.24.0)"


def import_vllm():
    """The ``vllm`` module, or a one-line ``UsageError`` saying how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise UsageError(f"the vllm backend needs vLLM, which is not importable here ({exc}); {INSTALL_HINT}") from None
    return vllm


class VLLMBackend(Backend):
    """One ``vllm.LLM`` engine; options are passed to it (``tensor_parallel_size``, ``max_model_len``, ...)."""

    schedules_requests = True

    def __init__(self, model: str | Path, dtype: str = "auto", gpu_memory_utilization: float = 0.85,
                 seed: int = 0, **engine_options):
        self.vllm = import_vllm()
        self.llm = self.vllm.LLM(model=str(model), dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                                 seed=seed, enable_prefix_caching=True, **engine_options)
        self.tokenizer = self.llm.get_tokenizer()
        self.end_of_turn_ids = end_of_turn_ids(self.tokenizer)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        per_prompt = [
            self.vllm.SamplingParams(
                temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_new_tokens, seed=seed,
                stop=list(params.stop), stop_token_ids=sorted(self.end_of_turn_ids),
                include_stop_str_in_output=True, skip_special_tokens=False,
                logprobs=0 if params.logprobs else None,
            )
            for seed in self._seeds(prompts, params, seeds)
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling_params=per_prompt,
                                    use_tqdm=False)
        results = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = None
            if params.logprobs and completion.logprobs is not None:
                logprobs = [position[token].logprob for position, token in zip(completion.logprobs, ids, strict=True)]
            reason = "length" if completion.finish_reason == "length" else "stop"
            results.append(self._finish(ids, reason, logprobs))
        return results
