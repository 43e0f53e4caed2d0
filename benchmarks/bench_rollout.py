"""Rollout throughput: the pipelined engine against today's loop, on SQL-heavy turns.

    python benchmarks/bench_rollout.py                                  # hf on CPU, SmolLM2, 16 and 64
    python benchmarks/bench_rollout.py --model tiny-qwen3 --conversations 16 64 256
    python benchmarks/bench_rollout.py --device cuda --conversations 16 64 256
    python benchmarks/bench_rollout.py --backends hf vllm --loops engine    # paired: vLLM server vs hf
    python benchmarks/bench_rollout.py --backends hf vllm openai --openai-url http://127.0.0.1:8000/v1

Every conversation is a CoSQL dev turn of the packaged fixture (greedy, long-horizon protocol,
``--max-messages`` messages at most), in an environment whose every step also does SQL work on the
turn's real SQLite database: its gold query and a counting query sized to take ``--sql-ms``
milliseconds (calibrated once), as an agent that runs heavy queries would. For each backend
available and each number of conversations it runs:

  reference: today's loop, kept here: one backend call for the active conversations, then each
             reply's environment step in turn on the calling thread, then the next call;
  engine:    ``RolloutEngine`` (environment steps on worker threads while the backend generates);
  raw (hf):  one ``model.generate`` over the first prompts, as many new tokens per conversation as
             the engine generated in all (end of turn suppressed): the ceiling without any environment.

Both loops get the same batch size (``--batch-size``, default half the conversations). Printed:
generated tokens/s, the share of wall time the backend was generating, the engine's speed-up over
the reference (wall time; the tokens are the same) and whether both produced the same tokens and
trajectories. Goal on CPU: the backend busy >= 90 % at 64 conversations.

With several backends, a second table pairs each one's engine run with hf's on the same
conversations: the wall-time ratio, the server start (vllm: a managed server, ``--dtype``), and on
how many conversations the greedy tokens and trajectories are the same as hf's (float32 for
agreement; bfloat16 where the CPU has it is faster and rounds differently).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from rich.console import Console
from rich.table import Table

from mtsql.base.paths import FIXTURE_DATA, database_path
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data import load_turns
from mtsql.core.sql.executor import execute
from mtsql.engines.backends import make_backend
from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.models.registry import resolve_model
from mtsql.engines.rollout import STOP_STRINGS, RolloutEngine, derive_seed, episode_key

COUNTING = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {}) SELECT count(*) FROM n"
)


class SqlHeavyEnv(SqlAgentEnv):
    """The agent environment, plus SQL work on the turn's database at every step."""

    rows = 100_000  # of the counting query; set by ``calibrate``
    sql_s = 0.0  # SQL work done by all instances, in seconds
    lock = threading.Lock()

    def step(self, assistant_text: str):
        started = time.perf_counter()
        db = database_path(self.trajectory.db_id, self.data_root)
        if not db.is_file():  # a database the fixture has only the schema of
            db = database_path("pets_1", FIXTURE_DATA)
        execute(db, self._turn.gold_sql)
        work = execute(db, COUNTING.format(self.rows), timeout_s=60)
        if not work.ok:
            raise RuntimeError(f"benchmark SQL failed on {db}: {work.error_message}")
        with self.lock:
            SqlHeavyEnv.sql_s += time.perf_counter() - started
        return super().step(assistant_text)

    @classmethod
    def calibrate(cls, sql_ms: float) -> None:
        db = database_path("pets_1", FIXTURE_DATA)
        probe = 200_000
        started = time.perf_counter()
        execute(db, COUNTING.format(probe), timeout_s=60)
        cls.rows = max(1, round(probe * sql_ms / 1000 / (time.perf_counter() - started)))


def sql_threads(console, queries: int = 16) -> None:
    """How SQLite work scales over threads here (it releases the GIL while a query runs)."""
    db = database_path("pets_1", FIXTURE_DATA)
    rates = []
    for threads in (1, 2, 4):
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda _: execute(db, COUNTING.format(SqlHeavyEnv.rows), timeout_s=60), range(queries)
                )
            )
        rates.append(f"{threads} thread(s) {queries / (time.perf_counter() - started):.1f}/s")
    console.print(f"SQL work per step ({SqlHeavyEnv.rows:,} rows counted): " + ", ".join(rates))


def make_env(max_messages: int):
    return lambda: SqlHeavyEnv(EnvConfig(max_messages=max_messages), data_root=FIXTURE_DATA)


def reference_run(backend, chat, params, turns, n, batch_size, env_factory) -> tuple[dict, dict]:
    """Today's loop: batched calls, environment steps one after another between them."""
    waiting = [(turn, sample) for turn in turns for sample in range(n)]
    waiting.reverse()
    active, records = [], {}
    started, generate_s, tokens = time.perf_counter(), 0.0, 0
    while waiting or active:
        while waiting and len(active) < batch_size:
            turn, sample = waiting.pop()
            env = env_factory()
            key = episode_key(turn.uid, sample)
            active.append(
                {
                    "key": key,
                    "env": env,
                    "seed": derive_seed(0, key),
                    "generations": [],
                    "prompt": chat.prompt_ids(env.reset(turn), TOOL_SCHEMAS),
                    "ids": [],
                    "mask": [],
                }
            )
        call = time.perf_counter()
        outs = backend.generate(
            [e["prompt"] + e["ids"] for e in active],
            params,
            [derive_seed(e["seed"], len(e["generations"])) for e in active],
        )
        generate_s += time.perf_counter() - call
        for episode, out in zip(list(active), outs, strict=True):
            tokens += len(out.token_ids)
            episode["ids"] += out.token_ids
            episode["mask"] += [1] * len(out.token_ids)
            episode["generations"].append({"tokens": len(out.token_ids), "finish_reason": out.finish_reason})
            observation, ended, _ = episode["env"].step(out.text)
            if ended:
                active.remove(episode)
                records[episode["key"]] = comparable(
                    episode["prompt"],
                    episode["ids"],
                    episode["mask"],
                    episode["generations"],
                    episode["env"].trajectory.to_dict(),
                )
                continue
            follow = [] if out.token_ids[-1:] == [chat.end_of_turn_id] else [chat.end_of_turn_id]
            follow += chat.observation_ids(observation)
            episode["ids"] += follow
            episode["mask"] += [0] * len(follow)
    wall = time.perf_counter() - started
    return records, {"wall_s": wall, "generate_s": generate_s, "generated_tokens": tokens}


def comparable(prompt, ids, mask, generations, trajectory) -> str:
    """What must not change between the loops: tokens, mask, messages and steps (timings left out)."""
    trajectory = {
        **trajectory,
        "elapsed_s": None,
        "steps": [{**s, "tool_s": None} for s in trajectory["steps"]],
    }
    return json.dumps([prompt, ids, mask, generations, trajectory], sort_keys=True)


def engine_run(
    backend, chat, params, turns, n, batch_size, env_factory, workers: int = 4
) -> tuple[dict, dict]:
    engine = RolloutEngine(
        env_factory,
        backend=backend,
        chat=chat,
        params=params,
        tools=TOOL_SCHEMAS,
        batch_size=batch_size,
        tool_workers=workers,
    )
    records = engine.run(turns, n=n, progress=False)
    return (
        {
            r["key"]: comparable(
                r["prompt_ids"], r["response_ids"], r["response_mask"], r["generations"], r["trajectory"]
            )
            for r in records
        },
        engine.stats,
    )


def raw_run(backend, chat, turns, new_tokens: int, env_factory) -> dict:
    """One plain ``model.generate`` over the first prompts (hf only)."""
    import torch

    prompts = [chat.prompt_ids(env_factory().reset(t), TOOL_SCHEMAS) for t in turns]
    width = max(map(len, prompts))
    ids = torch.tensor([[backend.pad_id] * (width - len(p)) + p for p in prompts], device=backend.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=backend.device)
    started = time.perf_counter()
    with torch.inference_mode():
        out = backend.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=backend.pad_id,
        )
    wall = time.perf_counter() - started
    return {"wall_s": wall, "generate_s": wall, "generated_tokens": (out.shape[1] - width) * len(turns)}


def load_backend(kind: str, model, args):
    if kind == "hf":
        return make_backend("hf", model, device=args.device, dtype=args.dtype)
    if kind == "vllm":
        return make_backend("vllm", model, device=args.device, dtype=args.dtype)
    return make_backend("openai", model, base_url=args.openai_url, concurrency=args.openai_concurrency)


def paired_table(engine_runs: dict, starts: dict) -> Table:
    """Each backend's engine run against hf's on the same conversations."""
    table = Table(title="paired with hf (engine loop, same conversations)")
    for column in ("backend", "conv.", "seconds", "hf seconds", "hf / backend", "start s", "same as hf"):
        table.add_column(column, justify="left" if column == "backend" else "right")
    for (kind, count), (records, stats) in engine_runs.items():
        if kind == "hf" or ("hf", count) not in engine_runs:
            continue
        hf_records, hf_stats = engine_runs[("hf", count)]
        same = sum(records.get(key) == value for key, value in hf_records.items())
        table.add_row(
            kind,
            str(count),
            f"{stats['wall_s']:.1f}",
            f"{hf_stats['wall_s']:.1f}",
            f"{hf_stats['wall_s'] / stats['wall_s']:.2f}x",
            f"{starts.get(kind, 0):.1f}",
            f"{same}/{len(hf_records)}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", nargs="+", default=["hf"], choices=["hf", "vllm", "openai"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--conversations", nargs="+", type=int, default=[16, 64])
    parser.add_argument(
        "--batch-size", type=int, default=None, help="both loops (default: half the conversations)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=48, help="per assistant message")
    parser.add_argument("--max-messages", type=int, default=4, help="assistant messages per conversation")
    parser.add_argument("--sql-ms", type=float, default=100.0, help="SQL work per environment step")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--tool-workers", type=int, default=4, help="the engine's environment threads")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="float32", help="hf and vllm: float32 | bfloat16 | auto")
    parser.add_argument(
        "--loops",
        nargs="+",
        default=["reference", "engine"],
        choices=["reference", "engine"],
        help="which loops to run (speed-up and 'same' need both)",
    )
    parser.add_argument(
        "--openai-url", default=None, help="an OpenAI-compatible server for the openai backend"
    )
    parser.add_argument("--openai-concurrency", type=int, default=64)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    SqlHeavyEnv.calibrate(args.sql_ms)
    all_turns = load_turns("cosql", "dev", root=FIXTURE_DATA, with_hardness=False)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, stop=STOP_STRINGS)
    env_factory = make_env(args.max_messages)
    console = Console(width=150)
    sql_threads(console)
    model = resolve_model(args.model)
    table = Table(
        title=f"rollout: {args.model}, device {args.device}, {torch.get_num_threads()} threads, "
        f"<= {args.max_messages} x {args.max_new_tokens} new tokens, {args.sql_ms:.0f} ms SQL per step"
    )
    for column in (
        "backend",
        "conv.",
        "batch",
        "loop",
        "tokens",
        "seconds",
        "SQL s",
        "tokens/s",
        "busy",
        "speed-up",
        "same",
    ):
        table.add_column(column, justify="left" if column in ("backend", "loop") else "right")
    engine_runs, starts = {}, {}
    for kind in args.backends:
        if kind == "openai" and not args.openai_url:
            console.print("openai: skipped (no --openai-url)")
            continue
        try:
            loading = time.perf_counter()
            backend = load_backend(kind, model, args)
            starts[kind] = time.perf_counter() - loading
        except Exception as exc:  # a backend this machine lacks (no vLLM built): say so, go on
            console.print(f"{kind}: not available here ({str(exc).splitlines()[0]})")
            continue
        chat = ChatFormat(backend.tokenizer)
        engine_run(backend, chat, params, all_turns[:2], 1, 2, env_factory)  # warm-up
        for count in args.conversations:
            turns = all_turns[:count]
            n = -(-count // len(turns))
            turns = turns[: -(-count // n)]
            batch = args.batch_size or max(1, count // 2)
            runs = {}
            for name, loop in (
                ("reference", reference_run),
                ("engine", partial(engine_run, workers=args.tool_workers)),
            ):
                if name not in args.loops:
                    continue
                getattr(backend, "clear_prefix_cache", lambda: None)()
                SqlHeavyEnv.sql_s = 0.0
                runs[name] = loop(backend, chat, params, turns, n, batch, env_factory)
                runs[name][1]["sql_s"] = SqlHeavyEnv.sql_s
                console.print(
                    f"{kind} {count} {name}: {runs[name][1]['generated_tokens']} tokens in "
                    f"{runs[name][1]['wall_s']:.1f} s"
                )
            if "engine" in runs:
                engine_runs[(kind, count)] = runs["engine"]
            both = len(runs) == 2
            same = both and runs["reference"][0] == runs["engine"][0]
            gains = (
                {
                    "reference": "1.00x",
                    "engine": f"{runs['reference'][1]['wall_s'] / runs['engine'][1]['wall_s']:.2f}x",
                }
                if both
                else {}
            )
            rows = [(name, runs[name][1], gains.get(name, "")) for name in runs]
            if kind == "hf":
                total = runs.get("engine", runs.get("reference"))[1]["generated_tokens"]
                raw = raw_run(backend, chat, (turns * n)[:count], max(1, round(total / count)), env_factory)
                rows.append(("raw generate", raw, ""))
            for name, stats, gain in rows:
                console.print(
                    f"{kind} {count} {name}: {stats['generated_tokens'] / stats['wall_s']:,.1f} tokens/s, "
                    f"busy {stats['generate_s'] / stats['wall_s']:.0%}, SQL {stats.get('sql_s', 0):.1f} s "
                    f"{gain} {'same tokens: ' + str(same) if name == 'engine' and both else ''}"
                )
                table.add_row(
                    kind,
                    str(count),
                    str(batch),
                    name,
                    str(stats["generated_tokens"]),
                    f"{stats['wall_s']:.1f}",
                    f"{stats.get('sql_s', 0):.1f}",
                    f"{stats['generated_tokens'] / stats['wall_s']:,.0f}",
                    f"{stats['generate_s'] / stats['wall_s']:.0%}",
                    gain,
                    ("yes" if same else "NO") if name == "engine" and both else "",
                )
        backend.close()
    console.print(table)
    if len({kind for kind, _ in engine_runs}) > 1:
        console.print(paired_table(engine_runs, starts))


if __name__ == "__main__":
    main()
