"""Evaluation speed: `mtsql evaluate` of a SParC / CoSQL dev prediction file (EM + test-suite EX),
against the reference: mtsql's own single-process path without the gold cache.

    MTSQL_DATA=/path/to/data python benchmarks/bench_evaluate.py [--repeat 3] [--workers 0]

The prediction files are made here from the gold file, seeded, to look like a model's: 35 % the
gold as written, 20 % the gold re-spaced with lower-case keywords, 30 % another gold query of the
same database (wrong, but it runs), 10 % the gold with its numbers turned into ``value`` or its
order flipped or ``count(DISTINCT *)``, 5 % the first half of the gold (does not parse or run).

Three timings per dataset, each with the process's caches emptied first (the minimum over
``--repeat`` runs, which are interleaved): ``reference`` (one process, gold computed in the run),
``first run`` (worker processes by database, gold cache empty: computed and saved) and ``cached``
(worker processes, gold cache on disk from the first run: what every later evaluation against the
same gold file costs). The ratios are to the reference; items must be identical in all three.
Scoring is timed in-process (Python start-up and imports, ~2 s, are the same for any path and left
out). The gold cache lives in a temporary $MTSQL_HOME.

Wall-clock ratios need idle cores: on a busy Linux machine the scheduler shares the CPU between
sessions (autogroups), so two processes of one session get no more than one. The load average is
printed before and after, and so is a second, load-independent figure for the cached path: its
critical path in CPU seconds (this process plus the busiest worker) over the reference's CPU
seconds, which is what the wall-clock ratio comes to on idle cores.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MTSQL_DATA", "/work/shared/data")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mtsql.paths import data_dir  # noqa: E402
from mtsql.sql import clear_caches, evaluation  # noqa: E402
from mtsql.sql.evaluation import EvaluateOptions, evaluate_files  # noqa: E402
from mtsql.sql.official_format import read_interactions  # noqa: E402
from mtsql.sql.tokenizer import tokenize  # noqa: E402
from mtsql.sql.workers import GroupWorkers, available_cores  # noqa: E402


class RecordedWorkers(GroupWorkers):
    """The evaluator's worker pool, kept at hand to read each process's CPU time."""

    last: GroupWorkers | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordedWorkers.last = self


evaluation.GroupWorkers = RecordedWorkers


def model_like_predictions(gold_path: Path, seed: int = 0) -> str:
    """A prediction file in the official format whose mix of right and wrong answers is a model's."""
    rng = random.Random(seed)
    gold = read_interactions(gold_path, gold=True)
    by_db: dict[str, list[str]] = {}
    for turn in (t for interaction in gold for t in interaction):
        by_db.setdefault(turn.db_id, []).append(turn.sql)
    lines = []
    for interaction in gold:
        for turn in interaction:
            draw, sql = rng.random(), turn.sql
            if draw < 0.35:
                lines.append(sql)
            elif draw < 0.55:
                respaced = re.sub(r"\s+", " ", sql)
                lines.append(re.sub(r"\b(SELECT|FROM|WHERE|GROUP BY|ORDER BY)\b", lambda m: m.group(1).lower(), respaced))
            elif draw < 0.85:
                lines.append(rng.choice(by_db[turn.db_id]))
            elif draw < 0.95:
                lines.append(re.sub(r"\b\d+\b", "value", sql).replace("DESC", "ASC") if rng.random() < 0.5
                             else sql.replace("count(*)", "count(DISTINCT *)"))
            else:
                lines.append(sql[: len(sql) // 2])
        lines.append("")
    return "\n".join(lines) + "\n"


def timed(dataset: str, pred: Path, options: EvaluateOptions) -> tuple[float, float, list[dict]]:
    """(wall s, critical-path CPU s: this process plus its busiest worker, items)."""
    clear_caches()
    RecordedWorkers.last = None
    started, cpu = time.perf_counter(), time.process_time()
    items = evaluate_files(dataset, pred, options=options).items
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    workers = RecordedWorkers.last
    return wall, cpu + (max(workers.cpu_seconds) if workers else 0.0), items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (the minimum is kept)")
    parser.add_argument("--workers", type=int, default=0, help="processes of the parallel path (0: one per core)")
    args = parser.parse_args()
    if not (data_dir() / "sparc" / "dev_gold.txt").is_file():
        print(f"no SParC dev set under {data_dir()}: set MTSQL_DATA", file=sys.stderr)
        return 2
    tokenize("SELECT 1")  # NLTK's import is a one-off cost of the process, the same for every path
    console = Console()
    load_before = os.getloadavg()
    table = Table(title=f"mtsql evaluate (EM + test-suite EX), model-like predictions ({data_dir()})")
    for column in ("dataset", "items", "reference s", "first run s", "ratio", "cached s", "ratio",
                   "cached CPU ratio", "EM", "EX"):
        table.add_column(column, justify="left" if column == "dataset" else "right")
    reference_opts = EvaluateOptions(workers=1, gold_cache=False)
    parallel_opts = EvaluateOptions(workers=args.workers, gold_cache=True)
    totals = [0.0, 0.0, 0.0]
    cpu_totals = [0.0, 0.0]
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MTSQL_HOME"] = scratch
        for dataset in ("sparc", "cosql"):
            pred = Path(scratch) / f"{dataset}_pred.txt"
            pred.write_text(model_like_predictions(data_dir() / dataset / "dev_gold.txt"))
            best, best_cpu = [float("inf")] * 3, [float("inf")] * 2
            for _ in range(args.repeat):
                for path in (Path(scratch) / "cache").glob("gold/*"):
                    path.unlink()  # each first run starts from an empty gold cache
                runs = [timed(dataset, pred, reference_opts), timed(dataset, pred, parallel_opts),
                        timed(dataset, pred, parallel_opts)]
                if not all(items == runs[0][2] for _, _, items in runs):
                    print(f"{dataset}: the parallel path's items differ from the reference's", file=sys.stderr)
                    return 1
                best = [min(b, wall) for b, (wall, _, _) in zip(best, runs, strict=True)]
                best_cpu = [min(best_cpu[0], runs[0][1]), min(best_cpu[1], runs[2][1])]
            items = runs[0][2]
            totals = [t + b for t, b in zip(totals, best, strict=True)]
            cpu_totals = [t + b for t, b in zip(cpu_totals, best_cpu, strict=True)]
            table.add_row(dataset, str(len(items)), f"{best[0]:.2f}", f"{best[1]:.2f}", f"{best[1] / best[0]:.2f}x",
                          f"{best[2]:.2f}", f"{best[2] / best[0]:.2f}x", f"{best_cpu[1] / best_cpu[0]:.2f}x",
                          f"{sum(i['exact_match'] or 0 for i in items) / len(items):.3f}",
                          f"{sum(i['exec_match'] or 0 for i in items) / len(items):.3f}")
    table.add_row("both", "", f"{totals[0]:.2f}", f"{totals[1]:.2f}", f"{totals[1] / totals[0]:.2f}x",
                  f"{totals[2]:.2f}", f"{totals[2] / totals[0]:.2f}x", f"{cpu_totals[1] / cpu_totals[0]:.2f}x", "", "")
    console.print(table)
    workers = args.workers or available_cores()
    console.print(f"{workers} worker processes on {available_cores()} cores; load average (1, 5, 15 min) "
                  f"before {_load(load_before)}, after {_load(os.getloadavg())}; Python {sys.version.split()[0]}")
    return 0


def _load(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    raise SystemExit(main())
