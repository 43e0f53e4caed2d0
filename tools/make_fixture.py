"""Rebuild the packaged fixture subset (src/mtsql/fixtures/data) from a full data folder.

    python tools/make_fixture.py ../shared/data

Keeps a few dev and train databases (small ones) and every SParC / CoSQL interaction on them, the
first Spider dev, Spider-DK and Spider-Syn questions on each of them, in the same layout and formats as
the full folder, so tests and the tiny profile run anywhere.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from make_bird_fixture import FIXTURE_DBS as BIRD_DBS
from make_bird_fixture import FIXTURE_PER_DB as BIRD_PER_DB
from make_bird_fixture import build as build_bird

DEV_DBS = ["concert_singer", "pets_1", "car_1", "poker_player", "battle_death", "wta_1"]
TRAIN_DBS = [
    "network_2",
    "dorm_1",
    "activity_1",
    "game_1",
    "movie_1",
    "allergy_1",
    "ship_1",
    "student_1",
    "icfp_1",
    "manufactory_1",
    "club_1",
    "university_basketball",
    "customers_card_transactions",
    "roller_coaster",
    "restaurant_1",
    "insurance_policies",
    "product_catalog",
    "browser_web",
    "cinema",
    "voter_2",
]
SPIDER_PER_DB = 15  # Spider dev questions kept per dev database (the first ones, in file order)
SPIDER_SETS = {"spider": [], "spider_dk": ["new_concert_singer", "new_pets_1"], "spider_syn": []}  # and the
# databases of their own they keep beside DEV_DBS (Spider-DK's modified copies)
RAW_TRAIN = "extras/cosql_train_full_dialogues_from_QDA-SQL.json"
ATTRIBUTION = """# Fixture subset of SParC / CoSQL / Spider

A small subset of the data folder layout (see the project README), rebuilt by
`tools/make_fixture.py`: the SParC and CoSQL dev interactions on {dev}, the first {per_db}
Spider dev questions on each of them ({nspider} questions, `spider/dev.json` and
`spider/dev_gold.txt` in the official single-turn formats), as many Spider-DK ({ndk}, with its own
`tables.json` and its modified `new_concert_singer` and `new_pets_1`) and Spider-Syn ({nsyn}) questions
on them, and the CoSQL train dialogues on
{ntrain} small train databases, with their SQLite files (`wta_1` only as its empty schema-only
stand-in, as in the full folder).

Licence: CC BY-SA 4.0, like the data it is cut from. Spider (Yu et al., EMNLP 2018),
SParC (Yu et al., ACL 2019) and CoSQL (Yu et al., EMNLP 2019), by Yale LILY and Salesforce;
Spider-DK (Gan et al., EMNLP 2021) and Spider-Syn (Gan et al., ACL 2021), MIT.
CoSQL train dialogues as repackaged by the QDA-SQL project (full-dialogue format).

`bird/dev/` is a BIRD-format stand-in (12 of the Spider questions above on concert_singer, pets_1 and
poker_player, with BIRD's fields, difficulties from the Spider hardness and a generated evidence), rebuilt
by `tools/make_bird_fixture.py`.
"""


def main(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    keep = set(DEV_DBS) | set(TRAIN_DBS) | {db for dbs in SPIDER_SETS.values() for db in dbs}
    for dataset in ("sparc", "cosql"):
        (dst / dataset).mkdir(parents=True)
        dev = [d for d in json.loads((src / dataset / "dev.json").read_text()) if d["database_id"] in keep]
        (dst / dataset / "dev.json").write_text(json.dumps(dev, indent=1))
        gold = []
        for d in dev:
            gold += [t["query"].replace("\n", " ") + "\t" + d["database_id"] for t in d["interaction"]] + [""]
        (dst / dataset / "dev_gold.txt").write_text("\n".join(gold) + "\n")
        tables = [t for t in json.loads((src / dataset / "tables.json").read_text()) if t["db_id"] in keep]
        (dst / dataset / "tables.json").write_text(json.dumps(tables, indent=1))
        for name in ("dev_db_ids.txt", "train_db_ids.txt"):
            ids = [i for i in (src / dataset / name).read_text().split() if i in keep]
            (dst / dataset / name).write_text("\n".join(ids) + "\n")
    counts = {name: _spider_subset(src, dst, name, keep) for name in SPIDER_SETS}
    for db in sorted(keep):
        for folder in ("database", "database_schema_only"):
            path = src / folder / db / f"{db}.sqlite"
            if path.exists():
                (dst / folder / db).mkdir(parents=True)
                shutil.copy2(path, dst / folder / db / path.name)
                break
    raw = [d for d in json.loads((src / RAW_TRAIN).read_text()) if d["db_name"] in keep]
    (dst / RAW_TRAIN).parent.mkdir(parents=True)
    (dst / RAW_TRAIN).write_text(json.dumps(raw))
    build_bird(dst, dst / "bird", dbs=BIRD_DBS, per_db=BIRD_PER_DB)  # BIRD's layout, from the databases above
    (dst / "README.md").write_text(
        ATTRIBUTION.format(
            dev=", ".join(DEV_DBS),
            ntrain=len(TRAIN_DBS),
            per_db=SPIDER_PER_DB,
            nspider=counts["spider"],
            ndk=counts["spider_dk"],
            nsyn=counts["spider_syn"],
        )
    )


def _spider_subset(src: Path, dst: Path, name: str, keep: set[str]) -> int:
    """Questions of a Spider-format set on the kept dev databases and its own (at most ``SPIDER_PER_DB``
    each), the same lines of the gold file (``SQL<TAB>db_id``, line i for question i) and the kept
    tables of its ``tables.json`` (Spider-Syn has none: it reads Spider's)."""
    questions = json.loads((src / name / "dev.json").read_text())
    gold_lines = (src / name / "dev_gold.txt").read_text().splitlines()
    kept: dict[str, int] = {}
    dev, gold = [], []
    for question, line in zip(questions, gold_lines, strict=True):
        db = question["db_id"]
        if db in [*DEV_DBS, *SPIDER_SETS[name]] and kept.get(db, 0) < SPIDER_PER_DB:
            kept[db] = kept.get(db, 0) + 1
            dev.append(question)
            gold.append(line)
    (dst / name).mkdir(parents=True)
    (dst / name / "dev.json").write_text(json.dumps(dev, indent=1))
    (dst / name / "dev_gold.txt").write_text("\n".join(gold) + "\n")
    if (src / name / "tables.json").exists():
        tables = [t for t in json.loads((src / name / "tables.json").read_text()) if t["db_id"] in keep]
        (dst / name / "tables.json").write_text(json.dumps(tables, indent=1))
    return len(dev)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).resolve().parents[1] / "src" / "mtsql" / "fixtures" / "data")
