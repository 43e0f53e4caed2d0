"""Each generation backend's own settings: ``sample.<backend>`` in a config (``base.config.owned_by``).

A stage's fingerprint covers the settings of the backend it samples with, and only those."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mtsql.base.config import NonNegative, Range, SampleConfig, Seconds, operational, owned_by, result

GiB = Annotated[float, Range(0, low_open=True, most=2**14)]  # a memory size, at most 16 TiB
Concurrency = Annotated[int, Range(1, most=1024)]  # requests in flight at once
Retries = Annotated[int, Range(0, most=100)]  # attempts after the first


@owned_by(SampleConfig, "hf")
@dataclass(frozen=True)
class HfSettings:
    """transformers in this process: ``model.dtype`` and ``model.device`` say all it needs."""


@owned_by(SampleConfig, "vllm")
@dataclass(frozen=True)
class VllmSettings:
    """A vLLM server mtsql starts for each stage's model and stops after it, or one you run (docs/engines.md).
    The fingerprint also covers the engine's identity (the vLLM version, a user-run server's URL)."""

    base_url: str | None = operational(None)  # a vLLM server you run instead (its /v1 URL): mtsql cannot verify
                                              # it (engine_identity records the URL)
    model: str | None = result(None)  # the name that server serves the model under
    python: str | None = operational(None)  # the Python with vLLM (None: .venv-vllm beside mtsql's venv, else this
                                            # one); engine_identity records its vLLM version
    kv_cache_gib: GiB | None = operational(None)  # CPU: the server's KV cache (None: a quarter of the free RAM,
                                                  # <= 8)
    eager: bool | None = operational(None)  # None: eager on CPU (ready in ~30 s), compiled graphs on CUDA
    args: tuple[str, ...] = result(())  # more `vllm ... api_server` arguments, e.g. ["--max-num-seqs", "128"] (any
                                        # server argument, some of which change tokens)
    start_timeout_s: Seconds = operational(600.0)


@owned_by(SampleConfig, "openai")
@dataclass(frozen=True)
class OpenAISettings:
    """Any OpenAI-compatible server you run."""

    base_url: str = operational("http://127.0.0.1:8000/v1")  # where the server listens; what it serves is model
    model: str | None = result(None)  # the name the server serves the model under (default: its path or id)
    concurrency: Concurrency = operational(8)
    timeout_s: Seconds = operational(120.0)


@owned_by(SampleConfig, "chat")
@dataclass(frozen=True)
class ChatSettings:
    """A chat model behind an OpenAI-style ``/chat/completions`` API (a hosted model, or any server with a
    chat template): messages in, text out; evaluation and sampling only (docs/engines.md, "The chat backend").
    What answers is the model the server names ``model`` at ``base_url``, so both are in the fingerprint."""

    base_url: str = result("https://api.openai.com/v1")  # another URL is another provider's model
    model: str | None = result(None)  # the model name the API serves (required)
    observation_role: Literal["user", "tool"] = result("user")  # the role of a tool's answer: user (wrapped in
                                                              # <tool_response> tags, as Qwen's template renders
                                                              # it; any API takes it) or tool (for a server whose
                                                              # chat template renders tool messages itself)
    extra_body: dict[str, Any] = result(default_factory=dict)  # more fields of each request, a server's own options
                                                              # (vLLM: {skip_special_tokens: false}); never the
                                                              # fields mtsql sets
    api_key_env: str | None = operational("OPENAI_API_KEY")  # the environment variable holding the key (None or
                                                              # unset: no key sent); the key is never written
    price_input_per_mtok: NonNegative | None = operational(None)  # USD per million prompt tokens (None: no cost)
    price_output_per_mtok: NonNegative | None = operational(None)  # USD per million completion tokens
    concurrency: Concurrency = operational(8)
    timeout_s: Seconds = operational(120.0)
    max_retries: Retries = operational(6)  # attempts after the first, on connection errors, 429 and 5xx
