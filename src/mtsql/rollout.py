"""Batched multi-turn rollouts: many conversations through the agent environment at once.

    engine = RolloutEngine(make_env, backend=backend, chat=chat, params=params, tools=TOOL_SCHEMAS)
    records = engine.run(turns, n=4, seed=0, out_dir=run_dir / "rollout")

Each step makes ONE backend call for every active episode, feeds each reply to its environment,
drops the finished episodes and starts waiting ones (up to ``batch_size`` active). Work is token-in /
token-out: an episode's ids are its prompt, then per assistant message the generated ids (mask 1),
and, when the conversation goes on, a closing ``<|im_end|>`` if the model stopped on a stop string
or at ``max_new_tokens`` (mask 0) and the tool observation's ids (mask 0). A message cut at
``max_new_tokens`` still goes to the environment (which can reject it) and marks the record
``truncated``. With a scripted ``policy`` instead of a backend, the same loop runs without tokens.

Episodes are keyed ``uid#sample``; each finished one is appended at once to a JSONL shard in
``out_dir``, and a rerun skips the keys already there. Sampling seeds are derived from (seed, uid,
sample, message index), so a record does not depend on batching or on being resumed.

Memory ``predicted``: the turns of one dialogue (and sample) form a chain run in order, each turn
remembering the agent's own earlier answers; chains of different dialogues share the batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mtsql.agent.env import SqlAgentEnv
from mtsql.agent.policies import SCRIPTED, make_policy
from mtsql.agent.tools import TOOL_SCHEMAS, MemoryEntry
from mtsql.backends import make_backend
from mtsql.backends.base import Backend, SamplingParams
from mtsql.chat_format import ChatFormat
from mtsql.data.records import Turn
from mtsql.errors import UsageError

log = logging.getLogger(__name__)

STOP_STRINGS = ("</tool_call>", "</answer_sql>")
SHARD_GLOB = "rollout-*.jsonl"


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
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    generations: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


class RolloutEngine:
    """Runs episodes of ``make_env()`` environments with a model backend or a scripted policy.

    ``make_env`` returns a fresh environment with ``reset(turn, memory)``, ``step(text)`` and a
    ``trajectory`` (``final_sql``, ``to_dict()``). ``memory``: ``gold`` or ``predicted`` (chains).
    """

    def __init__(self, make_env: Callable[[], object], *, backend: Backend | None = None,
                 chat: ChatFormat | None = None, params: SamplingParams | None = None,
                 policy: Callable[[list[dict], Turn, random.Random], str] | None = None,
                 tools: Sequence[dict] = (), memory: str = "gold", batch_size: int = 16):
        if (backend is None) == (policy is None):
            raise ValueError("give either a model backend (with chat and params) or a scripted policy")
        if backend is not None and (chat is None or params is None):
            raise ValueError("a model backend needs a chat format and sampling params")
        if memory not in ("gold", "predicted"):
            raise ValueError(f"memory must be gold or predicted, got {memory!r}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.make_env, self.backend, self.chat, self.params = make_env, backend, chat, params
        self.policy, self.tools, self.memory, self.batch_size = policy, list(tools), memory, batch_size

    @classmethod
    def from_config(cls, cfg, *, data_root: Path, policy: str, model: str | None = None,
                    temperature: float | None = None, backend: Backend | None = None) -> RolloutEngine:
        """An engine over ``cfg``'s environment (``env``, ``sql``, ``sample``, ``model``, ``seed``) with a
        model backend (``policy="model"``) or a scripted policy (``gold``, ``gold_with_correction``).

        ``backend``: an already loaded backend (the RL engine samples from the model it trains);
        ``temperature`` overrides ``sample.temperature``."""
        def make_env():
            return SqlAgentEnv(cfg.env, cfg.sql, data_root)

        common = {"memory": cfg.env.memory, "batch_size": cfg.sample.batch_size}
        if policy in SCRIPTED:
            return cls(make_env, policy=make_policy(policy, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=data_root),
                       **common)
        if policy != "model":
            raise UsageError(f"sample.policy: unknown '{policy}'; choose model, {', '.join(SCRIPTED)}")
        backend = backend or make_backend(cfg.sample.backend, model, **backend_options(cfg))
        params = SamplingParams(temperature=cfg.sample.temperature if temperature is None else temperature,
                                top_p=cfg.sample.top_p, max_new_tokens=cfg.sample.max_new_tokens,
                                seed=cfg.seed, stop=STOP_STRINGS)
        chat = ChatFormat.for_template(backend.tokenizer, cfg.model.template)
        tools = TOOL_SCHEMAS if cfg.env.mode == "long" else ()
        return cls(make_env, backend=backend, chat=chat, params=params, tools=tools, **common)

    # -----------------------------------------------------------------------------------------

    def run(self, turns: Sequence[Turn], *, n: int = 1, seed: int = 0, out_dir: Path | None = None,
            progress: bool = True) -> list[dict]:
        """Roll out ``n`` samples of every turn; return the records (resumed ones too) in input order."""
        done = load_records(out_dir) if out_dir is not None and Path(out_dir).exists() else {}
        chains = self._chains(turns, n)
        total = sum(len(c.turns) for c in chains)
        ready: deque[_Chain] = deque(chains)
        active: list[_Episode] = []
        records = dict(done)
        writer = _ShardWriter(out_dir) if out_dir is not None else None
        meter = _Meter(total, sum(key in done for key in iter_keys(turns, n)), progress)
        try:
            while ready or active:
                while ready and len(active) < self.batch_size:
                    episode = self._start(ready, done, seed)
                    if episode is not None:
                        active.append(episode)
                if not active:
                    continue
                finished, generated = self._step(active)
                for episode in finished:
                    active.remove(episode)
                    line = json.dumps(self._record(episode), ensure_ascii=False)
                    record = records[episode.key] = json.loads(line)  # exactly what a resumed run reads
                    if writer is not None:
                        writer.write(line)
                    chain = episode.chain
                    chain.answers.append(record["trajectory"].get("final_sql"))
                    chain.position += 1
                    if chain.position < len(chain.turns):
                        ready.appendleft(chain)  # finish started dialogues first
                meter.advance(len(finished), generated)
        finally:
            meter.close()
            if writer is not None:
                writer.close()
        return [records[key] for key in iter_keys(turns, n)]

    def _chains(self, turns: Sequence[Turn], n: int) -> list[_Chain]:
        if self.memory == "gold":
            return [_Chain([t], s) for t in turns for s in range(n)]
        dialogues: dict[str, list[Turn]] = {}
        for turn in turns:
            dialogues.setdefault(turn.interaction_id, []).append(turn)
        for dialogue in dialogues.values():
            dialogue.sort(key=lambda t: t.turn_index)
            if [t.turn_index for t in dialogue] != list(range(len(dialogue))):
                raise UsageError(f"{dialogue[0].interaction_id}: predicted memory needs every turn of the "
                                 f"dialogue from the first, got turns {[t.turn_index for t in dialogue]}")
        return [_Chain(list(d), s) for d in dialogues.values() for s in range(n)]

    def _start(self, ready: deque[_Chain], done: dict[str, dict], seed: int) -> _Episode | None:
        """The next episode of the first ready chain (skipping turns already done); None if none is left."""
        chain = ready.popleft()
        while chain.position < len(chain.turns):
            turn = chain.turns[chain.position]
            key = episode_key(turn.uid, chain.sample)
            if key not in done:
                break
            chain.answers.append(done[key]["trajectory"].get("final_sql"))
            chain.position += 1
        else:
            return None
        env = self.make_env()
        memory = None
        if self.memory == "predicted" and chain.position:
            done_turns = chain.turns[: chain.position]
            memory = [MemoryEntry(t.question, sql) for t, sql in zip(done_turns, chain.answers, strict=True)]
        messages = env.reset(turn, memory)
        episode = _Episode(chain, turn, key, env, derive_seed(seed, key))
        if self.backend is not None:
            episode.prompt_ids = self.chat.prompt_ids(messages, self.tools)
        return episode

    def _step(self, active: list[_Episode]) -> tuple[list[_Episode], int]:
        """One message for every active episode; returns the episodes that ended and the ids generated."""
        if self.backend is None:
            replies = [(self.policy(list(e.env.trajectory.messages), e.turn, e.rng), None) for e in active]
        else:
            seeds = [derive_seed(e.seed, len(e.generations)) for e in active]
            generations = self.backend.generate([e.ids for e in active], self.params, seeds)
            replies = [(g.text, g) for g in generations]
        finished, generated = [], 0
        for episode, (text, generation) in zip(active, replies, strict=True):
            if generation is not None:
                generated += len(generation.token_ids)
                self._add_generation(episode, generation)
            observation, ended, _ = episode.env.step(text)
            if ended:
                finished.append(episode)
            elif generation is not None:
                if generation.token_ids[-1:] != [self.chat.end_of_turn_id]:
                    self._add_prompt_ids(episode, [self.chat.end_of_turn_id])
                self._add_prompt_ids(episode, self.chat.observation_ids(observation))
        return finished, generated

    def _add_generation(self, episode: _Episode, generation) -> None:
        episode.response_ids += generation.token_ids
        episode.response_mask += [1] * len(generation.token_ids)
        episode.response_logprobs += generation.logprobs or [0.0] * len(generation.token_ids)
        episode.generations.append({"tokens": len(generation.token_ids), "finish_reason": generation.finish_reason})

    def _add_prompt_ids(self, episode: _Episode, ids: list[int]) -> None:
        episode.response_ids += ids
        episode.response_mask += [0] * len(ids)
        episode.response_logprobs += [0.0] * len(ids)

    def _record(self, episode: _Episode) -> dict:
        model = self.backend is not None
        return {
            "key": episode.key,
            "uid": episode.turn.uid,
            "sample": episode.chain.sample,
            "turn": episode.turn.to_dict(),
            "trajectory": episode.env.trajectory.to_dict(),
            "truncated": any(g["finish_reason"] == "length" for g in episode.generations),
            "generations": episode.generations,
            "generated_tokens": sum(g["tokens"] for g in episode.generations),
            "prompt_ids": episode.prompt_ids if model else None,
            "response_ids": episode.response_ids if model else None,
            "response_mask": episode.response_mask if model else None,
            "response_logprobs": episode.response_logprobs if model and self.params.logprobs else None,
            "elapsed_s": round(time.perf_counter() - episode.started, 3),
        }


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
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("rollout"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]} tok/s"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
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


def backend_options(cfg) -> dict:
    """Constructor options of the ``sample.backend`` a config names (``model``, ``sample``, ``seed``)."""
    if cfg.sample.backend == "hf":
        return {"dtype": cfg.model.dtype, "device": cfg.model.device}
    if cfg.sample.backend == "openai":
        return {"base_url": cfg.sample.openai_base_url, "served_model": cfg.sample.openai_model,
                "concurrency": cfg.sample.openai_concurrency, "timeout_s": cfg.sample.openai_timeout_s}
    return {"dtype": cfg.model.dtype, "seed": cfg.seed}


def iter_keys(turns: Iterable[Turn], n: int) -> list[str]:
    """Every episode key of ``turns`` x ``n`` samples, in the order ``run`` returns records."""
    return [episode_key(t.uid, s) for t in turns for s in range(n)]
