"""The transformers backend on the tiny Qwen3: batching, stops, seeds, logprobs, KV reuse."""

from __future__ import annotations

import json
import os

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.chat_format import ChatFormat
from mtsql.engines.backends import make_backend
from mtsql.engines.backends.base import Generation, SamplingParams

QUESTIONS = [
    "Hi.",
    "How many singers are there in the database?",
    "List all concerts held in 2014, newest first.",
    "x",
]


@pytest.fixture(scope="module")
def chat(tiny_backend):
    return ChatFormat(tiny_backend.tokenizer)


@pytest.fixture(scope="module")
def prompts(chat):
    return [
        chat.prompt_ids([{"role": "system", "content": "Answer with SQL."}, {"role": "user", "content": q}])
        for q in QUESTIONS
    ]


def ids_of(generations: list[Generation]) -> list[list[int]]:
    return [g.token_ids for g in generations]


def test_batched_greedy_equals_one_prompt_at_a_time(tiny_backend, prompts):
    params = SamplingParams(max_new_tokens=12)
    batched = tiny_backend.generate(prompts, params)
    alone = [tiny_backend.generate([p], params)[0] for p in prompts]
    assert ids_of(batched) == ids_of(alone)
    assert len({len(p) for p in prompts}) == len(prompts)  # really different lengths, so really padded
    assert all(g.finish_reason == "length" and len(g.token_ids) == 12 for g in batched)
    assert [g.text for g in batched] == [tiny_backend.tokenizer.decode(g.token_ids) for g in batched]


def test_greedy_ids_are_those_of_transformers_generate(tiny_backend, prompts, monkeypatch):
    import torch

    monkeypatch.setattr(tiny_backend, "cache", None)
    ours = tiny_backend.generate(prompts, SamplingParams(max_new_tokens=10))
    for prompt, got in zip(prompts, ours, strict=True):
        with torch.inference_mode():
            ref = tiny_backend.model.generate(
                torch.tensor([prompt]),
                max_new_tokens=10,
                do_sample=False,
                eos_token_id=sorted(tiny_backend.end_of_turn_ids),
            )
        assert got.token_ids == ref[0, len(prompt) :].tolist()


def test_rows_that_end_leave_the_batch_and_the_others_go_on_unchanged(tiny_backend, prompts, monkeypatch):
    from mtsql.engines.backends import hf

    params, seeds = SamplingParams(max_new_tokens=12, temperature=1.0), [1, 2, 3, 4]
    monkeypatch.setattr(tiny_backend, "end_of_turn_ids", frozenset())
    free = ids_of(tiny_backend.generate(prompts, params, seeds=seeds))
    longest_first = sorted(range(len(prompts)), key=lambda row: -len(prompts[row]))
    ends = {free[row][step] for row, step in zip(longest_first, (1, 4, 7), strict=False)}
    expected = [ids[: next((i + 1 for i, t in enumerate(ids) if t in ends), len(ids))] for ids in free]
    assert sorted(map(len, expected)) == [2, 5, 8, 12]  # the rows really end at different steps
    monkeypatch.setattr(tiny_backend, "end_of_turn_ids", frozenset(ends))
    sizes, trims = [], []
    forward, keep = tiny_backend.model.forward, hf._ReservedLayer.keep
    monkeypatch.setattr(
        tiny_backend.model, "forward", lambda **kw: sizes.append(kw["input_ids"].shape) or forward(**kw)
    )
    monkeypatch.setattr(
        hf._ReservedLayer, "keep", lambda self, rows, first: trims.append(first) or keep(self, rows, first)
    )
    tiny_backend.clear_prefix_cache()
    out = tiny_backend.generate(prompts, params, seeds=seeds)
    assert ids_of(out) == expected
    assert [g.finish_reason for g in out] == ["length" if len(ids) == 12 else "stop" for ids in expected]
    steps = [shape[0] for shape in sizes if shape[1] == 1]
    assert steps[:2] == [4, 4] and steps[-4:] == [1, 1, 1, 1] and 3 in steps and 2 in steps
    assert any(trims), "columns only the leaving (longest) rows attended to are dropped"
    alone = [
        tiny_backend.generate([p], params, seeds=[seed])[0].token_ids
        for p, seed in zip(prompts, seeds, strict=True)
    ]
    assert alone == expected
    tiny_backend.clear_prefix_cache()
    tiny_backend.generate(prompts, params, seeds=seeds)  # keeps each row's keys/values as it leaves
    follow = [p + ids + [p[-1]] for p, ids in zip(prompts, expected, strict=True)]
    reused = tiny_backend.cache.reused_tokens
    continued = ids_of(tiny_backend.generate(follow, params, seeds=seeds))
    assert tiny_backend.cache.reused_tokens - reused == sum(len(f) - 2 for f in follow)
    tiny_backend.clear_prefix_cache()
    assert continued == ids_of(tiny_backend.generate(follow, params, seeds=seeds))


def test_every_step_writes_into_the_reserved_cache(tiny_backend, prompts, monkeypatch):
    """With or without a cached prefix, new keys/values go into the preallocated buffers; none is
    concatenated (a copy of the whole cache per layer and step)."""
    from mtsql.engines.backends import hf
    from mtsql.engines.backends.hf import _PrefixCache

    concatenated = []
    update = hf.DynamicLayer.update
    monkeypatch.setattr(
        hf.DynamicLayer,
        "update",
        lambda self, *a, **kw: concatenated.append(type(self).__name__) or update(self, *a, **kw),
    )
    params = SamplingParams(max_new_tokens=6)
    for cache in (None, _PrefixCache(max_tokens=10_000)):
        monkeypatch.setattr(tiny_backend, "cache", cache)
        first = tiny_backend.generate(prompts, params)
        tiny_backend.generate(
            [p + g.token_ids + [p[-1]] for p, g in zip(prompts, first, strict=True)], params
        )
    assert tiny_backend.cache.reused_tokens > 0  # the second pass started from cached prefixes
    assert "_ReservedLayer" not in concatenated
    assert "DynamicLayer" in concatenated  # prefilling a row alone extends its cached part, as it should


def test_rows_leave_a_plain_transformers_cache_too(tiny_backend, prompts, monkeypatch):
    """Models with other than full-attention layers decode in transformers' own cache; rows that
    end leave it the same way."""
    from mtsql.engines.backends import hf

    params, seeds = SamplingParams(max_new_tokens=8, temperature=1.0), [5, 6, 7, 8]
    monkeypatch.setattr(tiny_backend, "cache", None)
    monkeypatch.setattr(tiny_backend, "end_of_turn_ids", frozenset())
    free = ids_of(tiny_backend.generate(prompts, params, seeds=seeds))
    monkeypatch.setattr(tiny_backend, "end_of_turn_ids", frozenset({free[0][1], free[1][3]}))
    reserved = ids_of(tiny_backend.generate(prompts, params, seeds=seeds))
    assert sorted(map(len, reserved))[:2] != [8, 8]  # rows really ended early
    monkeypatch.setattr(tiny_backend, "_cache_supported", lambda: False)
    cut = []
    select = hf.DynamicLayer.batch_select_indices
    monkeypatch.setattr(
        hf.DynamicLayer,
        "batch_select_indices",
        lambda self, rows: cut.append(len(rows)) or select(self, rows),
    )
    assert ids_of(tiny_backend.generate(prompts, params, seeds=seeds)) == reserved
    assert cut and max(cut) < len(prompts)


def test_stop_string_ends_the_row_where_it_is_completed(tiny_backend, prompts):
    free = tiny_backend.generate(prompts, SamplingParams(max_new_tokens=10))
    stop = tiny_backend.tokenizer.decode(free[1].token_ids[3:5])  # text the greedy model writes for prompt 1
    stopped = tiny_backend.generate(prompts, SamplingParams(max_new_tokens=10, stop=(stop,)))
    assert stopped[1].finish_reason == "stop" and stopped[1].text.endswith(stop)
    assert stopped[1].token_ids == free[1].token_ids[: len(stopped[1].token_ids)]
    assert len(stopped[1].token_ids) <= 5
    for before, after in zip(
        free, stopped, strict=True
    ):  # other rows run on, unchanged, unless they write it too
        assert after.token_ids == before.token_ids[: len(after.token_ids)]


def test_end_of_turn_id_is_kept_but_not_in_the_text(tiny_backend, prompts, monkeypatch):
    backend = tiny_backend
    first = backend.generate(prompts[:1], SamplingParams(max_new_tokens=4))[0].token_ids
    monkeypatch.setattr(backend, "end_of_turn_ids", frozenset({first[2]}))  # the third id ends the turn
    end = first.index(first[2]) + 1
    out = backend.generate(prompts[:1], SamplingParams(max_new_tokens=8))[0]
    assert out.token_ids == first[:end] and out.finish_reason == "stop"
    assert out.text == backend.tokenizer.decode(first[: end - 1])


def test_sampling_depends_on_the_seed_not_the_batch(tiny_backend, prompts):
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8)
    full = tiny_backend.generate(prompts, params, seeds=[10, 11, 12, 13])
    part = tiny_backend.generate(prompts[2:], params, seeds=[12, 13])
    assert ids_of(full[2:]) == ids_of(part)
    other = tiny_backend.generate(prompts, params, seeds=[20, 21, 22, 23])
    assert ids_of(other) != ids_of(full)
    assert ids_of(tiny_backend.generate(prompts, params, seeds=[10, 11, 12, 13])) == ids_of(full)


def test_top_p_keeps_only_the_likeliest_ids(tiny_backend, prompts):
    import torch

    from mtsql.engines.backends.hf import _top_p

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert torch.allclose(_top_p(probs, 0.7), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    greedy = tiny_backend.generate(prompts, SamplingParams(max_new_tokens=6))
    tiny = tiny_backend.generate(prompts, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=6))
    assert ids_of(tiny) == ids_of(greedy)  # a vanishing nucleus is the argmax


def test_logprobs_are_the_model_log_probabilities(tiny_backend, prompts):
    import torch

    out = tiny_backend.generate(prompts[:2], SamplingParams(max_new_tokens=5, logprobs=True))
    for prompt, generation in zip(prompts[:2], out, strict=True):
        assert len(generation.logprobs) == len(generation.token_ids)
        with torch.inference_mode():
            logits = tiny_backend.model(torch.tensor([prompt + generation.token_ids])).logits[0]
        expected = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)
        picked = expected[torch.arange(len(generation.token_ids)), torch.tensor(generation.token_ids)]
        assert torch.allclose(torch.tensor(generation.logprobs), picked, atol=1e-4)


def test_prefix_cache_reuses_earlier_turns_without_changing_results(tiny_backend, prompts, chat, monkeypatch):
    from mtsql.engines.backends.hf import _PrefixCache

    params = SamplingParams(max_new_tokens=6)
    cache = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    first = tiny_backend.generate(prompts, params)
    observation = chat.observation_ids({"role": "tool", "content": "Result: [(4,)]"})
    follow = [
        p + g.token_ids + [chat.end_of_turn_id] + observation for p, g in zip(prompts, first, strict=True)
    ]
    follow[3] = prompts[3] + [11, 12]  # a prompt that extends no cached sequence, in the same batch
    second = tiny_backend.generate(follow, params)
    assert cache.reused_tokens == sum(len(p) + 5 for p in prompts[:3])  # prompt + 6 ids minus the last
    monkeypatch.setattr(tiny_backend, "cache", None)
    assert ids_of(first) == ids_of(tiny_backend.generate(prompts, params))
    assert ids_of(second) == ids_of(tiny_backend.generate(follow, params))


def test_new_conversations_start_from_their_shared_opening(tiny_backend, chat, monkeypatch):
    import torch

    from mtsql.engines.backends import hf
    from mtsql.engines.backends.hf import _PrefixCache

    system = "You write SQLite for the concert_singer database. " * 12  # an opening of > MIN_SHARED ids
    opened = [
        chat.prompt_ids([{"role": "system", "content": system}, {"role": "user", "content": q}])
        for q in QUESTIONS
    ]
    common = len(os.path.commonprefix(opened))
    assert common >= hf.MIN_SHARED
    params = SamplingParams(max_new_tokens=5)
    monkeypatch.setattr(tiny_backend, "cache", None)
    expected = ids_of(tiny_backend.generate(opened, params))
    cache = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    assert ids_of(tiny_backend.generate(opened, params)) == expected
    assert list(cache.shared) == [tuple(opened[0][:common])]  # learnt from the first two, used by the others
    assert cache.reused_tokens == 2 * common
    kept = [(k.clone(), v.clone()) for k, v in cache.shared[tuple(opened[0][:common])].layers]
    assert ids_of(tiny_backend.generate(opened, params)) == expected  # every row from the shared opening
    assert cache.reused_tokens == 6 * common
    assert all(
        torch.equal(k, k2) and torch.equal(v, v2)
        for (k, v), (k2, v2) in zip(kept, cache.shared[tuple(opened[0][:common])].layers, strict=True)
    )


def test_interleaved_dialogues_each_share_their_own_opening(tiny_backend, chat, monkeypatch):
    from mtsql.engines.backends.hf import _PrefixCache

    system = "You write SQLite queries for the database below. " * 8

    def opening(db):
        return [{"role": "system", "content": system + f"Database {db}: " + "tables singer, concert. " * 10}]

    dialogues = {
        db: [chat.prompt_ids(opening(db) + [{"role": "user", "content": q}]) for q in QUESTIONS[1:4]]
        for db in ("pets", "cars")
    }
    interleaved = [dialogues[db][turn] for turn in (0, 1) for db in ("pets", "cars")]
    third = [dialogues["pets"][2], dialogues["cars"][2]]
    params = SamplingParams(max_new_tokens=3)
    monkeypatch.setattr(tiny_backend, "cache", None)
    expected = (
        ids_of(tiny_backend.generate(interleaved, params)),
        ids_of(tiny_backend.generate(third, params)),
    )
    cache = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    assert ids_of(tiny_backend.generate(interleaved, params)) == expected[0]
    own = {db: len(os.path.commonprefix(turns)) for db, turns in dialogues.items()}
    assert {tuple(dialogues[db][0][:n]) for db, n in own.items()} <= set(cache.shared)
    before = cache.reused_tokens
    assert ids_of(tiny_backend.generate(third, params)) == expected[1]
    assert (
        cache.reused_tokens - before == own["pets"] + own["cars"]
    )  # each from its own schema, not the system's


def test_shared_openings_are_bounded_and_need_a_long_common_start(tiny_backend, chat, monkeypatch):
    from mtsql.engines.backends import hf
    from mtsql.engines.backends.hf import _PrefixCache

    cache = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    for db in range(hf.MAX_SHARED + 2):
        system = f"Database {db}: " + "tables singer, concert, stadium. " * 10
        tiny_backend.generate(
            [
                chat.prompt_ids([{"role": "system", "content": system}, {"role": "user", "content": q}])
                for q in QUESTIONS[:2]
            ],
            SamplingParams(max_new_tokens=2),
        )
    assert len(cache.shared) == hf.MAX_SHARED
    short = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", short)
    tiny_backend.generate(
        [chat.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS],
        SamplingParams(max_new_tokens=2),
    )
    assert not short.shared and short.reused_tokens == 0


def test_forget_drops_a_finished_conversation_but_not_the_shared_opening(tiny_backend, chat, monkeypatch):
    from mtsql.engines.backends.hf import _PrefixCache

    system = "You write SQLite for the concert_singer database. " * 12
    opened = [
        chat.prompt_ids([{"role": "system", "content": system}, {"role": "user", "content": q}])
        for q in QUESTIONS
    ]
    cache = _PrefixCache(max_tokens=100_000)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    first = tiny_backend.generate(opened, SamplingParams(max_new_tokens=4))
    ended = opened[0] + first[0].token_ids  # the whole conversation, as the rollout engine has it
    assert tuple(ended[:-1]) in cache.entries and len(cache.entries) == 4 and len(cache.shared) == 1
    size = cache.size
    tiny_backend.forget(ended)
    assert tuple(ended[:-1]) not in cache.entries and len(cache.entries) == 3 and len(cache.shared) == 1
    assert cache.size == size - (len(ended) - 1)
    tiny_backend.forget(opened[1])  # a conversation that has not got to its kept part: nothing goes
    assert len(cache.entries) == 3


def test_the_prefix_cache_takes_a_share_of_the_available_memory(tiny_qwen3, monkeypatch):
    from mtsql.engines.backends import hf
    from mtsql.engines.backends.hf import HFBackend

    class Memory:
        available = 3 * 2**30

    monkeypatch.setattr(hf.psutil, "virtual_memory", lambda: Memory())
    backend = HFBackend(tiny_qwen3)
    assert backend.cache.max_tokens == int(
        hf.PREFIX_CACHE_SHARE * Memory.available // backend.memory.kv_per_token
    )
    assert HFBackend(tiny_qwen3, max_cached_tokens=123).cache.max_tokens == 123


def test_prefix_cache_is_bounded(tiny_backend, prompts, monkeypatch):
    from mtsql.engines.backends.hf import _PrefixCache

    cache = _PrefixCache(max_tokens=max(map(len, prompts)) + 10)
    monkeypatch.setattr(tiny_backend, "cache", cache)
    tiny_backend.generate(prompts, SamplingParams(max_new_tokens=3))
    assert len(cache.entries) == 1 and cache.size <= cache.max_tokens


def test_prefix_cache_can_be_off_or_cleared(tiny_qwen3, tiny_backend, prompts, monkeypatch):
    from mtsql.engines.backends.hf import HFBackend, _PrefixCache

    assert HFBackend(tiny_qwen3, prefix_cache=False).cache is None
    monkeypatch.setattr(tiny_backend, "cache", _PrefixCache(max_tokens=1000))
    tiny_backend.generate(prompts[:1], SamplingParams(max_new_tokens=2))
    assert tiny_backend.cache.entries
    tiny_backend.clear_prefix_cache()
    assert not tiny_backend.cache.entries and tiny_backend.cache.size == 0


def test_empty_inputs(tiny_backend):
    assert tiny_backend.generate([], SamplingParams()) == []
    with pytest.raises(ValueError, match="at least one token"):
        tiny_backend.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        tiny_backend.generate([[1, 2]], SamplingParams(), seeds=[1, 2])
    with pytest.raises(ValueError, match="invalid sampling parameters"):
        SamplingParams(top_p=0)


def test_a_folder_that_is_not_a_causal_lm_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot load .* as a causal language model"):
        make_backend("hf", tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(UsageError, match="cannot load .* as a causal language model"):
        make_backend("hf", tmp_path)
    with pytest.raises(UsageError, match="unknown backend"):
        make_backend("tgi", tmp_path)


def test_grouped_attention_equals_sdpa_under_padding(tiny_qwen3, tiny_backend):
    import torch
    from transformers import AutoModelForCausalLM

    from mtsql.engines.backends.hf import GROUPED_SDPA

    reference = AutoModelForCausalLM.from_pretrained(tiny_qwen3, attn_implementation="sdpa")
    assert tiny_backend.model.config._attn_implementation == GROUPED_SDPA
    assert reference.config.num_key_value_heads < reference.config.num_attention_heads  # really grouped
    ids = torch.randint(0, 5000, (3, 30), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 30, dtype=torch.long)
    mask[0, :7], mask[1, :20], mask[2, 10:15] = 0, 0, 0  # left padding and a hole, as the prefix cache makes
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        ours = tiny_backend.model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
        theirs = reference(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
    assert torch.allclose(ours[mask.bool()], theirs[mask.bool()], atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The CUDA paths, exercised on CPU: batched prefill, memory-bounded calls, dtype, stop memo


def test_batched_prefill_gives_the_row_by_row_results(tiny_backend, prompts, chat, monkeypatch):
    from mtsql.engines.backends.hf import HFBackend, _PrefixCache

    params = SamplingParams(max_new_tokens=6)
    monkeypatch.setattr(tiny_backend, "cache", _PrefixCache(max_tokens=100_000))
    first = tiny_backend.generate(prompts, params)
    observation = chat.observation_ids({"role": "tool", "content": "Result: [(4,)]"})
    follow = [
        p + g.token_ids + [chat.end_of_turn_id] + observation for p, g in zip(prompts, first, strict=True)
    ]
    alone = tiny_backend.generate(follow, params)
    calls = []
    monkeypatch.setattr(tiny_backend, "cache", _PrefixCache(max_tokens=100_000))
    monkeypatch.setattr(tiny_backend, "batched_prefill", 256)  # the CUDA default
    monkeypatch.setattr(
        tiny_backend, "_prefill", lambda *a: calls.append(a) or HFBackend._prefill(tiny_backend, *a)
    )
    assert ids_of(tiny_backend.generate(prompts, params)) == ids_of(first)
    assert ids_of(tiny_backend.generate(follow, params)) == ids_of(alone)
    assert calls == []  # every new part is shorter than 256 ids: all prefilled in the batch calls
    assert tiny_backend.cache.reused_tokens == sum(len(p) + 5 for p in prompts)


def test_a_call_larger_than_free_memory_runs_in_parts_with_the_same_results(
    tiny_backend, prompts, monkeypatch
):
    from mtsql.engines.backends import hf
    from mtsql.engines.backends.hf import HFBackend

    params = SamplingParams(temperature=1.0, max_new_tokens=5)
    whole = tiny_backend.generate(prompts, params, seeds=[1, 2, 3, 4])
    assert tiny_backend.batch_limit(100) is None  # CPU: no limit of its own
    row = tiny_backend.memory.row_bytes(max(map(len, prompts)) + 5)
    monkeypatch.setattr(tiny_backend, "cuda", True)
    monkeypatch.setattr(hf, "_free_bytes", lambda device: int(2.5 * row / hf.BATCH_MEMORY_SHARE))
    assert tiny_backend.batch_limit(max(map(len, prompts)) + 5) == 2
    calls = []
    monkeypatch.setattr(
        tiny_backend,
        "_generate",
        lambda p, *a: calls.append(len(p)) or HFBackend._generate(tiny_backend, p, *a),
    )
    assert ids_of(tiny_backend.generate(prompts, params, seeds=[1, 2, 3, 4])) == ids_of(whole)
    assert calls == [2, 2]


def test_memory_arithmetic(tiny_backend):
    from mtsql.engines.backends.hf import MAX_BATCH_ROWS, _MemoryModel, rows_that_fit

    config = tiny_backend.model.config
    memory = _MemoryModel.of(tiny_backend.model)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert (
        memory.kv_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4
    )  # float32
    assert memory.row_bytes(1000) - memory.row_bytes(0) == 1000 * (
        2 * memory.kv_per_token + memory.activation_per_token
    )
    assert memory.row_bytes(0) == 16 * config.vocab_size
    assert rows_that_fit(10_000, 1_000, share=0.8) == 8
    assert rows_that_fit(10, 1_000) == 1 and rows_that_fit(10**15, 1) == MAX_BATCH_ROWS


def test_stop_strings_are_checked_only_after_ids_that_can_end_them(tiny_backend, prompts):
    from mtsql.engines.backends.hf import _StopCriteria

    tokenizer = tiny_backend.tokenizer
    stop = ("</answer_sql>",)
    text = "<answer_sql>SELECT 1</answer_sql> and more"
    ids = tokenizer.encode(text, add_special_tokens=False)
    decoded = []

    class Counting:
        def decode(self, ids, **kwargs):
            decoded.append(list(ids))
            return tokenizer.decode(ids, **kwargs)

    enders: dict[int, bool] = {}
    criteria = _StopCriteria(Counting(), frozenset(), stop, enders)
    end = next(end for end in range(1, len(ids) + 1) if criteria.ends(ids[:end]))
    assert tokenizer.decode(ids[:end]).endswith("</answer_sql>")
    assert set(enders) == set(ids[:end]) and sum(enders.values()) >= 1
    lone = [d for d in decoded if len(d) == 1]
    assert len(lone) == len(set(ids[:end]))  # each id decoded alone once; windows only after a '>'
    assert len(decoded) - len(lone) == 2 * sum(enders[i] for i in ids[:end])


def test_load_weights_generates_with_the_trained_model_and_drops_old_keys_values(tiny_qwen3, chat, tmp_path):
    """The local RL engine trains the backend's own model in place (``in_process_model``) and hands it
    back after each update: the next message is a fresh backend's on the new weights, also for a
    conversation whose keys/values were kept under the old ones."""
    import torch

    from mtsql.engines.backends.hf import HFBackend

    backend = HFBackend(tiny_qwen3, dtype="float32")
    model = backend.in_process_model()
    params = SamplingParams(max_new_tokens=8)
    opening = chat.prompt_ids(
        [{"role": "system", "content": "Answer with SQL."}, {"role": "user", "content": QUESTIONS[1]}]
    )
    follow = opening + backend.generate([opening], params)[0].token_ids + opening[-3:]
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param, generator=torch.Generator().manual_seed(3)) * 0.05)
    backend.load_weights(model, tmp_path / "unused")
    reused = backend.cache.reused_tokens
    after = backend.generate([follow], params)
    assert backend.cache.reused_tokens == reused, "nothing computed with the old weights is reused"
    model.save_pretrained(tmp_path / "updated")
    backend.tokenizer.save_pretrained(tmp_path / "updated")
    fresh = HFBackend(tmp_path / "updated", dtype="float32")
    assert ids_of(after) == ids_of(fresh.generate([follow], params))
    assert not (tmp_path / "unused").exists()  # shared, not saved

    other = HFBackend(tmp_path / "updated", dtype="float32").in_process_model()
    backend.load_weights(other, tmp_path / "unused")
    assert backend.in_process_model() is other
