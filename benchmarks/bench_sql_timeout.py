"""SQL time budget: how long after its budget a runaway query comes back from the sandbox.

    python benchmarks/bench_sql_timeout.py [--budget 0.5] [--repeat 5]

Runs two queries that never end on their own (an unbounded recursive CTE and a 14-way cross join)
on a small SQLite file with ``execute(..., timeout_s=budget)`` and prints, per query, the verdict and
the wall time of each run over the budget (min / median / max). The deadline is checked every
``_PROGRESS_STEPS`` SQLite instructions (~20 ms on an idle core), so the overshoot should stay a
few tens of milliseconds; on a loaded machine it grows with the wait for a core. The load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from mtsql.core.sql.executor import execute

QUERIES = {
    "recursive CTE": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "14-way cross join": "SELECT count(*) FROM " + ", ".join(f"t t{i}" for i in range(14)),
}


def make_db(folder: Path) -> Path:
    path = folder / "bench.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(4)])
    conn.commit()
    conn.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=0.5, help="timeout_s of each query")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        db = make_db(Path(tmp))
        for name, sql in QUERIES.items():
            overshoot, verdicts = [], set()
            for _ in range(args.repeat):
                started = time.perf_counter()
                result = execute(db, sql, timeout_s=args.budget)
                overshoot.append(time.perf_counter() - started - args.budget)
                verdicts.add(result.error_class)
            print(
                f"{name:>18}: {'/'.join(sorted(map(str, verdicts)))}; over a {args.budget:.2f} s budget by "
                f"{min(overshoot) * 1000:.0f} / {statistics.median(overshoot) * 1000:.0f} / "
                f"{max(overshoot) * 1000:.0f} ms (min / median / max of {args.repeat})"
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
