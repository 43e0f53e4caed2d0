"""EpisodeTokens: the one bookkeeping of an episode's ids, mask, log-probs and response budget."""

from __future__ import annotations

import pytest

from mtsql.core.chat_format import ChatFormat
from mtsql.core.episode_tokens import EPISODE_END, RESPONSE_LENGTH, EpisodeTokens

OBSERVATION = {"role": "tool", "content": "(1,)"}


@pytest.fixture(scope="module")
def chat(tiny_tokenizer):
    return ChatFormat(tiny_tokenizer)


def encode(chat, text):
    return chat.tokenizer.encode(text, add_special_tokens=False)


def test_messages_and_observations_are_masked_and_closed(chat):
    end = chat.end_of_turn_id
    tokens = EpisodeTokens(chat, [1, 2, 3])
    call = encode(chat, "<tool_call>x</tool_call>")  # stopped at a stop string: no <|im_end|>
    assert tokens.add_generation(call, [-0.5] * len(call)) == call
    assert tokens.text(call) == "<tool_call>x</tool_call>"
    assert tokens.add_observation(OBSERVATION)
    observation = chat.observation_ids(OBSERVATION)
    assert tokens.ids == call + [end] + observation  # the closing <|im_end|> is added, unmasked
    assert tokens.mask == [1] * len(call) + [0] * (1 + len(observation))
    reply = encode(chat, "ok") + [end]  # closed by the model: nothing added
    tokens.add_generation(reply, [-0.25] * len(reply))
    assert tokens.text(reply) == "ok"
    assert tokens.add_observation(OBSERVATION)
    assert tokens.ids[-len(observation) - len(reply) :] == reply + observation
    assert tokens.sequence == [1, 2, 3] + tokens.ids
    assert tokens.logprobs == (
        [-0.5] * len(call) + [0.0] * (1 + len(observation)) + [-0.25] * len(reply) + [0.0] * len(observation)
    )
    assert tokens.stop == EPISODE_END and tokens.max_new_tokens(64) == 64 and tokens.max_new_tokens() is None


def test_log_probs_are_dropped_once_a_generation_lacks_them(chat):
    tokens = EpisodeTokens(chat, [1])
    tokens.add_generation([5, 6], [-1.0, -2.0])
    tokens.add_observation(OBSERVATION)
    tokens.add_generation([7, 8], None)
    assert tokens.logprobs is None
    tokens.add_generation([9], [-1.0])
    assert tokens.logprobs is None and tokens.mask[-1] == 1


def test_the_budget_cuts_generations_and_refuses_observations_that_fill_it(chat):
    observation = chat.observation_ids(OBSERVATION)
    budget = 4 + 1 + len(observation) + 2
    tokens = EpisodeTokens(chat, [1], max_response_tokens=budget)
    assert tokens.max_new_tokens(100) == budget
    tokens.add_generation([5, 6, 7, 8])
    assert tokens.add_observation(OBSERVATION)  # 4 + 1 + len(observation) < budget: fits
    assert tokens.room() == 2 and tokens.max_new_tokens(100) == 2
    assert tokens.add_generation([9, 10, 11], [-1.0] * 3) == [9, 10]  # cut to what is left
    assert len(tokens.ids) == budget and tokens.max_new_tokens(100) == 0 and tokens.stop == RESPONSE_LENGTH
    exact = EpisodeTokens(chat, [1], max_response_tokens=3 + 1 + len(observation))
    exact.add_generation([5, 6, 7])
    assert not exact.add_observation(OBSERVATION)  # it would fill the budget: no room left to answer it
    assert exact.ids == [5, 6, 7] and exact.mask == [1, 1, 1] and exact.stop == RESPONSE_LENGTH
    with pytest.raises(ValueError, match="at least 1"):
        EpisodeTokens(chat, [1], max_response_tokens=0)
