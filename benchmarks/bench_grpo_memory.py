"""Peak memory of one local GRPO update as the batch grows, at a fixed micro-batch: it must stay flat.

    python benchmarks/bench_grpo_memory.py                                   # tiny-qwen3, CPU, micro-batch 4
    python benchmarks/bench_grpo_memory.py --model smollm2-135m --device cuda --episodes 8 32 128
    python benchmarks/bench_grpo_memory.py --micro-batch 0 --episodes 8 32   # 0: the whole batch in one pass

Each setting runs in a fresh Python process, so no peak carries over from the one before. The process
loads the model, builds synthetic episodes (random tokens: a ``--prompt``-token prompt, then a
``--response``-token response whose middle third is a tool observation, in groups of ``--group`` with
rewards 0 or 1), creates the AdamW state with one update, then measures a second ``grpo_update``:
on CUDA ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, on CPU the peak resident
set size (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` just before the update). The figure
to compare is the peak above the memory held before the update (weights, gradients, optimizer state).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path


def rss_peak_mib() -> float:
    """Peak resident set size of this process since the last reset, MiB (Linux)."""
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024


def rss_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024


def reset_rss_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # "5": reset the peak RSS to the current RSS


def synthetic_episodes(count: int, *, prompt: int, response: int, group: int, vocab: int, seed: int):
    from mtsql.engines.local_grpo.update import Episode

    rng = random.Random(seed)
    third = response // 3
    mask = [1] * third + [0] * third + [1] * (response - 2 * third)
    episodes = []
    for index in range(count):
        prompt_ids = [rng.randrange(vocab) for _ in range(prompt)]
        episodes.append(
            Episode(
                f"q{index // group}",
                prompt_ids,
                [rng.randrange(vocab) for _ in range(response)],
                list(mask),
                reward=float(rng.random() < 0.5),
            )
        )
    return episodes


def measure(args) -> dict:
    """One setting, in this process: the peak memory of one GRPO update of ``args.episodes`` episodes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mtsql.engines.local_grpo.update import GrpoSettings, grpo_update
    from mtsql.engines.models.registry import resolve_model

    torch.manual_seed(0)
    folder = resolve_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(args.device)
    vocab = len(AutoTokenizer.from_pretrained(folder))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    micro = args.micro_batch or args.episodes
    settings = GrpoSettings(micro_batch=micro)
    warm = synthetic_episodes(
        args.group, prompt=args.prompt, response=args.response, group=args.group, vocab=vocab, seed=1
    )
    grpo_update(model, optimizer, warm, settings, pad_id=0)  # allocates gradients and the AdamW state
    episodes = synthetic_episodes(
        args.episodes, prompt=args.prompt, response=args.response, group=args.group, vocab=vocab, seed=2
    )
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() / 2**20
    else:
        reset_rss_peak()
        before = rss_mib()
    started = time.perf_counter()
    stats = grpo_update(model, optimizer, episodes, settings, pad_id=0)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else rss_peak_mib()
    return {
        "episodes": args.episodes,
        "micro_batch": micro,
        "before_mib": round(before, 1),
        "peak_mib": round(peak, 1),
        "update_mib": round(peak - before, 1),
        "seconds": round(seconds, 1),
        "grad_norm": stats["grad_norm"],
        "trained_tokens": sum(sum(e.response_mask) for e in episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default="tiny-qwen3", help="an alias (tiny-qwen3, smollm2-135m) or a model folder"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument(
        "--micro-batch", type=int, default=4, help="episodes per pass (0: all of them at once)"
    )
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens per episode")
    parser.add_argument(
        "--response", type=int, default=192, help="response tokens per episode (a third observation)"
    )
    parser.add_argument("--group", type=int, default=8, help="episodes per question (rl.n)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        args.episodes = args.worker
        print(json.dumps(measure(args)))
        return

    from rich.console import Console
    from rich.table import Table

    rows = []
    for count in args.episodes:
        worker = [
            sys.executable,
            __file__,
            "--worker",
            str(count),
            "--model",
            args.model,
            "--device",
            args.device,
            "--micro-batch",
            str(args.micro_batch),
            "--prompt",
            str(args.prompt),
            "--response",
            str(args.response),
            "--group",
            str(args.group),
        ]
        done = subprocess.run(worker, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{count} episodes failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    kind = "CUDA max_memory_allocated" if args.device.startswith("cuda") else "peak RSS"
    table = Table(
        title=f"one GRPO update, {args.model} on {args.device}: {kind}, MiB "
        f"(prompt {args.prompt} + response {args.response} tokens per episode)"
    )
    for column in ("episodes", "micro", "trained tokens", "before", "peak", "peak - before", "seconds"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["episodes"]),
            str(row["micro_batch"]),
            f"{row['trained_tokens']:,}",
            f"{row['before_mib']:,.0f}",
            f"{row['peak_mib']:,.0f}",
            f"{row['update_mib']:,.0f}",
            f"{row['seconds']:.1f}",
        )
    console = Console()
    console.print(table)
    growth = [row["update_mib"] for row in rows]
    spread = max(growth) / max(min(growth), 1e-9) - 1
    verdict = "flat" if spread <= 0.20 else "NOT flat"
    console.print(
        f"update memory, largest vs smallest batch: +{spread:.0%} ({verdict}; the goal is within 20%)"
    )


if __name__ == "__main__":
    main()
