"""The generation interface every backend implements: token ids in, token ids out.

    backend = make_backend("hf", model_path)      # mtsql.engines.backends
    outs = backend.generate([prompt_ids, ...], SamplingParams(temperature=0.7, max_new_tokens=256,
                                                             stop=("</tool_call>",)), seeds=[11, 12])
    outs[0].token_ids, outs[0].text, outs[0].finish_reason  # "stop" or "length"

A generation stops at an end-of-turn token (kept as the last id, not in ``text``), right after a
stop string (kept in both), or after ``max_new_tokens`` ids (``finish_reason == "length"``).
Each prompt has its own seed, so a sampled continuation does not depend on what else is in the batch.

A chat backend (``takes_messages``) is the exception: it sends the conversation's messages to a chat API
and gets text back (``submit_messages``, a ``Reply`` with the token usage the API reports); it has no
tokenizer, generates for evaluation and sampling only, and ``usage`` sums what it was billed for.

The local RL engine rolls out with the model it trains through this interface only: it trains the
backend's own model where there is one (``in_process_model``), hands the weights over after each
update (``load_weights``) and ``close``s the backend at the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from mtsql.base.errors import UsageError


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one assistant message. ``temperature == 0`` is greedy decoding."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0  # base seed: prompt i gets seed + i unless seeds are given
    stop: tuple[str, ...] = ()
    logprobs: bool = False

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1:
            raise ValueError(f"invalid sampling parameters: {self}")


@dataclass
class Generation:
    """One continuation: its ids, its text (without a final end-of-turn token), why it ended."""

    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" | "length"
    logprobs: list[float] | None = field(default=None, repr=False)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class Reply:
    """One assistant message from a chat API: its text, why it ended ("stop" | "length"), and the tokens the
    API counted for the request (None where it did not say)."""

    text: str
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None


class Backend(ABC):
    """A model that continues token-id prompts. ``end_of_turn_ids``: ids that end an assistant message.

    ``schedules_requests``: the backend queues and schedules any number of prompts itself (a vLLM or
    other server): a caller hands it each prompt as soon as it is ready (``submit``) rather than a
    fixed batch, and takes each continuation as soon as it is done.

    ``takes_messages``: a chat API (messages in, text out: ``submit_messages``); its model is the one its
    server names, not a local folder, so a stage gives it no model path and no trained artifact.
    """

    tokenizer: object
    end_of_turn_ids: frozenset[int]
    schedules_requests: bool = False
    takes_messages: bool = False

    @abstractmethod
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """One continuation per prompt, in order."""

    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int) -> Future[Generation]:
        """One continuation, computed in the background (backends that ``schedules_requests``)."""
        raise NotImplementedError(f"{type(self).__name__} generates in batches: call generate")

    def submit_messages(
        self, messages: Sequence[dict], tools: Sequence[dict], params: SamplingParams, seed: int
    ) -> Future[Reply]:
        """The next assistant message of a conversation (``system``, ``user``, ``assistant``, ``tool``
        messages; ``tools``: the schemas the agent may call), computed in the background
        (``takes_messages``)."""
        raise NotImplementedError(f"{type(self).__name__} continues token ids: call generate")

    def usage(self) -> dict | None:
        """What a billed API counted so far (requests, tokens, cost); None: nothing is billed."""
        return None

    def batch_limit(self, tokens_per_row: int) -> int | None:
        """The most rows of ``tokens_per_row`` ids (prompt + new) one call can hold; None: no limit of its
        own."""
        return None

    @classmethod
    def options(cls, cfg, *, log_path: Path | None = None) -> dict:
        """Constructor options from a config (sections ``model``, ``sample``, ``seed``) for a generating
        stage; ``log_path``: where a server the backend starts writes its output."""
        return {}

    @classmethod
    def training_options(cls, cfg, *, dtype: str, log_path: Path | None = None) -> dict:
        """Constructor options for the local RL engine's rollouts (``rl``, ``model``, ``sample``, ``seed``),
        ``dtype``: the one the model trains in. Default: this backend cannot roll out for training."""
        raise UsageError(
            f"the {cls.__name__} backend cannot take the weights being trained: "
            "set rl.local.rollout_backend to hf or vllm"
        )

    def in_process_model(self):
        """The transformers model this backend generates with in this process, for a trainer to train in
        place (then hand back through ``load_weights``); None: the weights live elsewhere (a server)."""
        return None

    def load_weights(self, model, folder: Path) -> None:
        """Generate with ``model``'s current weights from now on (a transformers model with this backend's
        tokenizer: the model the local RL engine trains). A backend that runs elsewhere receives them as an
        HF folder written to ``folder``. What was kept from the old weights (keys/values) is dropped."""
        raise UsageError(f"the {type(self).__name__} backend cannot take new weights")

    def close(self) -> None:  # noqa: B027 (a default, not a stub: most backends hold nothing to release)
        """Release the model or connections."""

    def forget(self, tokens: Sequence[int]) -> None:  # noqa: B027 (a default: most backends keep nothing)
        """The conversation whose ids are ``tokens`` ends: what was kept to continue it may go."""

    def _seeds(self, prompts: Sequence, params: SamplingParams, seeds: Sequence[int] | None) -> list[int]:
        if seeds is None:
            return [params.seed + i for i in range(len(prompts))]
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        return list(seeds)

    def _generation(
        self, token_ids: list[int], finish_reason: str, logprobs: list[float] | None = None
    ) -> Generation:
        """A ``Generation`` of ids already cut at their stop; the text leaves out a final end-of-turn id."""
        body = token_ids[:-1] if token_ids and token_ids[-1] in self.end_of_turn_ids else token_ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        return Generation(list(token_ids), text, finish_reason, logprobs)


CHAT_TURN_ENDS = ("<|im_end|>", "<|eot_id|>")  # ChatML's (Qwen, SmolLM2) and Llama-3's end of a chat turn


def end_of_turn_ids(tokenizer, *extra: int | Sequence[int] | None) -> frozenset[int]:
    """The ids that end an assistant message: the tokenizer's end of sequence, the chat families' ends of
    turn (``CHAT_TURN_ENDS``) and any ``extra`` ids (a model's generation config), less unknown-token
    stand-ins."""
    ids = {tokenizer.eos_token_id, *(tokenizer.convert_tokens_to_ids(t) for t in CHAT_TURN_ENDS)}
    for item in extra:
        ids.update(item if isinstance(item, (list, tuple, set, frozenset)) else [item])
    return frozenset(i for i in ids if i is not None and i != tokenizer.unk_token_id)


def completes_stop_string(tokenizer, ids: Sequence[int], stop: Sequence[str]) -> bool:
    """Whether the last id of ``ids`` completes one of the ``stop`` strings."""
    if not stop or not ids:
        return False
    width = max(len(s) for s in stop)  # every id decodes to at least one character
    tail = tokenizer.decode(list(ids[-width:]), skip_special_tokens=False)
    before = tokenizer.decode(list(ids[-width:-1]), skip_special_tokens=False)
    return any(s in tail and s not in before for s in stop)
