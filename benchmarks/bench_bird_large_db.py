"""BIRD-sized databases: `mtsql evaluate --dataset bird` on a SQLite database of 500 MB or more.

    python benchmarks/bench_bird_large_db.py [--rows 2200000] [--timeout 30] [--workers 2]

Builds, in a temporary folder, a BIRD-layout dev folder whose one database holds a table of
``--rows`` rows (about 250 bytes each: 2.2 M rows make ~570 MB) and a small one, and questions on it
of every cost: indexed look-ups, full scans (aggregates, GROUP BY, a join), a gold whose result
passes the sandbox's row cap, and one prediction that runs past the time limit (a cross join). The
evaluation runs twice, with worker processes: first with the gold cache empty (every gold runs),
then with the gold cache from the first run (no gold runs). It prints, per item, its verdict and the
seconds it took and the second at which its result came back (a task's results come back
together), and the peak memory (resident set) of this process and of the
largest worker: the time limit ends the slow item, the caps bound what a result may hold, and the
items of other tasks come in while the slow one still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from mtsql.core.bird_evaluation import check_databases
from mtsql.core.data.bird import BirdSplit, load_bird
from mtsql.core.sql import gold_cache
from mtsql.core.sql.bird_exec import BirdOptions, score_bird_rows

QUESTIONS = [  # (difficulty, gold, prediction: None for the gold itself)
    ("simple", "SELECT payload FROM big WHERE id = 123456", None),
    ("simple", "SELECT count(*) FROM big", None),
    ("simple", "SELECT count(*) FROM big WHERE grp = 7", "SELECT count(*) FROM big WHERE grp = 8"),
    (
        "simple",
        "SELECT name FROM groups WHERE grp < 5",
        "SELECT name FROM groups WHERE grp < 5 ORDER BY name DESC",
    ),
    ("moderate", "SELECT grp, count(*) FROM big GROUP BY grp", None),
    (
        "moderate",
        "SELECT max(score), min(score) FROM big",
        "SELECT max(score), min(score) FROM big WHERE score > 0",
    ),
    (
        "moderate",
        "SELECT g.name, avg(b.score) FROM big b JOIN groups g ON b.grp = g.grp GROUP BY g.name",
        None,
    ),
    ("moderate", "SELECT id FROM big WHERE payload LIKE 'ABC%' ORDER BY id LIMIT 20", None),
    (
        "challenging",
        "SELECT id, score FROM big WHERE score > 999000",
        None,
    ),  # past the row cap? no: ~2,000 rows
    ("challenging", "SELECT id FROM big", "SELECT id FROM big"),  # the gold's result passes the row cap
    (
        "challenging",
        "SELECT count(*) FROM big WHERE grp = 3",
        "SELECT count(*) FROM big a, big b WHERE a.grp = b.grp",
    ),  # a cross join: past the time limit
    (
        "challenging",
        "SELECT sum(score) FROM big WHERE grp IN (SELECT grp FROM groups WHERE name LIKE 'g1%')",
        None,
    ),
]


def build(folder: Path, rows: int) -> BirdSplit:
    dev = folder / "dev"
    db = dev / "dev_databases" / "large" / "large.sqlite"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, grp INTEGER, score INTEGER, payload TEXT)")
        conn.execute("CREATE TABLE groups (grp INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO groups VALUES (?, ?)", [(g, f"g{g}") for g in range(1000)])
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO big SELECT i, i % 1000, abs(random()) % 1000000, hex(randomblob(118)) FROM n",
            (rows,),
        )
    records = [
        {
            "question_id": i,
            "db_id": "large",
            "question": f"question {i}",
            "evidence": "",
            "SQL": gold,
            "difficulty": difficulty,
        }
        for i, (difficulty, gold, _) in enumerate(QUESTIONS)
    ]
    (dev / "dev.json").write_text(json.dumps(records))
    return BirdSplit(dev, "dev")


def peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def run(found: BirdSplit, options: BirdOptions) -> tuple[float, list[tuple[float, float, int, str | None]]]:
    turns = load_bird(found)
    check_databases(turns, found.databases)
    rows = [
        {
            "db_id": t.db_id,
            "db_path": str(found.database(t.db_id)),
            "gold": t.gold_sql,
            "pred": pred if pred is not None else t.gold_sql,
        }
        for t, (_, _, pred) in zip(turns, QUESTIONS, strict=True)
    ]
    gold_cache.clear()
    started = time.perf_counter()
    arrivals: list[tuple[float, float, int, str | None]] = [(0.0, 0.0, 0, None)] * len(rows)
    for index, (ex, error, seconds) in score_bird_rows(rows, options):
        arrivals[index] = (seconds, time.perf_counter() - started, ex, error)
    return time.perf_counter() - started, arrivals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_200_000)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per item (BIRD's is 30)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bird-large-") as tmp:
        os.environ["MTSQL_HOME"] = str(Path(tmp) / "home")  # a gold cache of its own
        started = time.perf_counter()
        found = build(Path(tmp), args.rows)
        size = found.database("large").stat().st_size
        built_s = time.perf_counter() - started
        print(f"database: {size / 1e6:.0f} MB, {args.rows:,} rows in 'big', built in {built_s:.0f} s")
        options = BirdOptions(timeout_s=args.timeout, workers=args.workers, gold_cache=True)
        import mtsql.core.sql.bird_exec as bird_exec

        print(
            f"time limit {args.timeout:g} s an item, {args.workers} workers, "
            f"{bird_exec.TASK_ITEMS} items a task, row cap {bird_exec.MAX_ROWS:,}"
        )
        for name in ("gold cache empty", "gold cache on disk"):
            wall, arrivals = run(found, options)
            print(f"\n{name}: {wall:.1f} s for {len(arrivals)} items")
            for i, ((difficulty, _, _), (seconds, at, ex, error)) in enumerate(
                zip(QUESTIONS, arrivals, strict=True)
            ):
                print(
                    f"  item {i:2d} {difficulty:11s} EX {ex}  took {seconds:5.1f} s, in at {at:5.1f} s  "
                    f"{error or ''}"[:150]
                )
        print(
            f"\npeak resident memory: this process {peak_mb(resource.RUSAGE_SELF):.0f} MB, "
            f"largest worker {peak_mb(resource.RUSAGE_CHILDREN):.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
