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
With ``--official DIR`` (a checkout of taoyds/test-suite-sql-eval, which cannot be shipped), the
official program is timed too, on the interactions it can score (it stops on the others), and
the three mtsql paths are timed again on the same ones for the ratios.
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MTSQL_DATA", "/work/shared/data")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mtsql.base.paths import data_dir  # noqa: E402
from mtsql.core.data import tables_file  # noqa: E402
from mtsql.core.evaluation_files import evaluate_files  # noqa: E402
from mtsql.core.sql import evaluation  # noqa: E402
from mtsql.core.sql.evaluation import EvaluateOptions  # noqa: E402
from mtsql.core.sql.official_format import read_interactions  # noqa: E402
from mtsql.core.sql.tokenizer import tokenize  # noqa: E402
from mtsql.core.sql.workers import GroupWorkers, available_cores  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from caches import clear_caches  # noqa: E402  (test-only: forgets the SQL layer's in-process caches)


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
                lines.append(
                    re.sub(
                        r"\b(SELECT|FROM|WHERE|GROUP BY|ORDER BY)\b", lambda m: m.group(1).lower(), respaced
                    )
                )
            elif draw < 0.85:
                lines.append(rng.choice(by_db[turn.db_id]))
            elif draw < 0.95:
                lines.append(
                    re.sub(r"\b\d+\b", "value", sql).replace("DESC", "ASC")
                    if rng.random() < 0.5
                    else sql.replace("count(*)", "count(DISTINCT *)")
                )
            else:
                lines.append(sql[: len(sql) // 2])
        lines.append("")
    return "\n".join(lines) + "\n"


def timed(
    dataset: str, pred: Path, options: EvaluateOptions, gold: Path | None = None
) -> tuple[float, float, list[dict]]:
    """(wall s, critical-path CPU s: this process plus its busiest worker, items)."""
    clear_caches()
    RecordedWorkers.last = None
    started, cpu = time.perf_counter(), time.process_time()
    items = evaluate_files(dataset, pred, gold_path=gold, options=options).items
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    workers = RecordedWorkers.last
    return wall, cpu + (max(workers.cpu_seconds) if workers else 0.0), items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (the minimum is kept)")
    parser.add_argument(
        "--workers", type=int, default=0, help="processes of the parallel path (0: one per core)"
    )
    parser.add_argument(
        "--official",
        type=Path,
        default=None,
        help="a checkout of taoyds/test-suite-sql-eval: also time the official program (not shipped)",
    )
    args = parser.parse_args()
    if not (data_dir() / "sparc" / "dev_gold.txt").is_file():
        print(f"no SParC dev set under {data_dir()}: set MTSQL_DATA", file=sys.stderr)
        return 2
    if args.official and not (args.official / "evaluation.py").is_file():
        print(
            f"--official {args.official}: no evaluation.py there (a test-suite-sql-eval checkout)",
            file=sys.stderr,
        )
        return 2
    tokenize("SELECT 1")  # NLTK's import is a one-off cost of the process, the same for every path
    console = Console()
    load_before = os.getloadavg()
    reference_opts = EvaluateOptions(workers=1, gold_cache=False)
    parallel_opts = EvaluateOptions(workers=args.workers, gold_cache=True)
    columns: dict[str, dict[str, str]] = {}
    sums: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["MTSQL_HOME"] = scratch
        for dataset in ("sparc", "cosql"):
            gold = data_dir() / dataset / "dev_gold.txt"
            pred = Path(scratch) / f"{dataset}_pred.txt"
            pred.write_text(model_like_predictions(gold))
            best = _best_of(args.repeat, dataset, pred, None, reference_opts, parallel_opts, Path(scratch))
            if best is None:
                print(f"{dataset}: the parallel path's items differ from the reference's", file=sys.stderr)
                return 1
            items = best.pop("items")
            column = {
                "items": str(len(items)),
                **_timings(best),
                "EM": f"{sum(i['exact_match'] or 0 for i in items) / len(items):.3f}",
                "EX": f"{sum(i['exec_match'] or 0 for i in items) / len(items):.3f}",
            }
            if args.official:
                # the official program stops on a turn it cannot score: time both on the rest
                kept_gold, kept_pred, turns = _scorable_only(gold, pred, items, Path(scratch))
                mine = _best_of(
                    args.repeat, dataset, kept_pred, kept_gold, reference_opts, parallel_opts, Path(scratch)
                )
                if mine is None:
                    print(
                        f"{dataset}: the parallel path's items differ from the reference's", file=sys.stderr
                    )
                    return 1
                official = min(
                    _official_seconds(args.official, dataset, kept_gold, kept_pred)
                    for _ in range(args.repeat)
                )
                column.update(
                    {
                        "official: turns": str(turns),
                        "official s": f"{official:.2f}",
                        "reference / official": f"{mine['reference'] / official:.2f}x",
                        "first run / official": f"{mine['first run'] / official:.2f}x",
                        "cached / official": f"{mine['cached'] / official:.2f}x",
                    }
                )
                sums["official"] = sums.get("official", 0.0) + official
                for key in ("reference", "first run", "cached"):
                    sums[f"mine {key}"] = sums.get(f"mine {key}", 0.0) + mine[key]
            for key, value in best.items():
                sums[key] = sums.get(key, 0.0) + value
            columns[dataset] = column
    both = _timings(sums)
    if args.official:
        both.update(
            {
                f"{key} / official": f"{sums[f'mine {key}'] / sums['official']:.2f}x"
                for key in ("reference", "first run", "cached")
            }
            | {"official s": f"{sums['official']:.2f}"}
        )
    columns["both"] = both
    table = Table(title=f"mtsql evaluate (EM + test-suite EX), model-like predictions ({data_dir()})")
    table.add_column("")
    for name in columns:
        table.add_column(name, justify="right")
    for row in columns["sparc"]:
        table.add_row(row, *(column.get(row, "") for column in columns.values()))
    console.print(table)
    workers = args.workers or available_cores()
    console.print(
        f"{workers} worker processes on {available_cores()} cores; load average (1, 5, 15 min) "
        f"before {_load(load_before)}, after {_load(os.getloadavg())}; Python {sys.version.split()[0]}"
    )
    return 0


def _best_of(
    repeat: int,
    dataset: str,
    pred: Path,
    gold: Path | None,
    reference_opts: EvaluateOptions,
    parallel_opts: EvaluateOptions,
    scratch: Path,
) -> dict | None:
    """Minimum wall (and critical-path CPU) seconds of the three paths over interleaved runs, with
    the reference's items; ``None`` if any path's items differ from the reference's."""
    best = {
        "reference": float("inf"),
        "first run": float("inf"),
        "cached": float("inf"),
        "reference CPU": float("inf"),
        "cached CPU": float("inf"),
    }
    for _ in range(repeat):
        for path in (scratch / "cache").glob("gold/*"):
            path.unlink()  # each first run starts from an empty gold cache
        runs = [
            timed(dataset, pred, options, gold) for options in (reference_opts, parallel_opts, parallel_opts)
        ]
        if not all(items == runs[0][2] for _, _, items in runs):
            return None
        for key, (wall, _cpu, _items) in zip(("reference", "first run", "cached"), runs, strict=True):
            best[key] = min(best[key], wall)
        best["reference CPU"] = min(best["reference CPU"], runs[0][1])
        best["cached CPU"] = min(best["cached CPU"], runs[2][1])
    return best | {"items": runs[0][2]}


def _timings(best: dict) -> dict[str, str]:
    return {
        "reference s": f"{best['reference']:.2f}",
        "first run s": f"{best['first run']:.2f}",
        "first run ratio": f"{best['first run'] / best['reference']:.2f}x",
        "cached s": f"{best['cached']:.2f}",
        "cached ratio": f"{best['cached'] / best['reference']:.2f}x",
        "cached CPU ratio": f"{best['cached CPU'] / best['reference CPU']:.2f}x",
    }


def _scorable_only(gold: Path, pred: Path, items: list[dict], scratch: Path) -> tuple[Path, Path, int]:
    """Gold and prediction files without the interactions holding a turn no official program can
    score (missing database, failing gold); (gold, pred, turns kept)."""
    bad = {i["interaction_index"] for i in items if i["exact_match"] is None or i["exec_match"] is None}
    kept = {"gold": [], "pred": []}
    turns = 0
    for name, path in (("gold", gold), ("pred", pred)):
        for index, interaction in enumerate(read_interactions(path, gold=name == "gold")):
            if index not in bad:
                kept[name].append("".join(_line(turn, name) + "\n" for turn in interaction) + "\n")
                turns += len(interaction) if name == "gold" else 0
    paths = scratch / f"{gold.parent.name}_kept_gold.txt", scratch / f"{gold.parent.name}_kept_pred.txt"
    for path, name in zip(paths, ("gold", "pred"), strict=True):
        path.write_text("".join(kept[name]))
    return *paths, turns


def _line(turn, name: str) -> str:
    return f"{turn.sql}\t{turn.db_id}" if name == "gold" else turn.sql


_OFFICIAL_DRIVER = """
import contextlib, io, sys, time
sys.path.insert(0, sys.argv[1])
import process_sql
try:
    process_sql.word_tokenize("a")
except LookupError:  # no NLTK punkt data here: the official tokenization, from mtsql's copy of the model
    from mtsql.core.sql.tokenizer import _word_tokenize
    process_sql.word_tokenize = _word_tokenize
import evaluation
kmaps = evaluation.build_foreign_key_map_from_json(sys.argv[4])
started = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    evaluation.evaluate(sys.argv[2], sys.argv[3], sys.argv[5], "all", kmaps, False, False, False)
print(time.perf_counter() - started)
"""


def _official_seconds(official: Path, dataset: str, gold: Path, pred: Path) -> float:
    """Seconds the official test-suite program spends scoring (EM + EX, as mtsql's defaults), timed
    inside its own process like the mtsql paths (start-up and imports left out)."""
    args = [
        sys.executable,
        "-c",
        _OFFICIAL_DRIVER,
        str(official.resolve()),
        str(gold),
        str(pred),
        str(tables_file(dataset, data_dir())),
        str(data_dir() / "database"),
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the official program failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _load(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    raise SystemExit(main())
