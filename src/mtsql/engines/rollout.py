"""Batched multi-turn rollouts: many conversations through the agent environment at once.

    engine = RolloutEngine(make_env, backend=backend, chat=chat, params=params, tools=TOOL_SCHEMAS)
    records = engine.run(turns, n=4, seed=0, out_dir=run_dir / "rollout")

Generation never waits for SQL: the backend runs on the calling thread, one call for a batch of
ready conversations, while a pool of worker threads resets environments, runs the tool calls of
the replies (``env.step``: SQL, memory rendering) and, if the caller asks, scores finished
records. A conversation whose step is done is ready for the next call; a finished one's place is
taken at once by the next turn waiting (up to twice ``batch_size`` conversations in flight, so one
batch's tools run while the other generates), and the backend ``forget``s it (what it kept to
continue it goes). ``engine.stats`` tells how busy the backend was.

Work is token-in / token-out (``mtsql.core.episode_tokens``): an episode's ids are its prompt, then per
assistant message the generated ids (mask 1), and, when the conversation goes on, a closing
``<|im_end|>`` if the model stopped on a stop string or at ``max_new_tokens`` (mask 0) and the
tool observation's ids (mask 0), within an optional response budget (``max_response_tokens``;
the record's ``stop`` says ``response_length`` when it ended an episode). A message cut at
``max_new_tokens`` still goes to the environment (which can reject it) and marks the record
``truncated``. With a scripted ``policy`` instead of a backend, the same loop runs without tokens.

A chat-API backend (``takes_messages``) gets each conversation's messages instead of its ids and
answers with text and the tokens the API counted: an episode's record then has no ids, its
``generations`` hold those counts, and the response budget counts what the API reports after the
prompt (the growth of its prompt tokens since the first message, plus the last completion's), so an
episode ends with ``stop == "response_length"`` once a reply reaches it.

Episodes are keyed ``uid#sample``; each finished one is appended at once to a JSONL shard in
``out_dir``, and a rerun skips the keys already there. Sampling seeds are derived from (seed, uid,
sample, message index), so a record does not depend on batching, on timing or on being resumed.

Memory ``predicted``: the turns of one dialogue (and sample) form a chain run in order, each turn
remembering the agent's own earlier answers; chains of different dialogues share the batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import SCRIPTED, make_policy
from mtsql.core.agent.tools import MemoryEntry, env_tools
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data.records import Turn
from mtsql.core.episode_tokens import EPISODE_END, RESPONSE_LENGTH, EpisodeTokens
from mtsql.engines.backends import backend_for
from mtsql.engines.backends.base import Backend, Reply, SamplingParams

log = logging.getLogger(__name__)

STOP_STRINGS = ("</tool_call>", "</answer_sql>")
SHARD_GLOB = "rollout-*.jsonl"
SERVER_LOG = "vllm-server.log"  # a managed vLLM server's output, in the stage folder
TOOL_WORKERS = 4  # threads for environment steps and scoring (SQLite releases the GIL while it runs a query)
FILL_WAIT = 0.05  # the longest a free backend waits for a fuller batch, as a share of its last call's time


def episode_key(uid: str, sample: int) -> str:
    return f"{uid}#{sample}"


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from a base seed and any identifying parts (stable across runs and machines)."""
    digest = hashlib.sha256("|".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def load_records(out_dir: Path) -> dict[str, dict]:
    """The finished episodes in ``out_dir``'s shards, by key. A line cut by a crash is skipped (logged)."""
    records: dict[str, dict] = {}
    broken = 0
    for shard in sorted(Path(out_dir).glob(SHARD_GLOB)):
        for line in shard.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                broken += 1
                continue
            records[row["key"]] = row
    if broken:
        log.warning("%s: skipped %d incomplete line(s) left by an interrupted run", out_dir, broken)
    return records


@dataclass
class _Chain:
    """Turns that must run one after another (a dialogue in predicted-memory mode, else one turn)."""

    turns: list[Turn]
    sample: int
    position: int = 0
    answers: list[str | None] = field(default_factory=list)  # final SQL of the turns done so far


@dataclass
class _Episode:
    chain: _Chain
    turn: Turn
    key: str
    env: object
    seed: int
    tokens: EpisodeTokens | None = None  # model policies of token-id backends
    first_prompt: int | None = None  # message backends: the prompt tokens of the first request
    spent: int = 0  # message backends: response tokens so far, as the API counts them
    stop: str = EPISODE_END  # message backends: why the episode ended
    generations: list[dict] = field(default_factory=list)
    steps: int = 0  # environment steps taken
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self.rng = random.Random(self.seed)


@dataclass
class _Finished:
    """What a worker hands back for an episode that ended (None: a resumed record): its record, as
    JSON and as read back, and the scored row when the caller scores records."""

    episode: _Episode | None
    line: str
    record: dict
    row: object | None = None


class RolloutEngine:
    """Runs episodes of ``make_env()`` environments with a model backend or a scripted policy.

    ``make_env`` returns a fresh environment with ``reset(turn, memory)``, ``step(text)`` and a
    ``trajectory`` (``final_sql``, ``to_dict()``). ``memory``: ``gold`` or ``predicted`` (chains).
    ``batch_size``: conversations per backend call (a backend that sizes its batches from free memory,
    or schedules requests itself, overrides it); up to twice as many are in flight. ``max_response_tokens``:
    the response budget of an episode (``mtsql.core.episode_tokens``; None: unbounded). ``tool_workers``:
    threads that run environment steps and scoring.
    """

    def __init__(
        self,
        make_env: Callable[[], object],
        *,
        backend: Backend | None = None,
        chat: ChatFormat | None = None,
        params: SamplingParams | None = None,
        policy: Callable[[list[dict], Turn, random.Random], str] | None = None,
        tools: Sequence[dict] = (),
        memory: str = "gold",
        batch_size: int = 16,
        max_response_tokens: int | None = None,
        tool_workers: int = TOOL_WORKERS,
    ):
        if (backend is None) == (policy is None):
            raise ValueError("give either a model backend (with chat and params) or a scripted policy")
        if backend is not None and (params is None or (chat is None and not backend.takes_messages)):
            raise ValueError(
                "a model backend needs a chat format (unless it takes messages) and sampling params"
            )
        if memory not in ("gold", "predicted"):
            raise ValueError(f"memory must be gold or predicted, got {memory!r}")
        if batch_size < 1 or tool_workers < 1:
            raise ValueError("batch_size and tool_workers must be at least 1")
        if max_response_tokens is not None and max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be at least 1 or None, got {max_response_tokens}")
        self.make_env, self.backend, self.chat, self.params = make_env, backend, chat, params
        self.policy, self.tools, self.memory, self.batch_size = policy, list(tools), memory, batch_size
        self.max_response_tokens, self.tool_workers = max_response_tokens, tool_workers
        # figures of the last run: wall_s, generate_s, calls, generated_tokens, episodes
        self.stats: dict = {}
        self.owns_backend = False  # from_config made the backend: close() releases it

    @classmethod
    def from_config(
        cls,
        cfg,
        *,
        data_root: Path,
        policy: str,
        model: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        backend: Backend | None = None,
        max_response_tokens: int | None = None,
        log_path: Path | None = None,
        attempts: dict[str, str] | None = None,
        items: list[str] | None = None,
    ) -> RolloutEngine:
        """An engine over ``cfg``'s environment (``env``, ``sql``, ``sample``, ``model``, ``seed``) with a
        model backend (``policy="model"``) or a scripted policy (``policies.SCRIPTED``; ``own_mistakes`` reads
        ``attempts``, uid -> the model's first message; ``items``: the uids to be sampled, for the exact share
        of ``gold_grounded``).

        ``backend``: an already loaded backend (the RL engine samples from the model it trains; the
        caller closes it), else the engine makes ``sample.backend`` for ``model`` and ``close`` releases
        it (a managed vLLM server logs to ``log_path``); ``temperature``, ``top_p`` and ``max_new_tokens``
        override ``sample``'s (the RL engines sample by their own settings); ``max_response_tokens`` bounds
        each episode's response (the RL engines' response length). Use it as a context manager:
        ``with RolloutEngine.from_config(...)``."""

        def make_env():
            return SqlAgentEnv(cfg.env, cfg.sql, data_root)

        common = {"memory": cfg.env.memory, "batch_size": cfg.sample.batch_size}
        if policy in SCRIPTED:
            return cls(
                make_env,
                policy=make_policy(
                    policy,
                    env_cfg=cfg.env,
                    sql_cfg=cfg.sql,
                    data_root=data_root,
                    correction_share=cfg.sample.correction_share,
                    failure_share=cfg.sample.failure_share,
                    attempts=attempts,
                    items=items,
                ),
                **common,
            )
        if policy != "model":
            raise UsageError(f"sample.policy: unknown '{policy}'; choose model, {', '.join(SCRIPTED)}")
        owned = backend is None
        if owned:
            backend = backend_for(cfg, model, log_path=log_path)
        try:
            params = SamplingParams(
                temperature=cfg.sample.temperature if temperature is None else temperature,
                top_p=cfg.sample.top_p if top_p is None else top_p,
                max_new_tokens=cfg.sample.max_new_tokens if max_new_tokens is None else max_new_tokens,
                seed=cfg.seed,
                stop=STOP_STRINGS,
            )
            chat = (
                None
                if backend.takes_messages
                else ChatFormat.for_template(backend.tokenizer, cfg.model.template)
            )
            engine = cls(
                make_env,
                backend=backend,
                chat=chat,
                params=params,
                tools=env_tools(cfg.env),
                max_response_tokens=max_response_tokens,
                **common,
            )
        except BaseException:
            if owned:
                backend.close()
            raise
        engine.owns_backend = owned
        return engine

    def close(self) -> None:
        """Release the backend this engine made (a managed vLLM server stops)."""
        if self.owns_backend and self.backend is not None:
            self.backend.close()

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------

    def run(
        self,
        turns: Sequence[Turn],
        *,
        n: int = 1,
        seed: int = 0,
        out_dir: Path | None = None,
        progress: bool = True,
        score: Callable[[dict], object] | None = None,
    ) -> list:
        """Roll out ``n`` samples of every turn; return the records (resumed ones too) in input order.

        ``score``: a function of a record run on the tool workers as each episode ends (resumed
        records too); ``run`` then returns its results instead of the records."""
        done = load_records(out_dir) if out_dir is not None and Path(out_dir).exists() else {}
        keys = iter_keys(turns, n)
        chains = self._chains(turns, n)
        writer = _ShardWriter(out_dir) if out_dir is not None else None
        meter = _Meter(sum(len(c.turns) for c in chains), sum(key in done for key in keys), progress)
        rollout = _Rollout(self, chains, done, seed, score, writer, meter)
        try:
            results = rollout.run(keys)
        finally:
            meter.close()
            if writer is not None:
                writer.close()
        self.stats = rollout.stats()
        log.info(
            "rollout: %(episodes)d episodes, %(generated_tokens)d generated tokens in %(wall_s).1f s, "
            "backend busy %(busy)s",
            {**self.stats, "busy": f"{self.stats['busy_share']:.0%}"},
        )
        return [results[key] for key in keys]

    def _chains(self, turns: Sequence[Turn], n: int) -> list[_Chain]:
        if self.memory == "gold":
            return [_Chain([t], s) for t in turns for s in range(n)]
        dialogues: dict[str, list[Turn]] = {}
        for turn in turns:
            dialogues.setdefault(turn.interaction_id, []).append(turn)
        for dialogue in dialogues.values():
            dialogue.sort(key=lambda t: t.turn_index)
            if [t.turn_index for t in dialogue] != list(range(len(dialogue))):
                raise UsageError(
                    f"{dialogue[0].interaction_id}: predicted memory needs every turn of the "
                    f"dialogue from the first, got turns {[t.turn_index for t in dialogue]}"
                )
        return [_Chain(list(d), s) for d in dialogues.values() for s in range(n)]

    def _record(self, episode: _Episode) -> dict:
        """The episode's record: the first fields of ``trajectories.ScoredRow``, in its order."""
        tokens = episode.tokens
        return {
            "key": episode.key,
            "uid": episode.turn.uid,
            "sample": episode.chain.sample,
            "turn": episode.turn.to_dict(),
            "trajectory": episode.env.trajectory.to_dict(),
            "truncated": any(g["finish_reason"] == "length" for g in episode.generations),
            "stop": tokens.stop if tokens is not None else episode.stop,
            "generations": episode.generations,
            "generated_tokens": sum(g["tokens"] for g in episode.generations),
            "prompt_ids": tokens.prompt_ids if tokens is not None else None,
            "response_ids": tokens.ids if tokens is not None else None,
            "response_mask": tokens.mask if tokens is not None else None,
            "response_logprobs": tokens.logprobs if tokens is not None and self.params.logprobs else None,
            "elapsed_s": round(time.perf_counter() - episode.started, 3),
        }


class _Rollout:
    """One ``RolloutEngine.run``: the backend on this thread, environments on a pool of workers.

    An episode is always in one place: with a worker (``reset`` or ``step``), ready (its prompt
    waits for the backend) or in a backend call. Whenever the backend is free it gets up to a
    batch of ready episodes; meanwhile the workers run the tool calls of the previous batch, and a
    finished episode's place goes at once to the next turn waiting. With fewer ready than a batch
    while workers are busy, the backend waits for them at most ``FILL_WAIT`` of its last call's time.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        chains: list[_Chain],
        done: dict[str, dict],
        seed: int,
        score: Callable[[dict], object] | None,
        writer: _ShardWriter | None,
        meter: _Meter,
    ):
        self.engine, self.done, self.seed, self.score = engine, done, seed, score
        self.writer, self.meter = writer, meter
        self.waiting: deque[_Chain] = deque(chains)  # chains with a turn to start
        self.ready: deque[_Episode] = deque()
        self.events: queue.SimpleQueue[Future | tuple[_Episode, Future]] = queue.SimpleQueue()
        self.with_workers = self.in_flight = self.starting = 0  # starting: resets with the workers
        self.target = engine.batch_size  # conversations one call should get
        self.results: dict[str, object] = {}
        self.started = self.idle_since = time.perf_counter()
        self.generate_s = self.last_call_s = 0.0
        self.calls = self.generated = self.episodes = 0
        self.generating, self.busy_since = 0, 0.0  # requests a scheduling backend is working on, since when

    def run(self, keys: list[str]) -> dict[str, dict]:
        with ThreadPoolExecutor(self.engine.tool_workers, thread_name_prefix="rollout-tools") as self.pool:
            try:
                for key in keys:
                    if key in self.done:
                        self._submit(self._resumed, self.done[key])
                while self.waiting or self.in_flight or self.with_workers:
                    self._admit()
                    self._collect(wait=False)
                    if self.ready and not self._worth_waiting():
                        self._generate()
                    elif self.with_workers:
                        self._collect(wait=True)
            finally:
                self.pool.shutdown(wait=True, cancel_futures=True)
        return self.results

    def stats(self) -> dict:
        wall = time.perf_counter() - self.started
        return {
            "wall_s": wall,
            "generate_s": self.generate_s,
            "busy_share": self.generate_s / max(wall, 1e-9),
            "calls": self.calls,
            "generated_tokens": self.generated,
            "episodes": self.episodes,
        }

    # -- scheduling (this thread) ------------------------------------------------------------

    def _admit(self) -> None:
        """Start the next turns waiting, up to twice a batch in flight."""
        while self.waiting and self.in_flight < 2 * self.target:
            chain = self.waiting.popleft()
            while chain.position < len(chain.turns):
                key = episode_key(chain.turns[chain.position].uid, chain.sample)
                if key not in self.done:
                    break
                chain.answers.append(self.done[key]["trajectory"].get("final_sql"))
                chain.position += 1
            else:
                continue
            turn = chain.turns[chain.position]
            memory = None
            if self.engine.memory == "predicted" and chain.position:
                done_turns = chain.turns[: chain.position]
                memory = [
                    MemoryEntry(t.question, sql) for t, sql in zip(done_turns, chain.answers, strict=True)
                ]
            episode = _Episode(
                chain,
                turn,
                episode_key(turn.uid, chain.sample),
                self.engine.make_env(),
                derive_seed(self.seed, episode_key(turn.uid, chain.sample)),
            )
            self.in_flight += 1
            self.starting += 1
            self._submit(self._reset, episode, memory)

    def _worth_waiting(self) -> bool:
        """Whether to let the workers fill the batch a little longer before calling the backend."""
        if self.engine.backend is not None and self.engine.backend.schedules_requests:
            return False  # requests go one by one: nothing to fill
        if not self.calls:
            return self.starting > 0  # the backend has nothing to do yet: start with every episode admitted
        if len(self.ready) >= self.target or not self.with_workers:
            return False
        return time.perf_counter() - self.idle_since < FILL_WAIT * self.last_call_s

    def _generate(self) -> None:
        engine = self.engine
        if engine.backend is not None and engine.backend.schedules_requests:
            self._submit_ready()
            return
        limit = self._call_size()
        batch = [self.ready.popleft() for _ in range(min(len(self.ready), limit or len(self.ready)))]
        started = time.perf_counter()
        if engine.backend is None:
            replies = [(engine.policy(list(e.env.trajectory.messages), e.turn, e.rng), None) for e in batch]
        else:
            seeds = [derive_seed(e.seed, len(e.generations)) for e in batch]
            generations = engine.backend.generate([e.tokens.sequence for e in batch], engine.params, seeds)
            replies = [(self._take(e, g), g) for e, g in zip(batch, generations, strict=True)]
        self.idle_since = time.perf_counter()
        self.last_call_s = self.idle_since - started
        self.generate_s += self.last_call_s
        self.calls += 1
        for episode, (text, _) in zip(batch, replies, strict=True):
            self._submit(self._step, episode, text)

    def _submit_ready(self) -> None:
        """Hand every ready conversation to a backend that schedules requests itself; each message
        comes back as an event as soon as it is done (``_generated``)."""
        backend, params = self.engine.backend, self.engine.params
        while self.ready:
            episode = self.ready.popleft()
            if not self.generating:
                self.busy_since = time.perf_counter()
            self.generating += 1
            self.with_workers += 1
            self.calls += 1
            seed = derive_seed(episode.seed, len(episode.generations))
            if backend.takes_messages:
                future = backend.submit_messages(
                    list(episode.env.trajectory.messages),
                    self.engine.tools,
                    self._message_params(episode),
                    seed,
                )
            else:
                future = backend.submit(episode.tokens.sequence, params, seed)
            future.add_done_callback(lambda done, episode=episode: self.events.put((episode, done)))

    def _generated(self, episode: _Episode, generation) -> None:
        self.generating -= 1
        if not self.generating:
            self.generate_s += time.perf_counter() - self.busy_since
        take = self._take_reply if self.engine.backend.takes_messages else self._take
        text = take(episode, generation)
        self._submit(self._step, episode, text)

    def _message_params(self, episode: _Episode) -> SamplingParams:
        """A message backend's sampling params for the episode's next message: at most what is left of its
        response budget."""
        params, budget = self.engine.params, self.engine.max_response_tokens
        if budget is None or budget - episode.spent >= params.max_new_tokens:
            return params
        return replace(params, max_new_tokens=max(1, budget - episode.spent))

    def _take_reply(self, episode: _Episode, reply: Reply) -> str:
        """Count a chat API's reply in the episode (its tokens as the API counted them); the text for the
        environment."""
        completion, prompt = reply.completion_tokens or 0, reply.prompt_tokens
        if prompt is not None and episode.first_prompt is None:
            episode.first_prompt = prompt
        grown = (
            prompt - episode.first_prompt if prompt is not None and episode.first_prompt is not None else None
        )
        episode.spent = (grown if grown is not None else episode.spent) + completion
        episode.generations.append(
            {"tokens": completion, "prompt_tokens": prompt or 0, "finish_reason": reply.finish_reason}
        )
        self.generated += completion
        return reply.text

    def _call_size(self) -> int | None:
        """Conversations the next call takes; updates the batch target."""
        engine = self.engine
        if engine.backend is None:
            return self.target
        longest = max(len(e.tokens.sequence) for e in self.ready) + engine.params.max_new_tokens
        limit = engine.backend.batch_limit(longest)
        if limit is not None:
            self.target = limit
        return self.target

    def _take(self, episode: _Episode, generation) -> str:
        """Add a generation to the episode's tokens (cut to its budget); the text the environment reads."""
        context = len(episode.tokens.sequence)  # the ids this call read (measures.cost's prompt tokens)
        kept = episode.tokens.add_generation(generation.token_ids, generation.logprobs)
        cut = len(kept) < len(generation.token_ids)
        episode.generations.append(
            {
                "tokens": len(kept),
                "prompt_tokens": context,
                "finish_reason": "length" if cut else generation.finish_reason,
            }
        )
        self.generated += len(kept)
        return episode.tokens.text(kept) if cut else generation.text

    def _submit(self, work, *args) -> None:
        self.with_workers += 1
        self.pool.submit(work, *args).add_done_callback(self.events.put)

    def _collect(self, wait: bool) -> None:
        """Take what the workers finished (waiting for the first one if ``wait``)."""
        timeout = None
        if wait and self.calls and self.ready:  # wait only as long as filling the batch is worth it
            timeout = max(0.0, self.idle_since + FILL_WAIT * self.last_call_s - time.perf_counter())
        while True:
            try:
                future = self.events.get(block=wait, timeout=timeout)
            except queue.Empty:
                return
            wait = False
            self.with_workers -= 1
            if isinstance(future, tuple):  # a backend request: (episode, its future)
                episode, request = future
                self._generated(episode, request.result())  # a failed request surfaces here
                continue
            outcome = future.result()  # a worker's exception surfaces here
            if isinstance(outcome, _Episode):
                self.starting -= not outcome.steps
                self.ready.append(outcome)
            else:
                self._record(outcome)

    def _record(self, finished: _Finished) -> None:
        episode, record = finished.episode, finished.record
        self.results[record["key"]] = finished.row if self.score is not None else record
        if episode is None:
            return  # a resumed record
        if self.engine.backend is not None and episode.tokens is not None:
            self.engine.backend.forget(episode.tokens.sequence)
        if self.writer is not None:
            self.writer.write(finished.line)
        self.in_flight -= 1
        self.episodes += 1
        chain = episode.chain
        chain.answers.append(record["trajectory"].get("final_sql"))
        chain.position += 1
        if chain.position < len(chain.turns):
            self.waiting.appendleft(chain)  # finish started dialogues first
        self.meter.advance(1, sum(g["tokens"] for g in episode.generations))

    # -- work (tool workers) -----------------------------------------------------------------

    def _reset(self, episode: _Episode, memory: list[MemoryEntry] | None) -> _Episode:
        messages = episode.env.reset(episode.turn, memory)
        engine = self.engine
        if engine.backend is not None and not engine.backend.takes_messages:
            episode.tokens = EpisodeTokens(
                engine.chat, engine.chat.prompt_ids(messages, engine.tools), engine.max_response_tokens
            )
        return episode

    def _step(self, episode: _Episode, text: str) -> _Episode | _Finished:
        observation, ended, _ = episode.env.step(text)
        episode.steps += 1
        budget = self.engine.max_response_tokens
        if not ended and episode.tokens is None and budget is not None and episode.spent >= budget:
            ended, episode.stop = True, RESPONSE_LENGTH  # a message backend's reply reached the budget
        if ended or (episode.tokens is not None and not episode.tokens.add_observation(observation)):
            line = json.dumps(self.engine._record(episode), ensure_ascii=False)
            return self._scored(_Finished(episode, line, json.loads(line)))  # exactly what a resume reads
        return episode

    def _resumed(self, record: dict) -> _Finished:
        return self._scored(_Finished(None, "", record))

    def _scored(self, finished: _Finished) -> _Finished:
        if self.score is not None:
            finished.row = self.score(finished.record)
        return finished


class _ShardWriter:
    """Appends records (JSON lines) to a new shard file of ``out_dir``, flushing each."""

    def __init__(self, out_dir: Path):
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        index = len(list(out_dir.glob(SHARD_GLOB)))
        while (out_dir / f"rollout-{index:04d}.jsonl").exists():
            index += 1
        self.path = out_dir / f"rollout-{index:04d}.jsonl"
        self.file = None

    def write(self, line: str) -> None:
        if self.file is None:
            self.file = open(self.path, "a", encoding="utf-8")
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class _Meter:
    """A rich progress bar: episodes done of all, generated tokens per second, time left."""

    def __init__(self, total: int, already: int, enabled: bool):
        self.started, self.tokens = time.perf_counter(), 0
        self.progress = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            from mtsql.base.progress import progress_bar

            self.progress = progress_bar(
                TextColumn("rollout"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} tok/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self.task = self.progress.add_task("rollout", total=total, completed=already, rate="-")
            self.progress.start()

    def advance(self, episodes: int, tokens: int) -> None:
        self.tokens += tokens
        if self.progress is not None:
            rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
            self.progress.update(self.task, advance=episodes, rate=f"{rate:,.0f}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def iter_keys(turns: Iterable[Turn], n: int) -> list[str]:
    """Every episode key of ``turns`` x ``n`` samples, in the order ``run`` returns records."""
    return [episode_key(t.uid, s) for t in turns for s in range(n)]
