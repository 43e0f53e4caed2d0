"""Generation backends behind one interface (``base.Backend``): token ids in, token ids out.

    backend = make_backend("hf", model_path, dtype="float32", device="cpu")

``BACKENDS`` names the module and class of each; a backend's module is imported only when it is
made, so the ``vllm`` extra (GPU machines) is needed only by the ``vllm`` backend.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from mtsql.backends.base import Backend
from mtsql.errors import UsageError

BACKENDS = {
    "hf": ("mtsql.backends.hf", "HFBackend"),  # transformers, CPU or one GPU
    "vllm": ("mtsql.backends.vllm", "VLLMBackend"),  # vLLM in-process (GPU extra)
    "openai": ("mtsql.backends.openai", "OpenAIBackend"),  # any OpenAI-compatible server
}


def make_backend(kind: str, model: str | Path, **options) -> Backend:
    """A backend by name (``BACKENDS``); ``options`` go to its constructor."""
    if kind not in BACKENDS:
        raise UsageError(f"unknown backend '{kind}': choose {', '.join(BACKENDS)}")
    module, name = BACKENDS[kind]
    return getattr(importlib.import_module(module), name)(model, **options)
