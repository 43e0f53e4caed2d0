"""Throughput of the rollout engine against a raw batched generate and a naive one-at-a-time loop.

    python benchmarks/bench_rollout.py                        # tiny-qwen3 and smollm2-135m, 16 conversations
    python benchmarks/bench_rollout.py --models tiny-qwen3 --conversations 8 --threads 2

For each model (HF backend, CPU, greedy), on the first CoSQL dev turns of the packaged fixture data:

  (a) raw:    one ``model.generate`` call over the conversations' first prompts, producing as many
              new tokens per conversation as the engine did in total (end-of-turn suppressed);
  (b) engine: ``RolloutEngine`` through the real environment (every message, tool call, observation);
  (c) naive:  one conversation at a time, re-rendering the whole conversation for every message
              and generating it alone (no batching, no KV reuse); ``--naive-limit`` runs it on the
              first conversations only (its tokens/s hardly depends on how many it runs).

Prints tokens/s for each (the best of ``--repeats`` interleaved runs: a shared machine is noisy),
the overhead (b)/(a) = time per token of the engine over the raw call (goal <= 1.15) and the
speed-up (b)/(c) (goal >= 3 at 16 conversations).
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from mtsql.agent.env import SqlAgentEnv
from mtsql.agent.tools import TOOL_SCHEMAS
from mtsql.backends.base import SamplingParams
from mtsql.backends.hf import HFBackend
from mtsql.chat_format import ChatFormat
from mtsql.config import EnvConfig
from mtsql.data import load_turns
from mtsql.models import resolve_model
from mtsql.paths import FIXTURE_DATA
from mtsql.rollout import STOP_STRINGS, RolloutEngine


def make_env() -> SqlAgentEnv:
    return SqlAgentEnv(EnvConfig(), data_root=FIXTURE_DATA)


def engine_run(backend, chat, params, turns) -> tuple[float, int]:
    engine = RolloutEngine(make_env, backend=backend, chat=chat, params=params, tools=TOOL_SCHEMAS,
                           batch_size=len(turns))
    started = time.perf_counter()
    records = engine.run(turns, progress=False)
    return time.perf_counter() - started, sum(r["generated_tokens"] for r in records)


def raw_run(backend, chat, turns, new_tokens: int) -> tuple[float, int]:
    import torch

    tokenizer = backend.tokenizer
    prompts = [chat.prompt_ids(make_env().reset(t), TOOL_SCHEMAS) for t in turns]
    width = max(map(len, prompts))
    ids = torch.tensor([[backend.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    started = time.perf_counter()
    with torch.inference_mode():
        out = backend.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id or backend.pad_id)
    return time.perf_counter() - started, (out.shape[1] - width) * len(turns)


def naive_run(backend, chat, params, turns) -> tuple[float, int]:
    started, tokens = time.perf_counter(), 0
    for turn in turns:
        env = make_env()
        messages, done = env.reset(turn), False
        while not done:
            generation = backend.generate([chat.prompt_ids(messages, TOOL_SCHEMAS)], params)[0]
            tokens += len(generation.token_ids)
            observation, done, _ = env.step(generation.text)
            messages = env.trajectory.messages
    return time.perf_counter() - started, tokens


def best_of(repeats, backend, naive, chat, params, turns, naive_turns, console, name) -> dict:
    """(seconds, tokens) of each mode: the fastest per token of ``repeats`` interleaved runs."""
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeats):
        backend.clear_prefix_cache()  # no reuse of an earlier repeat's conversations
        for key in ("b", "a", "c"):
            if key == "b":
                seconds, tokens = engine_run(backend, chat, params, turns)
            elif key == "a":
                seconds, tokens = raw_run(backend, chat, turns, round(best["b"][1] / len(turns)))
            else:
                seconds, tokens = naive_run(naive, chat, params, naive_turns)
            console.print(f"{name} ({key}): {tokens} tokens in {seconds:.1f} s")
            if key not in best or seconds / tokens < best[key][0] / best[key][1]:
                best[key] = (seconds, tokens)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny-qwen3", "smollm2-135m"])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48, help="per assistant message")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--naive-limit", type=int, default=None, help="conversations for (c) (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each mode; the best counts")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    turns = load_turns("cosql", "dev", root=FIXTURE_DATA, with_hardness=False)[: args.conversations]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, stop=STOP_STRINGS)
    console = Console()
    table = Table(title=f"rollout throughput: {len(turns)} conversations, device {args.device}, "
                        f"{torch.get_num_threads()} threads, max {args.max_new_tokens} new tokens per message")
    for column in ("model", "mode", "tokens", "seconds", "tokens/s", "vs raw", "vs naive"):
        table.add_column(column, justify="right" if column not in ("model", "mode") else "left")
    for name in args.models:
        path = resolve_model(name)
        backend = HFBackend(path, device=args.device)
        chat = ChatFormat(backend.tokenizer)
        naive = HFBackend(path, device=args.device, prefix_cache=False)
        engine_run(backend, chat, params, turns[:2])  # warm-up
        best = best_of(args.repeats, backend, naive, chat, params, turns, turns[: args.naive_limit], console, name)
        (a_time, a_tokens), (b_time, b_tokens), (c_time, c_tokens) = best["a"], best["b"], best["c"]
        rate = {"a": a_tokens / a_time, "b": b_tokens / b_time, "c": c_tokens / c_time}
        rows = [("(a) raw generate", a_tokens, a_time, "a"), ("(b) rollout engine", b_tokens, b_time, "b"),
                ("(c) naive loop", c_tokens, c_time, "c")]
        for label, tokens, seconds, key in rows:
            table.add_row(name, label, str(tokens), f"{seconds:.1f}", f"{rate[key]:.1f}",
                          f"{rate['a'] / rate[key]:.2f}", f"{rate[key] / rate['c']:.2f}x")
        console.print(f"{name}: overhead (b)/(a) = {rate['a'] / rate['b']:.2f} (goal <= 1.15), "
                      f"speed-up (b)/(c) = {rate['b'] / rate['c']:.2f}x (goal >= 3)")
    console.print(table)


if __name__ == "__main__":
    main()
