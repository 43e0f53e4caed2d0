"""``model.dtype`` has one resolver (engines.models.settings.resolve_dtype); an engine whose ``auto`` differs
passes its own choice, and says why where it decides (#49)."""

import ast
import sys
from pathlib import Path

import pytest

from mtsql.app.config import load_config
from mtsql.base.errors import UsageError
from mtsql.engines.backends.vllm import server_spec
from mtsql.engines.models.settings import resolve_dtype

from .source_code import SRC, modules, source_nodes


def test_auto_is_bfloat16_on_cuda_and_float32_on_cpu_unless_the_engine_says_otherwise():
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("auto", "cuda") == "bfloat16" and resolve_dtype("auto", "cuda:1") == "bfloat16"
    assert resolve_dtype("auto", "cuda", auto="float32") == "float32"
    assert resolve_dtype("float16", "cuda", auto="float32") == "float16", "a dtype given is never overridden"
    with pytest.raises(UsageError, match="unknown 'fp8'"):
        resolve_dtype("fp8", "cpu")


def test_each_engine_resolves_auto_through_the_one_resolver(monkeypatch):
    from mtsql.engines.local_grpo.trainer import train_dtype

    monkeypatch.setattr("mtsql.engines.backends.vllm.cpu_has_fast_bf16", lambda: True)
    assert server_spec(Path("m"), python=sys.executable).dtype == "bfloat16"  # vLLM: native bf16 on this CPU
    assert server_spec(Path("m"), python=sys.executable, dtype="float16").dtype == "float16"
    cuda = load_config(None, ["model.device=cuda"]).model
    assert train_dtype(cuda) == "float32", (
        "the local RL engine trains in float32 where hf would take bfloat16"
    )
    assert train_dtype(load_config(None, ["model.dtype=bfloat16"]).model) == "bfloat16"


def test_one_function_is_named_resolve_dtype():
    found = [
        str(path.relative_to(SRC))
        for path in modules()
        for node in source_nodes(path)
        if isinstance(node, ast.FunctionDef) and node.name == "resolve_dtype"
    ]
    assert found == ["engines/models/settings.py"]
