"""Each generation backend's own settings (``sample.<backend>`` in a config), the registry of backends
(``BACKENDS``) and the ``sample`` section that picks one.

A stage's fingerprint covers the settings of the backend it samples with, and only those."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mtsql.base.config import (
    Batch,
    Engine,
    EngineOwned,
    NonNegative,
    Range,
    Samples,
    Seconds,
    Share,
    Tokens,
    operational,
    result,
)
from mtsql.core.agent.settings import Policy

GiB = Annotated[float, Range(0, low_open=True, most=2**14)]  # a memory size, at most 16 TiB
Concurrency = Annotated[int, Range(1, most=1024)]  # requests in flight at once
Retries = Annotated[int, Range(0, most=100)]  # attempts after the first


@dataclass(frozen=True)
class HfSettings:
    """transformers in this process: ``model.dtype`` and ``model.device`` say all it needs."""


@dataclass(frozen=True)
class VllmSettings:
    """A vLLM server mtsql starts for each stage's model and stops after it, or one you run (docs/engines.md).
    The fingerprint also covers the engine's identity (the vLLM version, a user-run server's URL)."""

    base_url: str | None = operational(
        None
    )  # a vLLM server you run instead (its /v1 URL): mtsql cannot verify
    # it (engine_identity records the URL)
    model: str | None = result(None)  # the name that server serves the model under
    python: str | None = operational(
        None
    )  # the Python with vLLM (None: .venv-vllm beside mtsql's venv, else this
    # one); engine_identity records its vLLM version
    kv_cache_gib: GiB | None = operational(
        None
    )  # CPU: the server's KV cache (None: a quarter of the free RAM,
    # <= 8)
    eager: bool | None = operational(None)  # None: eager on CPU (ready in ~30 s), compiled graphs on CUDA
    args: tuple[str, ...] = result(
        ()
    )  # more `vllm ... api_server` arguments, e.g. ["--max-num-seqs", "128"] (any
    # server argument, some of which change tokens)
    start_timeout_s: Seconds = operational(600.0)


@dataclass(frozen=True)
class OpenAISettings:
    """Any OpenAI-compatible server you run."""

    base_url: str = operational(
        "http://127.0.0.1:8000/v1"
    )  # where the server listens; what it serves is model
    model: str | None = result(None)  # the name the server serves the model under (default: its path or id)
    concurrency: Concurrency = operational(8)
    timeout_s: Seconds = operational(120.0)


@dataclass(frozen=True)
class ChatSettings:
    """A chat model behind an OpenAI-style ``/chat/completions`` API (a hosted model, or any server with a
    chat template): messages in, text out; evaluation and sampling only (docs/engines.md, "The chat backend").
    What answers is the model the server names ``model`` at ``base_url``, so both are in the fingerprint."""

    base_url: str = result("https://api.openai.com/v1")  # another URL is another provider's model
    model: str | None = result(None)  # the model name the API serves (required)
    observation_role: Literal["user", "tool"] = result(
        "user"
    )  # the role of a tool's answer: user (wrapped in
    # <tool_response> tags, as Qwen's template renders
    # it; any API takes it) or tool (for a server whose
    # chat template renders tool messages itself)
    extra_body: dict[str, Any] = result(
        default_factory=dict
    )  # more fields of each request, a server's own options
    # (vLLM: {skip_special_tokens: false}); never the
    # fields mtsql sets
    api_key_env: str | None = operational(
        "OPENAI_API_KEY"
    )  # the environment variable holding the key (None or
    # unset: no key sent); the key is never written
    price_input_per_mtok: NonNegative | None = operational(
        None
    )  # USD per million prompt tokens (None: no cost)
    price_output_per_mtok: NonNegative | None = operational(None)  # USD per million completion tokens
    concurrency: Concurrency = operational(8)
    timeout_s: Seconds = operational(120.0)
    max_retries: Retries = operational(6)  # attempts after the first, on connection errors, 429 and 5xx


# The generation backends: one line each (its settings, module and class; the module is imported only when
# the backend is made: engines.backends.backend_class).
BACKENDS = {
    "hf": Engine(HfSettings, "mtsql.engines.backends.hf", "HFBackend"),  # transformers, CPU or one GPU
    "vllm": Engine(VllmSettings, "mtsql.engines.backends.vllm", "VLLMBackend"),  # a vLLM server mtsql starts
    # (or one you run)
    "openai": Engine(
        OpenAISettings, "mtsql.engines.backends.openai", "OpenAIBackend"
    ),  # any OpenAI-compatible
    # server
    "chat": Engine(
        ChatSettings, "mtsql.engines.backends.chat", "ChatBackend"
    ),  # a chat API: messages in, text
    # out (no RL)
}


@dataclass(frozen=True)
class SampleConfig(EngineOwned):
    """Trajectory sampling (rollout); ``sample.<backend>`` holds the backend's own settings."""

    SELECTOR = "backend"
    ENGINES = BACKENDS

    policy: Policy = result("model")
    correction_share: Share = result(
        1.0
    )  # gold_with_correction: the share of trajectories that first run a wrong
    # variant; the others run the gold at once
    failure_share: Share = result(
        0.586
    )  # gold_grounded: the share of trajectories whose first query fails in a
    # way the result shows, then is corrected (policies.MEASURED_FAILURE_SHARE:
    # the share of failed exec_sql turns the SFT model meets)
    backend: str = result(
        "hf"
    )  # a registered generation backend (engines/backends/settings.py: hf, vllm, openai);
    # its settings are sample.<backend>
    n: Samples = result(1)
    temperature: NonNegative = result(0.7)  # 0: greedy
    top_p: Share = result(1.0)
    max_new_tokens: Tokens = result(512)
    batch_size: Batch = operational(16)  # conversations per backend call: each record's seed derives from its
    # turn, sample and message, so records do not depend on batching

    # each backend's settings, typed (a backend added to BACKENDS adds its property here)
    @property
    def hf(self) -> HfSettings:
        return self.owned["hf"]

    @property
    def vllm(self) -> VllmSettings:
        return self.owned["vllm"]

    @property
    def openai(self) -> OpenAISettings:
        return self.owned["openai"]

    @property
    def chat(self) -> ChatSettings:
        return self.owned["chat"]
