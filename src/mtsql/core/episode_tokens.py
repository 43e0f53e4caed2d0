"""The token ids of one multi-turn episode, as the rollout engine and the verl agent loop build them.

    tokens = EpisodeTokens(chat, prompt_ids, max_response_tokens=8000)
    while (limit := tokens.max_new_tokens(per_message=512)):
        generated = tokens.add_generation(model(tokens.sequence, limit), logprobs)
        observation, done, _ = env.step(tokens.text(generated))
        if done or not tokens.add_observation(observation):
            break
    tokens.ids, tokens.mask, tokens.logprobs, tokens.stop

The response is every id after the prompt: per assistant message the generated ids (mask 1) and,
when the conversation goes on, a closing ``<|im_end|>`` if the message stopped without one (at a
stop string or a length cut) and the observation's ids (both mask 0). Token in, token out: the
next message continues ``sequence`` exactly, never a re-rendering of the conversation.

``max_response_tokens`` bounds the response (None: unbounded). A generation is cut to what is
left; an observation that would fill the budget is not added and ends the episode with ``stop ==
"response_length"`` (so a response never ends in an observation the model could not answer).
"""

from __future__ import annotations

from collections.abc import Sequence

from mtsql.core.chat_format import ChatFormat

EPISODE_END, RESPONSE_LENGTH = "episode_end", "response_length"  # values of ``stop``


class EpisodeTokens:
    """Prompt ids, then the response ids with their mask and log-probs, within an optional budget."""

    def __init__(self, chat: ChatFormat, prompt_ids: Sequence[int], max_response_tokens: int | None = None):
        if max_response_tokens is not None and max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be at least 1 or None, got {max_response_tokens}")
        self.chat = chat
        self.prompt_ids = list(prompt_ids)
        self.max_response_tokens = max_response_tokens
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []  # None once a generation came without log-probs
        self.stop = EPISODE_END
        self._open = False  # the last message stopped without <|im_end|>

    @property
    def sequence(self) -> list[int]:
        """Everything so far: what the next message continues."""
        return self.prompt_ids + self.ids

    def room(self) -> int | None:
        """Response ids still allowed (None: no budget)."""
        return None if self.max_response_tokens is None else self.max_response_tokens - len(self.ids)

    def max_new_tokens(self, per_message: int | None = None) -> int | None:
        """The cap of the next message: ``per_message`` within what the budget leaves. 0 (and ``stop``
        set) when the budget is spent; None when neither bounds it."""
        room = self.room()
        if room is not None and room <= 0:
            self.stop = RESPONSE_LENGTH
            return 0
        caps = [c for c in (per_message, room) if c is not None]
        return min(caps) if caps else None

    def add_generation(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> list[int]:
        """Append a generated message (mask 1), cut to the budget; returns the ids kept. Log-probs
        are kept only while every generation brings one per id."""
        room = self.room()
        kept = list(ids if room is None else ids[: max(room, 0)])
        self.ids += kept
        self.mask += [1] * len(kept)
        self._open = not self.closed(kept)
        if self.logprobs is not None:
            if logprobs is not None and len(logprobs) >= len(kept):
                self.logprobs += [float(p) for p in logprobs[: len(kept)]]
            else:
                self.logprobs = None
        return kept

    def closed(self, generated: Sequence[int]) -> bool:
        """Whether a generated message ends with the chat format's ``<|im_end|>``."""
        return bool(generated) and generated[-1] == self.chat.end_of_turn_id

    def text(self, generated: Sequence[int]) -> str:
        """A generated message as the environment reads it: decoded, without its closing ``<|im_end|>``."""
        body = generated[:-1] if self.closed(generated) else generated
        return self.chat.tokenizer.decode(list(body), skip_special_tokens=False)

    def add_observation(self, observation: dict) -> bool:
        """Close the last message and append ``observation``'s ids (mask 0). When they would fill the
        budget nothing is added, ``stop`` becomes ``response_length`` and the answer is False."""
        follow = [self.chat.end_of_turn_id] * self._open + self.chat.observation_ids(observation)
        room = self.room()
        if room is not None and len(follow) >= room:
            self.stop = RESPONSE_LENGTH
            return False
        self.ids += follow
        self.mask += [0] * len(follow)
        self._open = False
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(follow)
        return True
