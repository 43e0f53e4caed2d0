"""The vLLM backend: a clear error without vLLM, and its use of vLLM's offline API (a stand-in module)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

from mtsql.backends import make_backend
from mtsql.backends.base import SamplingParams
from mtsql.errors import UsageError


def test_missing_vllm_is_a_usage_error_with_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what "not installed" looks like to import
    with pytest.raises(UsageError, match=r"needs vLLM.*pip install 'mtsql\[gpu\]'"):
        make_backend("vllm", "Qwen/Qwen3-1.7B")


@dataclass
class FakeLogprob:
    logprob: float


@dataclass
class FakeCompletion:
    token_ids: list[int]
    finish_reason: str
    logprobs: list = field(default_factory=list)


class FakeLLM:
    """Records what the backend asks of ``vllm.LLM`` and continues every prompt with fixed ids."""

    instances: list = []

    def __init__(self, **options):
        self.options, self.calls = options, []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params, use_tqdm))
        outputs = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            ids = [prompt["prompt_token_ids"][-1] + 1, self.end_id] if params.seed % 2 else [7, 8, 9]
            reason = "stop" if params.seed % 2 else "length"
            logprobs = [{i: FakeLogprob(-0.25 * (k + 1))} for k, i in enumerate(ids)]
            outputs.append(types.SimpleNamespace(outputs=[FakeCompletion(ids, reason, logprobs)]))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch, tiny_tokenizer):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    FakeLLM.tokenizer = tiny_tokenizer
    FakeLLM.end_id = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    FakeLLM.instances = []
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_token_ids_in_and_out_with_prefix_caching(fake_vllm, tiny_tokenizer):
    backend = make_backend("vllm", "/models/qwen3", max_model_len=4096)
    llm = FakeLLM.instances[0]
    assert llm.options["enable_prefix_caching"] and llm.options["model"] == "/models/qwen3"
    assert llm.options["max_model_len"] == 4096
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32, stop=("</tool_call>",), logprobs=True)
    out = backend.generate([[10, 11], [20]], params, seeds=[3, 4])
    prompts, per_prompt, use_tqdm = llm.calls[0]
    assert prompts == [{"prompt_token_ids": [10, 11]}, {"prompt_token_ids": [20]}] and not use_tqdm
    assert [p.seed for p in per_prompt] == [3, 4]
    first = per_prompt[0]
    assert (first.temperature, first.top_p, first.max_tokens, first.stop) == (0.7, 0.9, 32, ["</tool_call>"])
    assert first.include_stop_str_in_output and not first.skip_special_tokens and first.logprobs == 0
    assert FakeLLM.end_id in first.stop_token_ids
    assert out[0].token_ids == [12, FakeLLM.end_id] and out[0].finish_reason == "stop"
    assert out[0].text == tiny_tokenizer.decode([12]) and out[0].logprobs == [-0.25, -0.5]
    assert out[1].token_ids == [7, 8, 9] and out[1].finish_reason == "length"
    assert backend.generate([], params) == []


def test_the_rollout_engine_hands_vllm_every_ready_conversation(fake_vllm, tiny_tokenizer):
    from mtsql.chat_format import ChatFormat
    from mtsql.data.records import Turn
    from mtsql.rollout import RolloutEngine

    class OneMessageEnv:
        def reset(self, turn, memory=None):
            self.trajectory = types.SimpleNamespace(to_dict=lambda: {"final_sql": None})
            return [{"role": "user", "content": turn.question}]

        def step(self, text):
            return None, True, {}

    turns = [Turn(dataset="cosql", split="dev", interaction_id=f"d{i}", interaction_index=0, turn_index=0, db_id="db",
                  question=f"q{i}?", gold_sql="SELECT 1", previous_questions=(), previous_sql=()) for i in range(6)]
    backend = make_backend("vllm", "/models/qwen3")
    records = RolloutEngine(OneMessageEnv, backend=backend, chat=ChatFormat(tiny_tokenizer),
                            params=SamplingParams(max_new_tokens=3), batch_size=2).run(turns, progress=False)
    calls = FakeLLM.instances[0].calls
    assert len(records) == 6 and len(calls[0][0]) == 4  # twice batch_size in flight, all in one call
