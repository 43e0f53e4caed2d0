"""Generation backends behind one interface (``base.Backend``): token ids in, token ids out.

    backend = make_backend("hf", model_path, dtype="float32", device="cpu")

``BACKENDS`` (``backends/settings.py``) names the settings, module and class of each; a backend's module
is imported only when it is made. A class reads its own settings from a config (``options``,
``training_options``): ``backend_for`` makes the one ``sample.backend`` names, ``training_backend`` the
one ``rl.local.rollout_backend`` names. ``engine_identity`` is what a generating stage's fingerprint
records of its engine beyond the config: for the ``vllm`` backend, the vLLM version and the server
settings that change tokens.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.engines.backends.base import Backend
from mtsql.engines.backends.settings import BACKENDS


def backend_class(kind: str) -> type[Backend]:
    """The class of a backend by name (``BACKENDS``), its module imported now."""
    if kind not in BACKENDS:
        raise UsageError(f"unknown backend '{kind}': choose {', '.join(BACKENDS)}")
    return getattr(importlib.import_module(BACKENDS[kind].module), BACKENDS[kind].attribute)


def make_backend(kind: str, model: str | Path, **options) -> Backend:
    """A backend by name (``BACKENDS``); ``options`` go to its constructor."""
    return backend_class(kind)(model, **options)


def backend_for(cfg, model: str | Path, *, log_path: Path | None = None) -> Backend:
    """The ``sample.backend`` a config names, for ``model``, with its settings (``Backend.options``)."""
    cls = backend_class(cfg.sample.backend)
    return cls(model, **cls.options(cfg, log_path=log_path))


def api_model(cfg, trained=None) -> str | None:
    """The model name a chat-API backend (``takes_messages``) asks its server for, or None for a backend that
    generates with a local model (a folder, or a trained artifact ``trained``). A chat API cannot be given a
    trained artifact: that is one line."""
    cls = backend_class(cfg.sample.backend)
    if not cls.takes_messages:
        return None
    settings = cfg.sample.owned[cfg.sample.backend]
    if trained is not None:
        raise UsageError(
            f"sample.backend={cfg.sample.backend} generates with the model its API serves "
            f"(sample.{cfg.sample.backend}.model), not a trained artifact: evaluate or sample that with "
            "hf, vllm or openai"
        )
    if not settings.model:
        raise UsageError(
            f"sample.backend={cfg.sample.backend}: set sample.{cfg.sample.backend}.model to the model "
            "name the API serves"
        )
    return settings.model


def training_backend(cfg, model: str | Path, *, dtype: str, log_path: Path | None = None) -> Backend:
    """The ``rl.local.rollout_backend`` a config names, to roll out the local RL engine's model
    (``Backend.training_options``; ``dtype``: the one the model trains in)."""
    cls = backend_class(cfg.rl.local.rollout_backend)
    return cls(model, **cls.training_options(cfg, dtype=dtype, log_path=log_path))


def server_options(cfg) -> dict:
    """The managed vLLM server's settings in a config (sections ``model``, ``sample``, ``seed``)."""
    sample = cfg.sample
    return {
        "dtype": cfg.model.dtype,
        "device": cfg.model.device,
        "seed": cfg.seed,
        "python": sample.vllm.python,
        "kv_cache_gib": sample.vllm.kv_cache_gib,
        "eager": sample.vllm.eager,
        "extra_args": sample.vllm.args,
    }


def engine_identity(cfg) -> dict:
    """What generated a stage's tokens, beyond its config: {} for hf, openai and chat (the config says it
    all, or nothing can be known); for vllm, the managed server's version and token-changing
    settings, or a user-run server's URL with a note that it cannot be verified."""
    if cfg.sample.backend != "vllm":
        return {}
    from mtsql.engines.backends.vllm import server_spec, user_server_identity

    if cfg.sample.vllm.base_url:
        return user_server_identity(cfg.sample.vllm.base_url, cfg.sample.vllm.model)
    return server_spec("<model>", **server_options(cfg)).identity()
