"""Seconds per SFT/GRPO training example on this machine: float32 against bf16 autocast.

    python benchmarks/bench_train_step.py      # smollm2-135m, 1,700 tokens (a mean SFT example)
    python benchmarks/bench_train_step.py --models tiny-qwen3 --tokens 512 1024 --threads 1

For each model and sequence length: one forward and backward pass of the causal-LM loss over the
whole sequence (what LLaMA-Factory and the local GRPO engine do per example), with and without
gradient checkpointing, in float32 and under ``torch.autocast("cpu", bfloat16)`` (``sft.bf16``).
Prints the best of ``--repeats`` timed passes after one warm-up. bf16 is fast only where the CPU has
AVX512-BF16 or AMX; elsewhere it is emulated and slower than float32.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from rich.console import Console
from rich.table import Table

from mtsql.engines.models.registry import resolve_model


def seconds_per_example(model, tokens: int, *, bf16: bool, checkpointing: bool, repeats: int) -> float:
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for attempt in range(repeats + 1):  # the first pass warms up kernels and allocator
        started = time.perf_counter()
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with cast:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        if attempt:
            best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["smollm2-135m"])
    parser.add_argument("--tokens", nargs="+", type=int, default=[1700])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    table = Table(
        title=f"seconds per training example (fwd+bwd), {torch.get_num_threads()} threads, best of "
        f"{args.repeats}"
    )
    for column in ("model", "tokens", "float32", "float32, checkpointing", "bf16 autocast", "float32 / bf16"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for name in args.models:
        model = AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=torch.float32)
        for tokens in args.tokens:
            fp32 = seconds_per_example(model, tokens, bf16=False, checkpointing=False, repeats=args.repeats)
            fp32_ckpt = seconds_per_example(
                model, tokens, bf16=False, checkpointing=True, repeats=args.repeats
            )
            bf16 = seconds_per_example(model, tokens, bf16=True, checkpointing=False, repeats=args.repeats)
            table.add_row(
                name, str(tokens), f"{fp32:.2f}", f"{fp32_ckpt:.2f}", f"{bf16:.2f}", f"{fp32 / bf16:.2f}x"
            )
    Console().print(table)


if __name__ == "__main__":
    main()
