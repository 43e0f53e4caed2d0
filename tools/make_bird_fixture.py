"""Build a folder in BIRD's dev layout from Spider's dev questions and databases.

    python tools/make_bird_fixture.py                       # the packaged fixture's bird/dev
    python tools/make_bird_fixture.py ../shared/data OUT    # every Spider dev question, at OUT/dev

BIRD's dev data is not on GitHub, so the tests and the parity benchmark use this stand-in: each
Spider question becomes a BIRD record (``question_id``, ``db_id``, ``question``, ``evidence``,
``SQL``, ``difficulty``), written as ``dev.json``, ``dev_tables.json``, ``dev.sql`` and
``dev_databases/<db_id>/<db_id>.sqlite`` (copies). The difficulty comes from the gold's Spider
hardness (easy and medium: simple, hard: moderate, extra: challenging); the evidence names the tables
the gold reads, and every fourth question has none (BIRD has such questions too).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from mtsql.core.sql import hardness_of

FIXTURE = Path(__file__).resolve().parent.parent / "src" / "mtsql" / "fixtures" / "data"
FIXTURE_DBS = ("concert_singer", "pets_1", "poker_player")
FIXTURE_PER_DB = 2  # questions of each difficulty on each database
DIFFICULTY = {"easy": "simple", "medium": "simple", "hard": "moderate", "extra": "challenging"}


def build(
    spider_root: Path, out: Path, *, dbs: tuple[str, ...] | None = None, per_db: int | None = None
) -> int:
    """Write ``out/dev`` from ``spider_root`` (a data folder): the questions on ``dbs`` (all), at most
    ``per_db`` of each difficulty on each database (all); returns the number of questions."""
    questions = json.loads((spider_root / "spider" / "dev.json").read_text())
    tables = json.loads((spider_root / "spider" / "tables.json").read_text())
    kept, taken = [], {}
    for item in questions:
        db_id = item["db_id"]
        if (dbs is not None and db_id not in dbs) or not (
            spider_root / "database" / db_id / f"{db_id}.sqlite"
        ).is_file():
            continue
        hardness = hardness_of(item["query"], db_id, data_root=spider_root)
        if hardness is None:
            continue
        key = (db_id, DIFFICULTY[hardness])
        if per_db is not None and taken.get(key, 0) >= per_db:
            continue
        taken[key] = taken.get(key, 0) + 1
        kept.append((item, DIFFICULTY[hardness]))
    names = {t["db_id"]: t["table_names_original"] for t in tables}
    dev = out / "dev"
    if dev.exists():
        shutil.rmtree(dev)
    (dev / "dev_databases").mkdir(parents=True)
    records, gold_lines = [], []
    for index, (item, difficulty) in enumerate(kept):
        sql = " ".join(item["query"].split())
        used = [
            name for name in names[item["db_id"]] if re.search(rf"\b{re.escape(name)}\b", sql, re.IGNORECASE)
        ]
        evidence = "" if index % 4 == 3 else f"The answer reads the table(s) {', '.join(used)}."
        records.append(
            {
                "question_id": index,
                "db_id": item["db_id"],
                "question": item["question"],
                "evidence": evidence,
                "SQL": sql,
                "difficulty": difficulty,
            }
        )
        gold_lines.append(f"{sql}\t{item['db_id']}\n")
    used_dbs = sorted({item["db_id"] for item, _ in kept})
    for db_id in used_dbs:
        (dev / "dev_databases" / db_id).mkdir()
        shutil.copy2(spider_root / "database" / db_id / f"{db_id}.sqlite", dev / "dev_databases" / db_id)
    (dev / "dev.json").write_text(json.dumps(records, indent=2) + "\n")
    (dev / "dev.sql").write_text("".join(gold_lines))
    (dev / "dev_tables.json").write_text(
        json.dumps([t for t in tables if t["db_id"] in used_dbs], indent=1) + "\n"
    )
    return len(records)


def main(argv: list[str]) -> None:
    if argv:
        source, out = Path(argv[0]), Path(argv[1])
        count = build(source, out)
    else:
        count = build(FIXTURE, FIXTURE / "bird", dbs=FIXTURE_DBS, per_db=FIXTURE_PER_DB)
        out = FIXTURE / "bird"
    print(f"wrote {count} questions to {out / 'dev'}")


if __name__ == "__main__":
    main(sys.argv[1:])
