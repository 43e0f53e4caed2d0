"""Decoding step: the hf backend's own loop against plain ``model.generate``, no environment at all.

    python benchmarks/bench_decode.py --device cuda --batches 64 256 512
    python benchmarks/bench_decode.py --batches 4 16 --prompt-len 256 --new-tokens 32    # CPU
    python benchmarks/bench_decode.py --device cuda --batches 256 --profile                # + torch.profiler

Random prompts of ``--prompt-len`` ids, every row generating exactly ``--new-tokens`` ids (end of turn
never stops a row), greedy, prefix cache off. Each path is timed twice, for one new id and for
``--new-tokens`` + 1, so the difference gives the cost of a decoding step without the prefill.
Printed per batch: generated ids/s of the whole call, prefill + first id, ms per decoding step.
On a GPU whose kernel launches are slow, a step costs about the same at any batch: the Python and
launch work of one forward, not the GPU, bounds it; ``--profile`` shows how busy the GPU was.
"""

from __future__ import annotations

import argparse
import time

import torch

from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.backends.hf import HFBackend
from mtsql.engines.models.registry import resolve_model


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--batches", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--profile", action="store_true", help="torch.profiler over one call at the largest batch"
    )
    args = parser.parse_args()

    backend = HFBackend(resolve_model(args.model), device=args.device, prefix_cache=False)
    backend.end_of_turn_ids = frozenset()  # every row makes exactly the ids asked for
    vocab = backend.model.config.vocab_size

    def prompts(batch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(batch)
        return torch.randint(100, vocab - 100, (batch, args.prompt_len), generator=generator).tolist()

    def timed(call) -> float:
        synchronize(args.device)
        started = time.perf_counter()
        call()
        synchronize(args.device)
        return time.perf_counter() - started

    def ours(batch: int, new: int) -> float:
        rows = prompts(batch)
        return timed(lambda: backend.generate(rows, SamplingParams(max_new_tokens=new, stop=())))

    def plain(batch: int, new: int) -> float:
        ids = torch.tensor(prompts(batch), device=args.device)
        with torch.inference_mode():
            return timed(
                lambda: backend.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                    pad_token_id=backend.pad_id,
                )
            )

    print(
        f"{args.model} on {args.device} ({backend.model.dtype}), prompts of {args.prompt_len} ids, "
        f"{args.new_tokens} new ids per row",
        flush=True,
    )
    ours(2, 2), plain(2, 2)  # warm-up: kernels, allocator, handles
    for batch in args.batches:
        for name, path in (("mtsql", ours), ("plain generate", plain)):
            first, full = path(batch, 1), path(batch, args.new_tokens + 1)
            step = (full - first) / args.new_tokens
            rate = batch * (args.new_tokens + 1) / full
            print(
                f"{name:15s} batch {batch:4d}: {rate:8,.0f} ids/s; prefill + 1 id "
                f"{first * 1000:6.0f} ms; decoding step {step * 1000:6.1f} ms ({batch / step:,.0f} ids/s)",
                flush=True,
            )
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if torch.device(args.device).type == "cuda" else []
        )
        with profile(activities=activities) as prof:
            wall = ours(max(args.batches), 17)
        events = prof.key_averages()
        busy = ""
        if torch.device(args.device).type == "cuda":
            device_ms = sum(e.self_device_time_total for e in events) / 1000
            busy = f", GPU kernels {device_ms:.0f} ms ({device_ms / (wall * 1000):.0%} of it)"
        print(f"profile, batch {max(args.batches)}, 17 new ids: wall {wall * 1000:.0f} ms{busy}")
        print(events.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=50))


if __name__ == "__main__":
    main()
