"""Generation through any OpenAI-compatible completions server (vLLM serve, SGLang, llama.cpp).

Prompts are sent as token ids to ``{base_url}/completions``, one request per prompt, at most
``concurrency`` in flight (``submit`` returns a future per prompt, so a caller can hand each
conversation on as soon as its message is done). Before the first request the backend asks
``{base_url}/models`` whether the server is up and serves the model, and says which of the two is
wrong in one line. Connection errors, timeouts, HTTP 429 and 5xx are retried with exponential
backoff; other HTTP errors and malformed answers fail at once with one clear line.

The continuation's ids are taken from the answer when the server returns them (vLLM's
``return_token_ids``); otherwise the text is encoded, with the stop string put back if the server
cut it and the end-of-turn id appended when the server stopped on it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from mtsql.base.errors import StageFailed, UsageError
from mtsql.engines.backends.base import CHAT_TURN_ENDS, Backend, Generation, SamplingParams, end_of_turn_ids


class OpenAIBackend(Backend):
    """A client of one OpenAI-compatible server.

    ``tokenizer`` (a loaded tokenizer or where to load one; default: ``model``) must match the served model.
    """

    schedules_requests = True

    def __init__(
        self,
        model: str | Path,
        base_url: str = "http://127.0.0.1:8000/v1",
        *,
        served_model: str | None = None,
        tokenizer: object = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        api_key: str | None = None,
    ):
        import httpx
        from transformers import AutoTokenizer

        if concurrency < 1:
            raise UsageError("openai backend: concurrency must be at least 1")
        try:
            loaded = tokenizer is not None and not isinstance(tokenizer, (str, Path))
            self.tokenizer = tokenizer if loaded else AutoTokenizer.from_pretrained(tokenizer or model)
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"openai backend: cannot load the tokenizer of '{tokenizer or model}': "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            ) from None
        self.httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/completions"
        self.served_model = served_model or str(model)
        self.max_retries, self.backoff_s = max_retries, backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            timeout=timeout_s, headers=headers, limits=httpx.Limits(max_connections=concurrency)
        )
        self._check_served()
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="openai-backend")
        self.end_of_turn_ids = end_of_turn_ids(self.tokenizer)
        turn_ends = [self.tokenizer.convert_tokens_to_ids(t) for t in CHAT_TURN_ENDS]
        self.end_of_turn_id = next(
            (i for i in turn_ends if i in self.end_of_turn_ids), self.tokenizer.eos_token_id
        )

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        seeds = self._seeds(prompts, params, seeds)
        jobs = [self.submit(p, params, s) for p, s in zip(prompts, seeds, strict=True)]
        return [job.result() for job in jobs]

    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int) -> Future[Generation]:
        return self.pool.submit(self._complete, list(prompt), params, seed)

    @classmethod
    def options(cls, cfg, *, log_path: Path | None = None) -> dict:
        sample = cfg.sample
        return {
            "base_url": sample.openai.base_url,
            "served_model": sample.openai.model,
            "concurrency": sample.openai.concurrency,
            "timeout_s": sample.openai.timeout_s,
        }

    def load_weights(self, model, folder: Path) -> None:
        """Refused: a server someone else runs cannot be made to serve new weights."""
        raise UsageError(
            f"the server at {self.base_url} was not started by mtsql: it cannot take new weights "
            "(train with rl.local.rollout_backend=hf or vllm)"
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def _check_served(self) -> None:
        """One line, before any work, when the server is not up or does not serve ``served_model``."""
        try:
            answer = self.client.get(self.base_url + "/models", timeout=30.0)
        except self.httpx.TransportError as exc:
            raise UsageError(
                f"cannot reach the server at {self.base_url} ({type(exc).__name__}): start it, or "
                "fix the base URL (sample.openai.base_url / sample.vllm.base_url)"
            ) from None
        if answer.status_code != 200:
            return  # a server without a model list: requests will tell
        try:
            served = [m["id"] for m in answer.json()["data"]]
        except (ValueError, KeyError, TypeError):
            return
        if served and self.served_model not in served:
            raise UsageError(
                f"the server at {self.base_url} serves {', '.join(served)}, not '{self.served_model}': "
                "set the served model name (sample.openai.model / sample.vllm.model)"
            )

    def gone(self) -> bool:
        """Whether the server is known to have exited (only for one mtsql started itself)."""
        return False

    def _complete(self, prompt: list[int], params: SamplingParams, seed: int) -> Generation:
        body = {
            "model": self.served_model,
            "prompt": prompt,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": seed,
            "stop": list(params.stop),
            "stop_token_ids": sorted(self.end_of_turn_ids),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "return_token_ids": True,
        }
        if params.logprobs:
            body["logprobs"] = 0
        return self._parse(self._post(body), params)

    def _post(self, body: dict) -> dict:
        httpx = self.httpx
        delay, problem = self.backoff_s, ""
        for attempt in range(self.max_retries + 1):
            if attempt and self.gone():
                break  # the server mtsql started has exited: no retry can reach it
            if attempt:
                time.sleep(delay)
                delay *= 2
            try:
                response = self.client.post(self.url, json=body)
            except httpx.TransportError as exc:  # refused, reset, timed out
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if response.status_code == 429 or (response.status_code >= 500 and response.status_code != 501):
                problem = f"HTTP {response.status_code}: {_snippet(response.text)}"
                continue
            if response.status_code in (404, 405, 501):  # no completions endpoint here
                what = response.headers.get("server", "a server that does not name itself")
                raise UsageError(
                    f"{self.url}: HTTP {response.status_code} from {what}: not an OpenAI-compatible "
                    "completions server; fix the base URL (sample.openai.base_url / "
                    f"sample.vllm.base_url): {_snippet(response.text)}"
                )
            if response.status_code >= 400:
                raise StageFailed(f"{self.url}: HTTP {response.status_code}: {_snippet(response.text)}")
            try:
                return response.json()
            except ValueError:
                raise StageFailed(
                    f"{self.url}: the server answered with something that is not JSON: "
                    f"{_snippet(response.text)}"
                ) from None
        raise StageFailed(
            f"{self.url}: no answer after {self.max_retries + 1} attempts (is the server up?): {problem}"
        )

    def _parse(self, answer: dict, params: SamplingParams) -> Generation:
        try:
            choice = answer["choices"][0]
            text, reason = choice["text"], choice["finish_reason"]
        except (KeyError, IndexError, TypeError):
            raise StageFailed(
                f"{self.url}: not a completions answer (no choices[0].text / finish_reason): "
                f"{_snippet(str(answer))}"
            ) from None
        if not isinstance(text, str):
            raise StageFailed(f"{self.url}: choices[0].text is not a string: {_snippet(str(answer))}")
        ids = choice.get("token_ids")
        if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            ids = self._ids_from_text(text, reason, choice.get("stop_reason"), params)
        logprobs = None
        if params.logprobs and isinstance(choice.get("logprobs"), dict):
            values = choice["logprobs"].get("token_logprobs")
            if isinstance(values, list) and len(values) == len(ids):
                logprobs = [float(v) for v in values]
        return self._generation(ids, "length" if reason == "length" else "stop", logprobs)

    def _ids_from_text(self, text: str, reason: str, stop_reason, params: SamplingParams) -> list[int]:
        if (
            reason == "stop"
            and isinstance(stop_reason, str)
            and stop_reason in params.stop
            and not text.endswith(stop_reason)
        ):
            text += stop_reason  # a server that cut the stop string off
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if reason == "stop" and not any(text.endswith(s) for s in params.stop):
            ids.append(self.end_of_turn_id)
        return ids


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
