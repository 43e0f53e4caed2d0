"""The batched rollout engine: token bookkeeping, batching, resume, predicted-memory chains."""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data.records import Turn
from mtsql.engines.backends.base import Backend, SamplingParams
from mtsql.engines.rollout import STOP_STRINGS, RolloutEngine, derive_seed, load_records

TOOLS = [{"name": "exec_sql", "description": "Run SQL.", "parameters": {"type": "object", "properties": {}}}]


def dialogue(name: str, questions: int) -> list[Turn]:
    previous: list[str] = []
    turns = []
    for index in range(questions):
        question = f"{name} question {index}?"
        turns.append(
            Turn(
                dataset="cosql",
                split="dev",
                interaction_id=name,
                interaction_index=0,
                turn_index=index,
                db_id="db",
                question=question,
                gold_sql=f"SELECT {index}",
                previous_questions=tuple(previous),
                previous_sql=tuple(f"SELECT {i}" for i in range(index)),
            )
        )
        previous.append(question)
    return turns


class FakeTrajectory:
    def __init__(self, turn: Turn, memory):
        self.uid, self.memory, self.final_sql = turn.uid, memory, None
        self.messages = [
            {"role": "system", "content": "Answer in SQL."},
            {"role": "user", "content": turn.question},
        ]

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
            text = [
                '<tool_call>\n{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>',
                "<exec_verify>pass</exec_verify> looks fine",
                f"<answer_sql>SELECT {seed}</answer_sql>",
            ][min(done, 2)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if done == 1:
                ids.append(min(self.end_of_turn_ids))
            out.append(self._generation(ids, "stop"))
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
    return RolloutEngine(
        FakeEnv, backend=backend, chat=ChatFormat(tokenizer), params=params, tools=TOOLS, **options
    )


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
        assert ids + tiny_tokenizer.encode(closing, add_special_tokens=False) == chat.render_ids(
            messages, TOOLS
        )
        model_ids = [i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if m]
        expected = [
            i
            for m in messages
            if m["role"] == "assistant"
            for i in tiny_tokenizer.encode(m["content"], add_special_tokens=False)
        ]
        end = chat.end_of_turn_id
        assert [i for i in model_ids if i != end] == expected
        assert model_ids.count(end) == (len(messages) >= 5)  # only the 2nd reply generates <|im_end|>
        tool_text = tiny_tokenizer.decode(
            [i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if not m]
        )
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
    records = engine(
        tiny_backend, tiny_tokenizer, params=SamplingParams(max_new_tokens=3, logprobs=True)
    ).run(dialogue("m", 3), progress=False)
    for record in records:
        mask, ids = record["response_mask"], record["response_ids"]
        messages = record["trajectory"]["messages"]
        assert record["truncated"] and {g["finish_reason"] for g in record["generations"]} == {"length"}
        assert len(record["generations"]) == sum(
            m["role"] == "assistant" for m in messages
        )  # all reached the env
        assert sum(mask) == 3 * len(record["generations"]) == record["generated_tokens"]
        masked = tiny_tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
        for message in messages:
            if message["role"] == "tool":
                assert f"<tool_response>\n{message['content']}\n</tool_response>" in masked
        assert masked.count("<|im_end|>") == 2 * sum(
            m["role"] == "tool" for m in messages
        )  # closing + tool turn
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
    reference = engine(tiny_backend, tiny_tokenizer, batch_size=2).run(
        turns, out_dir=tmp_path / "ref", progress=False
    )
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        engine(InterruptAfter(tiny_backend, 4), tiny_tokenizer, batch_size=2).run(
            turns, out_dir=out, progress=False
        )
    kept = load_records(out)
    assert 0 < len(kept) < len(turns)
    FakeEnv.events = []
    resumed = engine(tiny_backend, tiny_tokenizer, batch_size=2).run(turns, out_dir=out, progress=False)
    assert comparable(resumed) == comparable(reference)
    started = {uid for event, uid in FakeEnv.events if event == "reset"}
    assert started == {t.uid for t in turns} - {r["uid"] for r in kept.values()}  # finished ones not rerun
    assert len(list(out.glob("rollout-*.jsonl"))) == 2
    FakeEnv.events = []
    assert comparable(
        engine(tiny_backend, tiny_tokenizer).run(turns, out_dir=out, progress=False)
    ) == comparable(reference)
    assert FakeEnv.events == []  # a finished run is only read back


def test_a_line_cut_by_a_crash_is_skipped(tmp_path, caplog):
    good = {"key": "a#0", "uid": "a"}
    (tmp_path / "rollout-0000.jsonl").write_text(json.dumps(good) + "\n" + '{"key": "b#0", "ui')
    assert load_records(tmp_path) == {"a#0": good}
    assert "skipped 1 incomplete line" in caplog.text


def test_predicted_memory_runs_each_dialogue_in_order_and_batches_dialogues(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    turns = dialogue("x", 3) + dialogue("y", 3)
    records = engine(backend, tiny_tokenizer, memory="predicted").run(
        list(reversed(turns)), n=2, progress=False
    )
    by_key = {r["key"]: r for r in records}
    for sample in range(2):
        for name in ("x", "y"):
            answers = [by_key[f"{name}/{k}#{sample}"]["trajectory"]["final_sql"] for k in range(3)]
            assert len(set(answers)) == 3  # each answer carries its own seed
            for k in range(3):
                memory = by_key[f"{name}/{k}#{sample}"]["trajectory"]["memory"]
                assert memory == (
                    None if k == 0 else [[f"{name} question {j}?", answers[j]] for j in range(k)]
                )
    for name in ("x", "y"):  # turn k starts only after turn k-1 of the same sample ended
        order = [e for e in FakeEnv.events if e[1].startswith(name)]
        assert order.index(("reset", f"{name}/1")) > order.index(("done", f"{name}/0"))
    assert max(backend.batches) == 4  # both dialogues x both samples advance together


def test_gold_memory_runs_all_turns_at_once(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    records = engine(backend, tiny_tokenizer).run(dialogue("g", 3), progress=False)
    assert backend.batches[0] == 3 and all(r["trajectory"]["memory"] is None for r in records)


def test_predicted_memory_needs_whole_dialogues(tiny_tokenizer):
    from mtsql.base.errors import UsageError

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
    from mtsql.core.agent.env import SqlAgentEnv
    from mtsql.core.agent.policies import GoldPolicy
    from mtsql.core.agent.settings import EnvConfig
    from mtsql.core.data import load_turns

    turns = load_turns("cosql", "dev", root=fixture_root, with_hardness=False)[:12]
    records = RolloutEngine(
        lambda: SqlAgentEnv(EnvConfig(memory="predicted"), data_root=fixture_root),
        policy=GoldPolicy(),
        memory="predicted",
    ).run(turns, progress=False)
    for turn, record in zip(turns, records, strict=True):
        trajectory = record["trajectory"]
        assert (
            trajectory["protocol_valid"]
            and trajectory["final_sql"].split() == turn.gold_sql.replace("> =", ">=").split()
        )
        assert [m["sql"] for m in trajectory["memory"]] == list(turn.previous_sql)


def test_tiny_model_through_the_real_environment(tiny_backend, tiny_tokenizer, fixture_root):
    from mtsql.core.agent.env import SqlAgentEnv
    from mtsql.core.agent.settings import EnvConfig
    from mtsql.core.agent.tools import TOOL_SCHEMAS
    from mtsql.core.data import load_turns

    turns = load_turns("cosql", "dev", root=fixture_root, with_hardness=False)[:2]
    records = RolloutEngine(
        lambda: SqlAgentEnv(EnvConfig(max_messages=2), data_root=fixture_root),
        backend=tiny_backend,
        chat=ChatFormat(tiny_tokenizer),
        params=SamplingParams(max_new_tokens=4, stop=STOP_STRINGS),
        tools=TOOL_SCHEMAS,
    ).run(turns, progress=False)
    for record in records:
        prompt = tiny_tokenizer.decode(record["prompt_ids"])
        assert prompt.startswith("<|im_start|>system\n") and '"name": "exec_sql"' in prompt
        assert prompt.endswith("<|im_start|>assistant\n") and record["turn"]["question"] in prompt
        assert len(record["generations"]) == record["trajectory"]["num_messages"] == 2
        assert record["trajectory"]["finish_reason"] == "max_messages"


# ---------------------------------------------------------------------------------------------
# The pipelined engine: same tokens as one conversation at a time, tools off the backend's thread


def one_at_a_time(backend, chat, params, make_env, turns, n, seed):
    """The plainest loop with the engine's contract: each dialogue (predicted memory) and sample in
    turn, one message per backend call, seeds from (seed, key, message index)."""
    from mtsql.core.agent.tools import MemoryEntry

    records = {}
    dialogues: dict[str, list[Turn]] = {}
    for turn in turns:
        dialogues.setdefault(turn.interaction_id, []).append(turn)
    for dialogue in dialogues.values():
        for sample in range(n):
            answers = []
            for position, turn in enumerate(dialogue):
                key = f"{turn.uid}#{sample}"
                memory = (
                    [MemoryEntry(t.question, a) for t, a in zip(dialogue[:position], answers, strict=True)]
                    if position
                    else None
                )
                env = make_env()
                prompt = chat.prompt_ids(env.reset(turn, memory), TOOL_SCHEMAS)
                ids, mask, generations = [], [], []
                while True:
                    out = backend.generate(
                        [prompt + ids], params, [derive_seed(derive_seed(seed, key), len(generations))]
                    )[0]
                    ids, mask = ids + out.token_ids, mask + [1] * len(out.token_ids)
                    generations.append(
                        {
                            "tokens": len(out.token_ids),
                            "prompt_tokens": len(prompt + ids) - len(out.token_ids),
                            "finish_reason": out.finish_reason,
                        }
                    )
                    observation, ended, _ = env.step(out.text)
                    if ended:
                        break
                    follow = [] if out.token_ids[-1:] == [chat.end_of_turn_id] else [chat.end_of_turn_id]
                    follow += chat.observation_ids(observation)
                    ids, mask = ids + follow, mask + [0] * len(follow)
                answers.append(env.trajectory.final_sql)
                records[key] = same_parts(prompt, ids, mask, generations, env.trajectory.to_dict())
    return records


def same_parts(prompt, ids, mask, generations, trajectory):
    trajectory = {**trajectory, "elapsed_s": 0, "steps": [{**s, "tool_s": 0} for s in trajectory["steps"]]}
    return json.loads(json.dumps([prompt, ids, mask, generations, trajectory]))


@pytest.mark.parametrize("model", ["tiny", "scripted"])
def test_pipelined_engine_gives_the_tokens_of_a_one_at_a_time_loop(
    model, tiny_backend, tiny_tokenizer, fixture_root
):
    from mtsql.core.agent.env import SqlAgentEnv
    from mtsql.core.agent.settings import EnvConfig
    from mtsql.core.data import load_turns

    turns = [
        t for t in load_turns("cosql", "dev", root=fixture_root, with_hardness=False) if t.turn_index < 2
    ][:6]
    backend = tiny_backend if model == "tiny" else ScriptedBackend(tiny_tokenizer)  # scripted: real SQL runs
    chat, params = (
        ChatFormat(tiny_tokenizer),
        SamplingParams(temperature=1.0, max_new_tokens=6, stop=STOP_STRINGS),
    )

    def make_env():
        return SqlAgentEnv(EnvConfig(max_messages=3, memory="predicted"), data_root=fixture_root)

    expected = one_at_a_time(backend, chat, params, make_env, turns, 2, seed=5)
    for batch_size, workers in ((4, 3), (16, 1)):
        records = RolloutEngine(
            make_env,
            backend=backend,
            chat=chat,
            params=params,
            tools=TOOL_SCHEMAS,
            memory="predicted",
            batch_size=batch_size,
            tool_workers=workers,
        ).run(turns, n=2, seed=5, progress=False)
        got = {
            r["key"]: same_parts(
                r["prompt_ids"], r["response_ids"], r["response_mask"], r["generations"], r["trajectory"]
            )
            for r in records
        }
        assert got == expected
    if model == "scripted":
        assert any(s["result_kind"] == "ok" for parts in expected.values() for s in parts[4]["steps"])


class BlockingEnv(FakeEnv):
    """The first step of turn b/0 holds its worker until the backend is called again (or 120 s pass)."""

    release = None
    overlapped = None

    def step(self, text):
        if self.turn.uid == "b/0" and BlockingEnv.overlapped is None:
            BlockingEnv.overlapped = BlockingEnv.release.wait(timeout=120)
        return super().step(text)


class SignallingBackend(ScriptedBackend):
    def generate(self, prompts, params, seeds=None):
        if self.batches:
            BlockingEnv.release.set()
        return super().generate(prompts, params, seeds)


def test_generation_goes_on_while_a_tool_call_runs(tiny_tokenizer):
    import threading

    BlockingEnv.release, BlockingEnv.overlapped = threading.Event(), None
    backend = SignallingBackend(tiny_tokenizer)
    turns = dialogue("a", 3)[2:] + dialogue("b", 1)  # a/2 needs three messages, b/0 one
    records = RolloutEngine(
        BlockingEnv,
        backend=backend,
        chat=ChatFormat(tiny_tokenizer),
        params=SamplingParams(max_new_tokens=6, stop=STOP_STRINGS),
        tools=TOOLS,
    ).run(turns, progress=False)
    assert BlockingEnv.overlapped  # the backend was called again while b/0's step was still running
    assert backend.batches[:2] == [2, 1] and [len(r["generations"]) for r in records] == [3, 1]


def test_a_response_budget_ends_episodes_without_a_dangling_observation(tiny_tokenizer):
    turns = dialogue("t", 3)
    free = engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer).run(turns, progress=False)
    first = free[2]["generations"][0]["tokens"]
    budget = first + 3  # room for the first message, not for its observation
    records = engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer, max_response_tokens=budget).run(
        turns, progress=False
    )
    assert [r["stop"] for r in free] == ["episode_end"] * 3
    assert records[0] == {
        **records[0],
        "stop": "episode_end",
        "response_ids": free[0]["response_ids"],
    }  # one message
    for record in records[1:]:
        assert record["stop"] == "response_length" and record["response_mask"] == [1] * first
        assert record["response_ids"] == free[2]["response_ids"][:first] and len(record["generations"]) == 1
    cut = engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer, max_response_tokens=first - 2).run(
        turns[1:2], progress=False
    )[0]
    assert cut["response_ids"] == free[1]["response_ids"][: first - 2] and cut["stop"] == "response_length"
    assert cut["truncated"] and cut["generations"] == [
        {"tokens": first - 2, "prompt_tokens": len(cut["prompt_ids"]), "finish_reason": "length"}
    ]
    assert cut["trajectory"]["messages"][2]["content"] == tiny_tokenizer.decode(
        cut["response_ids"]
    )  # what the env read


def test_scoring_runs_on_the_workers_for_new_and_resumed_records(tiny_tokenizer, tmp_path):
    import threading

    turns = dialogue("w", 4)
    engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer).run(turns[:2], out_dir=tmp_path, progress=False)
    threads = set()

    def score(record):
        threads.add(threading.current_thread().name)
        return {"key": record["key"], "answer": record["trajectory"]["final_sql"]}

    rows = engine(ScriptedBackend(tiny_tokenizer), tiny_tokenizer).run(
        turns, out_dir=tmp_path, progress=False, score=score
    )
    assert [r["key"] for r in rows] == [f"w/{k}#0" for k in range(4)] and all(r["answer"] for r in rows)
    assert threads and all(name.startswith("rollout-tools") for name in threads)
    assert len(load_records(tmp_path)) == 4


class SchedulingBackend(ScriptedBackend):
    """As a vLLM server: every ready conversation is submitted alone, at once, and comes back on its own.
    Nothing comes back until ``hold`` requests are in flight (or 120 s pass): the engine must send them
    all without waiting for an answer."""

    schedules_requests = True

    def __init__(self, tokenizer, hold: int = 4):
        super().__init__(tokenizer)
        self.pool = ThreadPoolExecutor(16)
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.hold, self.full = hold, threading.Event()

    def submit(self, prompt, params, seed):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self.in_flight >= self.hold:
                self.full.set()

        def work():
            self.full.wait(timeout=120)
            with self.lock:
                self.in_flight -= 1
                return self.generate([prompt], params, [seed])[0]

        return self.pool.submit(work)


class LimitedBackend(ScriptedBackend):
    def batch_limit(self, tokens_per_row):  # as hf on CUDA: rows that fit its free memory
        return 3


def test_batch_sizes_follow_the_backend(tiny_tokenizer):
    turns = [t for name in "abcdefgh" for t in dialogue(name, 1)]  # one message each
    plain, scheduling, limited = (
        cls(tiny_tokenizer) for cls in (ScriptedBackend, SchedulingBackend, LimitedBackend)
    )
    for backend in (plain, scheduling, limited):
        records = engine(backend, tiny_tokenizer, batch_size=2).run(turns, progress=False)
        assert [r["uid"] for r in records] == [t.uid for t in turns]
    assert plain.batches[0] == 2 and max(plain.batches) == 2  # 4 in flight, 2 per call
    assert (
        set(scheduling.batches) == {1} and scheduling.most_in_flight == 4
    )  # each alone, all admitted at once
    assert limited.batches[0] == 3 and max(limited.batches) == 3 and sum(limited.batches) == 8  # 3, not 2


class ForgettingBackend(ScriptedBackend):
    """Records what the engine says it will not continue."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.forgotten: list[list[int]] = []

    def forget(self, tokens):
        self.forgotten.append(list(tokens))


def test_a_finished_conversation_is_forgotten_by_the_backend(tiny_tokenizer, tmp_path):
    turns = dialogue("f", 3)  # one, two and three messages
    backend = ForgettingBackend(tiny_tokenizer)
    records = engine(backend, tiny_tokenizer).run(turns[:2], out_dir=tmp_path, progress=False)
    assert backend.forgotten == [
        r["prompt_ids"] + r["response_ids"] for r in records
    ]  # each once, when it ends
    again = ForgettingBackend(tiny_tokenizer)
    engine(again, tiny_tokenizer).run(turns, out_dir=tmp_path, progress=False)
    assert len(again.forgotten) == 1  # the resumed records were never in this backend
