"""Evaluation speed: items per second for exact match (EM) and execution match (EX) over the full
SParC and CoSQL dev sets, gold file as predictions, with cold caches (schemas, parsed golds and gold
results forgotten) and warm ones (a second pass).

    MTSQL_DATA=/path/to/data python benchmarks/bench_evaluate.py     # default: /work/shared/data

For comparison, the official programs take about 1 s (EM) and 5 s (EX) on SParC dev.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("MTSQL_DATA", "/work/shared/data")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mtsql.paths import data_dir  # noqa: E402
from mtsql.sql import clear_caches  # noqa: E402
from mtsql.sql.evaluation import EvaluateOptions, evaluate_files  # noqa: E402
from mtsql.sql.tokenizer import tokenize  # noqa: E402


def timed(dataset: str, etype: str) -> tuple[int, float]:
    gold = data_dir() / dataset / "dev_gold.txt"
    started = time.perf_counter()
    result = evaluate_files(dataset, gold, options=EvaluateOptions(etype=etype))
    return len(result.items), time.perf_counter() - started


def main() -> int:
    if not (data_dir() / "sparc" / "dev_gold.txt").is_file():
        print(f"no SParC dev set under {data_dir()}: set MTSQL_DATA", file=sys.stderr)
        return 2
    started = time.perf_counter()
    tokenize("SELECT 1")  # NLTK's import is a one-off cost of the process, reported apart
    import_s = time.perf_counter() - started
    table = Table(title=f"mtsql evaluate, gold as predictions ({data_dir()})")
    for column in ("dataset", "metric", "items", "cold s", "cold items/s", "warm s", "warm items/s"):
        table.add_column(column, justify="right" if column not in ("dataset", "metric") else "left")
    for dataset in ("sparc", "cosql"):
        for etype, label in (("match", "EM"), ("exec", "EX")):
            clear_caches()
            items, cold = timed(dataset, etype)
            _, warm = timed(dataset, etype)
            table.add_row(dataset, label, str(items), f"{cold:.2f}", f"{items / cold:.0f}", f"{warm:.2f}",
                          f"{items / warm:.0f}")
    console = Console()
    console.print(table)
    console.print(f"NLTK import (once per process): {import_s:.2f} s; Python {sys.version.split()[0]}, "
                  f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
