"""Shared openings in the hf backend: the first message of N new conversations, with and without.

    python benchmarks/bench_shared_opening.py                       # SmolLM2-135M, CPU, 16 conversations
    python benchmarks/bench_shared_opening.py --model tiny-qwen3 --conversations 16 64 --new-tokens 96

Every conversation is the opening prompt of a CoSQL dev turn of the packaged fixture (system prompt,
tool list, the database's schema, the dialogue so far, the question), as the evaluation and RL
stages send it. The backend generates the first assistant message of each, greedily, in batches of
``--batch-size``, once with shared openings (the keys/values of the ids new conversations begin
with are computed once and reused) and once without (each prompt computed in full). Printed: prompt
ids computed, seconds, speed-up, and whether both produced the same tokens.
"""

from __future__ import annotations

import argparse
import os
import time

from rich.console import Console
from rich.table import Table

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data import load_turns
from mtsql.engines.backends import hf
from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.models.registry import resolve_model
from mtsql.engines.rollout import STOP_STRINGS


def opening_prompts(chat: ChatFormat, count: int) -> list[list[int]]:
    env = SqlAgentEnv(EnvConfig(thinking=False, sample_values=0), data_root=FIXTURE_DATA)
    turns = load_turns("cosql", "dev", root=FIXTURE_DATA)
    turns = [t for t in turns if t.db_id != "wta_1"][:count]
    return [chat.prompt_ids(env.reset(turn), tools=TOOL_SCHEMAS) for turn in turns]


def timed(backend: hf.HFBackend, prompts: list[list[int]], params: SamplingParams, batch: int, shared: bool):
    """(seconds, prompt ids computed, token ids) of the first message of every conversation."""
    backend.clear_prefix_cache()
    minimum, hf.MIN_SHARED = hf.MIN_SHARED, (hf.MIN_SHARED if shared else 10**9)
    try:
        started = time.perf_counter()
        ids = [
            g.token_ids
            for start in range(0, len(prompts), batch)
            for g in backend.generate(prompts[start : start + batch], params)
        ]
        seconds = time.perf_counter() - started
    finally:
        hf.MIN_SHARED = minimum
    return seconds, sum(map(len, prompts)) - backend.cache.reused_tokens, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--conversations", type=int, nargs="+", default=[16])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=8, help="ids per first message (8: mostly prefill)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    backend = hf.HFBackend(
        resolve_model(args.model), dtype="float32" if args.device == "cpu" else "auto", device=args.device
    )
    chat = ChatFormat(backend.tokenizer)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0, stop=STOP_STRINGS)
    table = Table(
        title=f"{args.model} on {args.device}: first message of new conversations "
        f"(batch {args.batch_size}, {args.new_tokens} new ids)"
    )
    for column in (
        "convs",
        "prompt ids",
        "computed (shared)",
        "s without",
        "s shared",
        "speed-up",
        "same tokens",
    ):
        table.add_column(column, justify="right")
    for count in args.conversations:
        prompts = opening_prompts(chat, count)
        without = timed(backend, prompts, params, args.batch_size, shared=False)
        shared = timed(backend, prompts, params, args.batch_size, shared=True)
        table.add_row(
            str(len(prompts)),
            str(sum(map(len, prompts))),
            str(shared[1]),
            f"{without[0]:.1f}",
            f"{shared[0]:.1f}",
            f"{without[0] / shared[0]:.2f}x",
            "yes" if without[2] == shared[2] else "NO",
        )
    Console().print(table)
    print(f"load average before the last run's end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
