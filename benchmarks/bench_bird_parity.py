"""Parity with BIRD's official evaluator: `mtsql evaluate --dataset bird` against bird-bench/mini_dev's
``evaluation_ex.py``, item by item and per difficulty, on prediction files made here.

    git --git-dir=MIRROR/.git archive HEAD evaluation | tar -x -C /tmp/bird-official
    pip install --target /tmp/bird-deps func_timeout          # the official code imports it
    PYTHONPATH=src:/tmp/bird-deps python benchmarks/bench_bird_parity.py /tmp/bird-official/evaluation

BIRD's dev data is not shipped, so a BIRD-layout dev folder is built in a scratch folder from the
Spider dev questions and databases of $MTSQL_DATA (``tools/make_bird_fixture.py``: difficulties from
the Spider hardness), ``--copies`` times over (each copy a new question with another prediction).
Each prediction is the gold mutated one way, seeded, covering every behaviour of the official
evaluator that mtsql reproduces: the gold as is; rows reordered; duplicate rows; two statements;
a second ``;``; a single trailing ``;`` and blanks; an empty string, blanks, JSON values that are
not strings (numbers, null, lists); no separator, two separators; errors (a missing table, a cut
query, a NUL character); columns swapped; integers made reals (``1`` vs ``1.0``); text upper-cased;
``LIMIT 0``; another gold of the same database; and a few slow queries past the time limit.
Predictions that write are left out: the official code opens the database read-write and mtsql's
sandbox refuses them (a documented difference).

The official code is copied from the given folder into a scratch folder and imported from there at
run time (its PostgreSQL and MySQL clients, unused for SQLite, are stubbed); it runs on a scratch
copy of the databases. Both sides use the same ``--timeout`` per item.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

os.environ.setdefault("MTSQL_DATA", "/work/shared/data")

from mtsql.base.paths import data_dir  # noqa: E402
from mtsql.core.bird_evaluation import LEVELS, evaluate_bird_file  # noqa: E402
from mtsql.core.data.bird import BirdSplit  # noqa: E402
from mtsql.core.sql.bird_exec import SEPARATOR, BirdOptions  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from make_bird_fixture import build  # noqa: E402

SLOW = (
    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 40000000) "
    "SELECT count(*) FROM r"
)
KINDS = (
    "gold",
    "reordered",
    "duplicates",
    "two_statements",
    "semicolons",
    "trailing_semicolon",
    "empty",
    "blanks",
    "non_string",
    "no_separator",
    "two_separators",
    "missing_table",
    "cut",
    "nul",
    "columns_swapped",
    "reals",
    "upper",
    "limit_0",
    "other_gold",
    "slow",
)


def columns_of(db: Path, sql: str) -> int | None:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            cursor = conn.execute(sql)
            return len(cursor.description or ())
    except (sqlite3.Error, ValueError):
        return None


def mutate(kind: str, gold: str, db_id: str, db: Path, others: list[str], rng: random.Random):
    """The prediction JSON value of one mutation of ``gold``."""

    def tagged(sql: str) -> str:
        return f"{sql}{SEPARATOR}{db_id}"

    width = columns_of(db, gold) or 1
    names = ", ".join(f"c{i}" for i in range(width))
    wrapped = f"WITH t({names}) AS ({gold})"
    values = {
        "gold": tagged(gold),
        "reordered": tagged(f"SELECT * FROM ({gold}) ORDER BY 1 DESC"),
        "duplicates": tagged(f"{gold} UNION ALL {gold}"),
        "two_statements": tagged(f"{gold}; SELECT 1"),
        "semicolons": tagged(f"{gold};  ;"),
        "trailing_semicolon": tagged(f"  {gold} ;  "),
        "empty": tagged(""),
        "blanks": tagged("   "),
        "non_string": rng.choice([5, None, ["SELECT 1"], {"sql": gold}, 1.5, True]),
        "no_separator": f"  {gold}  ",
        "two_separators": f"{tagged(gold)}{SEPARATOR}{db_id}",
        "missing_table": tagged("SELECT * FROM no_such_table_here"),
        "cut": tagged(gold[: max(1, len(gold) // 2)]),
        "nul": tagged(f"{gold}\x00"),
        "columns_swapped": tagged(
            f"{wrapped} SELECT {', '.join(f'c{i}' for i in reversed(range(width)))} FROM t"
        ),
        "reals": tagged(f"{wrapped} SELECT {', '.join(f'c{i} + 0.0' for i in range(width))} FROM t"),
        "upper": tagged(f"{wrapped} SELECT {', '.join(f'upper(c{i})' for i in range(width))} FROM t"),
        "limit_0": tagged(f"SELECT * FROM ({gold}) LIMIT 0"),
        "other_gold": tagged(rng.choice(others)),
        "slow": tagged(SLOW),
    }
    return values[kind]


def build_parity_set(scratch: Path, copies: int, seed: int, slow: int) -> tuple[BirdSplit, list[str]]:
    """The BIRD-layout dev folder (``copies`` times Spider dev) and its prediction JSON."""
    build(data_dir(), scratch)
    dev = scratch / "dev"
    records = json.loads((dev / "dev.json").read_text())
    records = [
        dict(r, question_id=copy * len(records) + r["question_id"]) for copy in range(copies) for r in records
    ]
    (dev / "dev.json").write_text(json.dumps(records))
    (dev / "dev.sql").write_text("".join(f"{r['SQL']}\t{r['db_id']}\n" for r in records))
    rng = random.Random(seed)
    by_db: dict[str, list[str]] = {}
    for record in records:
        by_db.setdefault(record["db_id"], []).append(record["SQL"])
    slow_at = set(rng.sample(range(len(records)), slow))
    kinds, predictions = [], {}
    for index, record in enumerate(records):
        kind = "slow" if index in slow_at else rng.choice(KINDS[:-1])
        db = dev / "dev_databases" / record["db_id"] / f"{record['db_id']}.sqlite"
        predictions[str(index)] = mutate(
            kind, record["SQL"], record["db_id"], db, by_db[record["db_id"]], rng
        )
        kinds.append(kind)
    (scratch / "predict_dev.json").write_text(json.dumps(predictions, indent=1))
    # the official reader takes the difficulties as JSON lines
    (scratch / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return BirdSplit(dev, "dev"), kinds


def run_official(
    code: Path, scratch: Path, found: BirdSplit, timeout_s: float, cpus: int
) -> tuple[list[int], list]:
    """Per-item results and the per-difficulty figures of the official code, imported from a scratch
    copy and run on a scratch copy of the databases."""
    copy = scratch / "official"
    shutil.copytree(code, copy, ignore=shutil.ignore_patterns("__pycache__"))
    databases = scratch / "official_databases"
    shutil.copytree(found.databases, databases)
    for name in ("psycopg2", "pymysql"):  # imported at the top of its utils, used only for other dialects
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.path.insert(0, str(copy))
    ex = importlib.import_module("evaluation_ex")
    utils = importlib.import_module("evaluation_utils")
    preds, _ = utils.package_sqls(str(scratch / "predict_dev.json"), f"{databases}/", mode="pred")
    golds, db_paths = utils.package_sqls(str(found.gold_sql), f"{databases}/", mode="gt")
    ex.exec_result = []
    ex.run_sqls_parallel(
        list(zip(preds, golds, strict=True)), db_places=db_paths, num_cpus=cpus, meta_time_out=timeout_s
    )
    results = utils.sort_results(ex.exec_result)
    figures = ex.compute_acc_by_diff(results, str(scratch / "dev.jsonl"))
    return [r["res"] for r in results], figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "official", type=Path, help="the folder of BIRD's evaluation code (evaluation_ex.py ...)"
    )
    parser.add_argument(
        "--copies", type=int, default=3, help="copies of Spider dev (each question a new item)"
    )
    parser.add_argument("--slow", type=int, default=6, help="items whose prediction runs past the time limit")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per item, on both sides")
    parser.add_argument("--workers", type=int, default=2, help="processes on each side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bird-parity-") as tmp:
        scratch = Path(tmp)
        os.environ["MTSQL_HOME"] = str(scratch / "home")  # a gold cache of its own
        found, kinds = build_parity_set(scratch, args.copies, args.seed, args.slow)
        started = time.perf_counter()
        official, figures = run_official(args.official, scratch, found, args.timeout, args.workers)
        official_s = time.perf_counter() - started
        started = time.perf_counter()
        ours = evaluate_bird_file(
            scratch / "predict_dev.json",
            found,
            options=BirdOptions(timeout_s=args.timeout, workers=args.workers, gold_cache=True),
        )
        ours_s = time.perf_counter() - started
        mine = [item["exec_match"] for item in ours.items]
        differ = [i for i, (a, b) in enumerate(zip(official, mine, strict=True)) if a != b]
        databases = len({r["db_id"] for r in ours.items})
        print(
            f"{len(mine)} items, {databases} databases; official {official_s:.0f} s, "
            f"mtsql {ours_s:.0f} s (timeout {args.timeout:g} s, {args.workers} workers each)"
        )
        print("mutations:", ", ".join(f"{k} {n}" for k, n in sorted(Counter(kinds).items())))
        timeouts = sum("timeout" in (item["error"] or "") for item in ours.items)
        print(
            f"item agreement: {len(mine) - len(differ)} / {len(mine)} "
            f"({timeouts} past the time limit in mtsql)"
        )
        for i in differ[:20]:
            print(
                f"  item {i} ({kinds[i]}): official {official[i]}, mtsql {mine[i]}: {ours.items[i]['error']}"
            )
        table = ours.summary["execution"]["by_difficulty"]
        theirs = dict(zip(LEVELS, zip(figures[:4], figures[4], strict=True), strict=True))
        same = True
        for level in LEVELS:
            count, percent = table[level]["count"], 100 * (table[level]["accuracy"] or 0)
            equal = theirs[level][1] == count and f"{theirs[level][0]:.2f}" == f"{percent:.2f}"
            same &= equal
            print(
                f"  {level:12} official {theirs[level][0]:6.2f} ({theirs[level][1]}), mtsql {percent:6.2f} "
                f"({count}) {'same' if equal else 'DIFFERENT'}"
            )
        return 0 if not differ and same else 1


if __name__ == "__main__":
    sys.exit(main())
