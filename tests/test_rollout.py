"""The batched rollout engine: token bookkeeping, batching, resume, predicted-memory chains."""

from __future__ import annotations

import json
import random

import pytest

from mtsql.backends.base import Backend, SamplingParams
from mtsql.chat_format import ChatFormat
from mtsql.data.records import Turn
from mtsql.rollout import STOP_STRINGS, RolloutEngine, derive_seed, load_records

TOOLS = [{"name": "exec_sql", "description": "Run SQL.", "parameters": {"type": "object", "properties": {}}}]


def dialogue(name: str, questions: int) -> list[Turn]:
    previous: list[str] = []
    turns = []
    for index in range(questions):
        question = f"{name} question {index}?"
        turns.append(Turn(dataset="cosql", split="dev", interaction_id=name, interaction_index=0,
                          turn_index=index, db_id="db", question=question, gold_sql=f"SELECT {index}",
                          previous_questions=tuple(previous), previous_sql=tuple(f"SELECT {i}" for i in range(index))))
        previous.append(question)
    return turns


class FakeTrajectory:
    def __init__(self, turn: Turn, memory):
        self.uid, self.memory, self.final_sql = turn.uid, memory, None
        self.messages = [{"role": "system", "content": "Answer in SQL."},
                         {"role": "user", "content": turn.question}]

    def to_dict(self) -> dict:
        memory = None if self.memory is None else [(m.question, m.sql) for m in self.memory]
        return {"uid": self.uid, "memory": memory, "messages": self.messages, "final_sql": self.final_sql}


class FakeEnv:
    """Answers each message with a tool observation; turn k's episode ends at message 1 + k % 3."""

    events: list = []

    def reset(self, turn: Turn, memory=None) -> list[dict]:
        self.turn, self.trajectory = turn, FakeTrajectory(turn, memory)
        FakeEnv.events.append(("reset", turn.uid))
        return list(self.trajectory.messages)

    def step(self, text: str):
        trajectory = self.trajectory
        trajectory.messages.append({"role": "assistant", "content": text})
        if len(trajectory.messages) // 2 >= 1 + self.turn.turn_index % 3:
            trajectory.final_sql = text
            FakeEnv.events.append(("done", self.turn.uid))
            return None, True, {}
        observation = {"role": "tool", "content": f"Result of message {len(trajectory.messages) // 2}: (1,)"}
        trajectory.messages.append(observation)
        return observation, False, {}


@pytest.fixture(autouse=True)
def clear_events():
    FakeEnv.events = []


class ScriptedBackend(Backend):
    """Replies with canonical ids of fixed texts: a tool call cut at its stop string, then text ending
    with <|im_end|>, then an answer. Records the size of every batch."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end_of_turn_ids = frozenset({tokenizer.convert_tokens_to_ids("<|im_end|>")})
        self.batches: list[int] = []

    def generate(self, prompts, params, seeds=None):
        self.batches.append(len(prompts))
        out = []
        for prompt, seed in zip(prompts, self._seeds(prompts, params, seeds), strict=True):
            done = self.tokenizer.decode(prompt).count("<|im_start|>assistant") - 1
            text = ['<tool_call>\n{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>',
                    "<exec_verify>pass</exec_verify> looks fine",
                    f"<answer_sql>SELECT {seed}</answer_sql>"][min(done, 2)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if done == 1:
                ids.append(min(self.end_of_turn_ids))
            out.append(self._finish(ids, "stop"))
        return out


class InterruptAfter(Backend):
    """Wraps a backend and raises KeyboardInterrupt at its ``calls``-th generate call."""

    def __init__(self, inner: Backend, calls: int):
        self.inner, self.calls = inner, calls
        self.tokenizer, self.end_of_turn_ids = inner.tokenizer, inner.end_of_turn_ids

    def generate(self, prompts, params, seeds=None):
        self.calls -= 1
        if self.calls == 0:
            raise KeyboardInterrupt
        return self.inner.generate(prompts, params, seeds)


def engine(backend, tokenizer, **options) -> RolloutEngine:
    params = options.pop("params", SamplingParams(max_new_tokens=6, stop=STOP_STRINGS))
    return RolloutEngine(FakeEnv, backend=backend, chat=ChatFormat(tokenizer), params=params, tools=TOOLS,
                         **options)


def comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in records]


def test_token_ids_are_the_rendered_conversation_and_the_mask_marks_model_ids(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    turns = dialogue("d", 3)
    records = engine(backend, tiny_tokenizer).run(turns, progress=False)
    chat = ChatFormat(tiny_tokenizer)
    for record in records:
        messages = record["trajectory"]["messages"]
        ids = record["prompt_ids"] + record["response_ids"]
        closing = "\n" if ids[-1] == chat.end_of_turn_id else "<|im_end|>\n"  # none after a stop string
        assert ids + tiny_tokenizer.encode(closing, add_special_tokens=False) == chat.render_ids(messages, TOOLS)
        model_ids = [i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if m]
        expected = [i for m in messages if m["role"] == "assistant"
                    for i in tiny_tokenizer.encode(m["content"], add_special_tokens=False)]
        end = chat.end_of_turn_id
        assert [i for i in model_ids if i != end] == expected
        assert model_ids.count(end) == (len(messages) >= 5)  # only the 2nd reply generates <|im_end|>
        tool_text = tiny_tokenizer.decode([i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if not m])
        assert tool_text.count("<tool_response>") == sum(m["role"] == "tool" for m in messages)
        assert record["generated_tokens"] == sum(record["response_mask"])
        assert not record["truncated"] and record["response_logprobs"] is None


def test_engine_batches_equal_one_at_a_time_with_the_tiny_model(tiny_backend, tiny_tokenizer):
    turns = dialogue("a", 4) + dialogue("b", 2)
    batched = engine(tiny_backend, tiny_tokenizer, batch_size=16).run(turns, n=2, progress=False)
    alone = engine(tiny_backend, tiny_tokenizer, batch_size=1).run(turns, n=2, progress=False)
    assert comparable(batched) == comparable(alone)
    assert [r["key"] for r in batched] == [f"{t.uid}#{s}" for t in turns for s in range(2)]


def test_tool_tokens_are_masked_and_cut_messages_recorded(tiny_backend, tiny_tokenizer):
    records = engine(tiny_backend, tiny_tokenizer, params=SamplingParams(max_new_tokens=3, logprobs=True)).run(
        dialogue("m", 3), progress=False)
    for record in records:
        mask, ids = record["response_mask"], record["response_ids"]
        messages = record["trajectory"]["messages"]
        assert record["truncated"] and {g["finish_reason"] for g in record["generations"]} == {"length"}
        assert len(record["generations"]) == sum(m["role"] == "assistant" for m in messages)  # all reached the env
        assert sum(mask) == 3 * len(record["generations"]) == record["generated_tokens"]
        masked = tiny_tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
        for message in messages:
            if message["role"] == "tool":
                assert f"<tool_response>\n{message['content']}\n</tool_response>" in masked
        assert masked.count("<|im_end|>") == 2 * sum(m["role"] == "tool" for m in messages)  # closing + tool turn
        logprobs = record["response_logprobs"]
        assert len(logprobs) == len(ids) and all(lp < 0 for lp, m in zip(logprobs, mask, strict=True) if m)


def test_samples_are_seeded(tiny_backend, tiny_tokenizer):
    params = SamplingParams(temperature=1.0, max_new_tokens=5)
    turns = dialogue("s", 2)
    first = engine(tiny_backend, tiny_tokenizer, params=params).run(turns, n=2, seed=7, progress=False)
    again = engine(tiny_backend, tiny_tokenizer, params=params).run(turns, n=2, seed=7, progress=False)
    other = engine(tiny_backend, tiny_tokenizer, params=params).run(turns, n=2, seed=8, progress=False)
    assert comparable(first) == comparable(again)
    assert first[0]["response_ids"] != first[1]["response_ids"]  # two samples of one turn
    assert first[0]["response_ids"] != other[0]["response_ids"]


def test_an_interrupted_run_resumes_where_it_stopped(tiny_backend, tiny_tokenizer, tmp_path):
    turns = dialogue("r", 6)
    reference = engine(tiny_backend, tiny_tokenizer, batch_size=2).run(turns, out_dir=tmp_path / "ref", progress=False)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        engine(InterruptAfter(tiny_backend, 4), tiny_tokenizer, batch_size=2).run(turns, out_dir=out, progress=False)
    kept = load_records(out)
    assert 0 < len(kept) < len(turns)
    FakeEnv.events = []
    resumed = engine(tiny_backend, tiny_tokenizer, batch_size=2).run(turns, out_dir=out, progress=False)
    assert comparable(resumed) == comparable(reference)
    started = {uid for event, uid in FakeEnv.events if event == "reset"}
    assert started == {t.uid for t in turns} - {r["uid"] for r in kept.values()}  # finished ones not rerun
    assert len(list(out.glob("rollout-*.jsonl"))) == 2
    FakeEnv.events = []
    assert comparable(engine(tiny_backend, tiny_tokenizer).run(turns, out_dir=out, progress=False)) == \
           comparable(reference)
    assert FakeEnv.events == []  # a finished run is only read back


def test_a_line_cut_by_a_crash_is_skipped(tmp_path, caplog):
    good = {"key": "a#0", "uid": "a"}
    (tmp_path / "rollout-0000.jsonl").write_text(json.dumps(good) + "\n" + '{"key": "b#0", "ui')
    assert load_records(tmp_path) == {"a#0": good}
    assert "skipped 1 incomplete line" in caplog.text


def test_predicted_memory_runs_each_dialogue_in_order_and_batches_dialogues(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    turns = dialogue("x", 3) + dialogue("y", 3)
    records = engine(backend, tiny_tokenizer, memory="predicted").run(list(reversed(turns)), n=2, progress=False)
    by_key = {r["key"]: r for r in records}
    for sample in range(2):
        for name in ("x", "y"):
            answers = [by_key[f"{name}/{k}#{sample}"]["trajectory"]["final_sql"] for k in range(3)]
            assert len(set(answers)) == 3  # each answer carries its own seed
            for k in range(3):
                memory = by_key[f"{name}/{k}#{sample}"]["trajectory"]["memory"]
                assert memory == (None if k == 0 else [[f"{name} question {j}?", answers[j]] for j in range(k)])
    for name in ("x", "y"):  # turn k starts only after turn k-1 of the same sample ended
        order = [e for e in FakeEnv.events if e[1].startswith(name)]
        assert order.index(("reset", f"{name}/1")) > order.index(("done", f"{name}/0"))
    assert max(backend.batches) == 4  # both dialogues x both samples advance together


def test_gold_memory_runs_all_turns_at_once(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    records = engine(backend, tiny_tokenizer).run(dialogue("g", 3), progress=False)
    assert backend.batches[0] == 3 and all(r["trajectory"]["memory"] is None for r in records)


def test_predicted_memory_needs_whole_dialogues(tiny_tokenizer):
    from mtsql.errors import UsageError

    with pytest.raises(UsageError, match="every turn of the dialogue from the first"):
        engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer, memory="predicted").run(dialogue("p", 3)[1:])


def test_scripted_policy_uses_the_same_loop():
    def policy(messages, turn, rng: random.Random) -> str:
        return f"{turn.uid} {rng.random():.6f}"

    records = RolloutEngine(FakeEnv, policy=policy).run(dialogue("q", 2), n=2, seed=3, progress=False)
    assert [r["generations"] for r in records] == [[], [], [], []]
    assert records[0]["trajectory"]["final_sql"] != records[1]["trajectory"]["final_sql"]
    expected = random.Random(derive_seed(3, "q/0#0")).random()
    assert records[0]["trajectory"]["final_sql"] == f"q/0 {expected:.6f}"
    assert records[0]["prompt_ids"] is None and records[0]["response_mask"] is None


def test_constructor_checks():
    with pytest.raises(ValueError, match="either a model backend"):
        RolloutEngine(FakeEnv)
    with pytest.raises(ValueError, match="needs a chat format"):
        RolloutEngine(FakeEnv, backend=object())
    with pytest.raises(ValueError, match="memory must be"):
        RolloutEngine(FakeEnv, policy=lambda *a: "", memory="oracle")


def test_gold_policy_through_the_real_environment(fixture_root):
    from mtsql.agent.env import SqlAgentEnv
    from mtsql.agent.policies import GoldPolicy
    from mtsql.config import EnvConfig
    from mtsql.data import load_turns

    turns = load_turns("cosql", "dev", root=fixture_root, with_hardness=False)[:12]
    records = RolloutEngine(lambda: SqlAgentEnv(EnvConfig(memory="predicted"), data_root=fixture_root),
                            policy=GoldPolicy(), memory="predicted").run(turns, progress=False)
    for turn, record in zip(turns, records, strict=True):
        trajectory = record["trajectory"]
        assert trajectory["protocol_valid"] and trajectory["final_sql"].split() == turn.gold_sql.replace("> =", ">=").split()
        assert [m["sql"] for m in trajectory["memory"]] == list(turn.previous_sql)


def test_tiny_model_through_the_real_environment(tiny_backend, tiny_tokenizer, fixture_root):
    from mtsql.agent.env import SqlAgentEnv
    from mtsql.agent.tools import TOOL_SCHEMAS
    from mtsql.config import EnvConfig
    from mtsql.data import load_turns

    turns = load_turns("cosql", "dev", root=fixture_root, with_hardness=False)[:2]
    records = RolloutEngine(lambda: SqlAgentEnv(EnvConfig(max_turns=2), data_root=fixture_root),
                            backend=tiny_backend, chat=ChatFormat(tiny_tokenizer),
                            params=SamplingParams(max_new_tokens=4, stop=STOP_STRINGS),
                            tools=TOOL_SCHEMAS).run(turns, progress=False)
    for record in records:
        prompt = tiny_tokenizer.decode(record["prompt_ids"])
        assert prompt.startswith("<|im_start|>system\n") and '"name": "exec_sql"' in prompt
        assert prompt.endswith("<|im_start|>assistant\n") and record["turn"]["question"] in prompt
        assert len(record["generations"]) == record["trajectory"]["num_assistant_turns"] == 2
        assert record["trajectory"]["finish_reason"] == "max_turns"

