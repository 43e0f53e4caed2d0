"""The evaluate stage through a real vLLM server on a Qwen2.5-template model: ``model.template=qwen``
and ``model.template=auto`` (the model's own chat template) run end to end and, the tiny Qwen2.5
carrying the ``qwen`` template, give the same token ids and metrics."""

from __future__ import annotations

from pathlib import Path

from mtsql.app.config import load_config
from mtsql.app.runner import run_stage
from mtsql.base.files import read_jsonl

from .test_generation_vllm import without_timings

TINY = Path(__file__).resolve().parents[2] / "configs" / "profiles" / "tiny.yaml"


def evaluate(tmp_path, model, vllm_python, template: str):
    cfg = load_config(
        TINY,
        [
            f"runs_dir={tmp_path / 'runs'}",
            f"model.name={model}",
            f"model.template={template}",
            "data.eval_limit=1",
            "model.dtype=float32",
            "env.max_messages=2",
            "sample.max_new_tokens=24",
            "sample.backend=vllm",
            f"sample.vllm.python={vllm_python}",
            "sample.vllm.kv_cache_gib=1",
        ],
    )
    return run_stage("evaluate", cfg, label=f"e-{template}")


def test_qwen25_family_and_auto_evaluate_with_vllm(tmp_path, tiny_qwen25, vllm_python):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen25)
    named = evaluate(tmp_path, tiny_qwen25, vllm_python, "qwen")
    auto = evaluate(tmp_path, tiny_qwen25, vllm_python, "auto")
    assert named.fingerprint != auto.fingerprint  # model.template is a result field
    for dataset in ("cosql", "sparc"):
        a = read_jsonl(named.path / dataset / "trajectories.jsonl")
        b = read_jsonl(auto.path / dataset / "trajectories.jsonl")
        assert a and [r["key"] for r in a] == [r["key"] for r in b]
        for x, y in zip(a, b, strict=True):
            for field in ("prompt_ids", "response_ids", "response_mask", "final_sql"):
                assert x[field] == y[field], (x["key"], field)
            prompt = tokenizer.decode(x["prompt_ids"])
            assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert without_timings(named.metrics["datasets"]) == without_timings(auto.metrics["datasets"])
