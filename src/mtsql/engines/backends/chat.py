"""A chat model behind an OpenAI-style ``/chat/completions`` API, run through the same agent protocol.

    backend = ChatBackend("gpt-4o", "https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")
    reply = backend.submit_messages(messages, tools, params, seed).result()   # a base.Reply

The conversation goes as chat messages (``api_messages``): the system prompt with the tools described
in it as the token path's chat format describes them (so the model calls a tool by writing a
``<tool_call>`` block, as every mtsql model does, and no API's own function calling is involved), the
user's question, the assistant's earlier messages as written, and each tool answer as a ``user``
message wrapped in ``<tool_response>`` tags (how Qwen's template renders a tool message; every chat API
takes it) or, with ``observation_role: tool``, as a ``tool`` message for a server whose chat template
renders tool messages itself. The reply's text goes to the environment; a stop string the API cut off
is put back. ``extra_body`` adds a server's own request fields (vLLM's ``skip_special_tokens``).

The key is read from the environment variable the config names when the backend starts and is sent in
the ``Authorization`` header only: no artifact, manifest or log holds it, and an API's error text is
cleaned of it before it becomes a message. Connection errors, timeouts, 429 and 5xx are retried with
exponential backoff with full jitter (tenacity; a ``Retry-After`` header is honoured); any other 4xx is a
one-line ``UsageError`` (a wrong key, model or request does not get better by waiting). ``usage``
sums the tokens the API reports, and their cost where the config gives prices.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from mtsql.base.errors import StageFailed, UsageError
from mtsql.core.chat_format import tools_block
from mtsql.engines.backends.base import Backend, Generation, Reply, SamplingParams

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})  # busy or failing for now: worth another try
MAX_WAIT_S = 60.0  # the longest pause between two attempts
SET_BY_MTSQL = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "stream",
    }
)


def api_messages(
    messages: Sequence[dict], tools: Sequence[dict], observation_role: str = "user"
) -> list[dict]:
    """The agent's conversation as chat-API messages (see the module docstring)."""
    out = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "tool" and observation_role == "user":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        elif role == "tool":
            out.append({"role": "tool", "content": content, "tool_call_id": f"call_{len(out)}"})
        else:
            out.append({"role": role, "content": content})
    if tools:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + tools_block(tools)}
        else:
            out.insert(0, {"role": "system", "content": tools_block(tools).lstrip("\n")})
    return out


def reply_text(message: dict, finish_reason: str, stop_reason, stop: Sequence[str]) -> str:
    """The assistant's text: its content, any tool calls the server parsed out of it written back as
    ``<tool_call>`` blocks, and the stop string the API cut off (the one ``stop_reason`` names, else the
    closing tag of a block left open)."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = function.get("arguments")
        text += (
            "<tool_call>\n"
            + json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
            + "\n</tool_call>"
        )
    if finish_reason != "stop" or any(text.endswith(s) for s in stop):
        return text
    if isinstance(stop_reason, str) and stop_reason in stop:
        return text + stop_reason
    for closing in stop:
        opening = closing.replace("</", "<", 1)
        if closing.startswith("</") and text.rfind(opening) > text.rfind(closing):
            return text + closing
    return text


class _Retry(Exception):
    """A failure worth another attempt; ``wait_s``: what the server asked for (Retry-After), if anything."""

    def __init__(self, problem: str, wait_s: float = 0.0):
        super().__init__(problem)
        self.wait_s = wait_s


class ChatBackend(Backend):
    """A client of one chat API (``takes_messages``): ``model`` is the name it serves the model under."""

    schedules_requests = True
    takes_messages = True

    def __init__(
        self,
        model: str | Path,
        base_url: str = "https://api.openai.com/v1",
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        observation_role: str = "user",
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 6,
        backoff_s: float = 1.0,
        price_input_per_mtok: float | None = None,
        price_output_per_mtok: float | None = None,
        extra_body: dict | None = None,
    ):
        import httpx

        if not model:
            raise UsageError("the chat backend needs the model name the API serves: set sample.chat.model")
        if observation_role not in ("user", "tool"):
            raise UsageError(f"sample.chat.observation_role: '{observation_role}': choose user or tool")
        if taken := sorted(set(extra_body or {}) & SET_BY_MTSQL):
            raise UsageError(
                f"sample.chat.extra_body sets {', '.join(taken)}, which mtsql sets itself (the model, the "
                "messages and the sampling settings of sample)"
            )
        self.extra_body = dict(extra_body or {})
        self._key = os.environ.get(api_key_env) if api_key_env else None
        if api_key_env and not self._key:
            raise UsageError(
                f"the chat backend reads its API key from ${api_key_env}, which is not set: export it, "
                "or set sample.chat.api_key_env=null for a server that needs no key"
            )
        self.httpx = httpx
        self.tokenizer, self.end_of_turn_ids = None, frozenset()
        self.base_url, self.served_model = base_url.rstrip("/"), str(model)
        self.url = self.base_url + "/chat/completions"
        self.observation_role, self.max_retries, self.backoff_s = observation_role, max_retries, backoff_s
        self.prices = (price_input_per_mtok, price_output_per_mtok)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self.client = httpx.Client(
            timeout=timeout_s, headers=headers, limits=httpx.Limits(max_connections=concurrency)
        )
        self._lock = threading.Lock()
        self._counts = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "unreported": 0}
        try:
            self._check_served()
        except BaseException:
            self.client.close()
            raise
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="chat-backend")

    @classmethod
    def options(cls, cfg, *, log_path: Path | None = None) -> dict:
        chat = cfg.sample.chat
        return {
            "base_url": chat.base_url,
            "api_key_env": chat.api_key_env,
            "observation_role": chat.observation_role,
            "concurrency": chat.concurrency,
            "timeout_s": chat.timeout_s,
            "max_retries": chat.max_retries,
            "price_input_per_mtok": chat.price_input_per_mtok,
            "price_output_per_mtok": chat.price_output_per_mtok,
            "extra_body": chat.extra_body,
        }

    def generate(self, prompts, params, seeds=None) -> list[Generation]:
        raise UsageError(
            "the chat backend takes messages, not token ids: it samples and evaluates through the "
            "rollout engine, and cannot roll out for RL training"
        )

    def submit_messages(
        self, messages: Sequence[dict], tools: Sequence[dict], params: SamplingParams, seed: int
    ) -> Future[Reply]:
        body = {
            "model": self.served_model,
            "messages": api_messages(messages, tools, self.observation_role),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": seed,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        body |= self.extra_body
        return self.pool.submit(self._chat, body, params.stop)

    def usage(self) -> dict:
        """Requests, prompt and completion tokens the API reported (``unreported``: answers without usage),
        the prices per million tokens and the cost in USD (None without both prices)."""
        with self._lock:
            counts = dict(self._counts)
        price_in, price_out = self.prices
        cost = None
        if price_in is not None and price_out is not None:
            cost = (counts["prompt_tokens"] * price_in + counts["completion_tokens"] * price_out) / 1e6
        return counts | {
            "model": self.served_model,
            "base_url": self.base_url,
            "price_input_per_mtok": price_in,
            "price_output_per_mtok": price_out,
            "cost_usd": cost,
        }

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    # -- requests ---------------------------------------------------------------------------------

    def _chat(self, body: dict, stop: Sequence[str]) -> Reply:
        answer = self._post(body)
        try:
            choice = answer["choices"][0]
            message, reason = choice["message"], choice["finish_reason"]
            if not isinstance(message, dict):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise StageFailed(
                f"{self.url}: not a chat completion (no choices[0].message / finish_reason): "
                f"{self._snippet(str(answer))}"
            ) from None
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        with self._lock:
            self._counts["requests"] += 1
            if isinstance(prompt, int) and isinstance(completion, int):
                self._counts["prompt_tokens"] += prompt
                self._counts["completion_tokens"] += completion
            else:
                self._counts["unreported"] += 1
        text = reply_text(message, reason, choice.get("stop_reason"), stop)
        return Reply(
            text,
            "length" if reason == "length" else "stop",
            prompt if isinstance(prompt, int) else None,
            completion if isinstance(completion, int) else None,
        )

    def _post(self, body: dict) -> dict:
        backoff = wait_random_exponential(multiplier=self.backoff_s, max=MAX_WAIT_S)
        retrying = Retrying(
            retry=retry_if_exception_type(_Retry),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=lambda state: max(backoff(state), state.outcome.exception().wait_s),
        )
        try:
            response = retrying(self._send, body)
        except RetryError as exc:
            problem = exc.last_attempt.exception()
            raise StageFailed(
                f"{self.url}: no answer after {self.max_retries + 1} attempts: {problem}"
            ) from None
        try:
            return response.json()
        except ValueError:
            raise StageFailed(
                f"{self.url}: the server answered with something that is not JSON: "
                f"{self._snippet(response.text)}"
            ) from None

    def _send(self, body: dict):
        """One request: the response, ``_Retry`` for what may pass, ``UsageError`` for any other 4xx."""
        try:
            response = self.client.post(self.url, json=body)
        except self.httpx.TransportError as exc:  # refused, reset, timed out
            raise _Retry(self._snippet(f"{type(exc).__name__}: {exc}")) from None
        status = response.status_code
        if status in RETRY_STATUSES or status >= 500:
            raise _Retry(f"HTTP {status}: {self._snippet(response.text)}", _retry_after(response))
        if status >= 400:
            raise UsageError(f"{self.url}: HTTP {status}{_hint(status)}: {self._snippet(response.text)}")
        return response

    def _check_served(self) -> None:
        """One line, before any work, when the API is unreachable, refuses the key or does not serve the
        model."""
        try:
            answer = self.client.get(self.base_url + "/models", timeout=30.0)
        except self.httpx.TransportError as exc:
            raise UsageError(
                f"cannot reach the chat API at {self.base_url} ({type(exc).__name__}): start the server "
                "or fix sample.chat.base_url"
            ) from None
        if answer.status_code in (401, 403):
            raise UsageError(
                f"{self.base_url}/models: HTTP {answer.status_code}{_hint(answer.status_code)}: "
                f"{self._snippet(answer.text)}"
            )
        if answer.status_code != 200:
            return  # an API without a model list: the first request will tell
        try:
            served = [m["id"] for m in answer.json()["data"]]
        except (ValueError, KeyError, TypeError):
            return
        if served and self.served_model not in served:
            listed = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
            raise UsageError(
                f"the chat API at {self.base_url} serves {listed}, not '{self.served_model}': "
                "set sample.chat.model"
            )

    def _snippet(self, text: str, limit: int = 200) -> str:
        """``text`` on one line, cut to ``limit`` characters, with the key (or any part an API echoed)
        masked."""
        text = " ".join(text.split())
        if self._key:
            text = text.replace(self._key, "***")
            if len(self._key) >= 12:  # an API that echoes the key's ends (sk-ab...wxyz)
                text = re.sub(re.escape(self._key[:6]) + r"\S*", "***", text)
        return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(response) -> float:
    """The seconds a ``Retry-After`` header asks for (0 when absent or a date), at most ``MAX_WAIT_S``."""
    try:
        return min(float(response.headers.get("retry-after", 0)), MAX_WAIT_S)
    except ValueError:
        return 0.0


def _hint(status: int) -> str:
    return {
        401: " (the key was refused: check the variable sample.chat.api_key_env names)",
        403: " (the key may not use this model)",
        404: " (check sample.chat.base_url and sample.chat.model)",
    }.get(status, "")
