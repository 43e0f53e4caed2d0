"""BIRD in the layout BIRD distributes: a split folder (``<bird>/dev`` or ``<bird>/train``) holding

    dev.json            records: question_id, db_id, question, evidence, SQL, difficulty
    dev_tables.json     Spider's tables.json format
    dev_databases/<db_id>/<db_id>.sqlite
    dev.sql             optional: the gold the official evaluator reads, ``<SQL>\\t<db_id>`` a line

(``train.json``, ``train_tables.json``, ``train_databases/`` likewise; train records carry no
``question_id`` nor ``difficulty``). Every question is an interaction of one turn, with its
``evidence`` (external knowledge the annotators wrote) on the turn, and ``question_id`` and
``difficulty`` in ``Turn.extra``. The gold is ``dev.sql``'s line when the file is there (what the
official evaluator runs), else the record's ``SQL``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.files import expect, read_json, read_text
from mtsql.base.paths import bird_dir
from mtsql.core.data.records import Turn
from mtsql.core.sql.bird_exec import BIRD_TIMEOUT_S, MAX_ROWS, prediction_sql
from mtsql.core.sql.executor import execute
from mtsql.core.sql.official_format import read_questions

DIFFICULTIES = ("simple", "moderate", "challenging")
SLOW_GOLD_S = 5.0  # a gold slower than this is listed by the data check (BIRD's limit is 30 s an item)


@dataclass(frozen=True)
class BirdSplit:
    """The files of one BIRD split folder."""

    folder: Path
    split: str

    @property
    def questions(self) -> Path:
        return self.folder / f"{self.split}.json"

    @property
    def tables(self) -> Path:
        return self.folder / f"{self.split}_tables.json"

    @property
    def databases(self) -> Path:
        return self.folder / f"{self.split}_databases"

    @property
    def gold_sql(self) -> Path:
        return self.folder / f"{self.split}.sql"

    def database(self, db_id: str) -> Path:
        return self.databases / db_id / f"{db_id}.sqlite"


def bird_split(split: str, root: Path | None = None, folder: Path | None = None) -> BirdSplit:
    """The BIRD split at ``folder`` (else ``<bird>/<split>``, see :func:`mtsql.base.paths.bird_dir`),
    which must hold its questions file: else one line saying what to put where."""
    where = Path(folder).expanduser() if folder is not None else bird_dir(root) / split
    found = BirdSplit(where, split)
    if not found.questions.is_file():
        raise UsageError(
            f"no BIRD {split} set at {where}: put BIRD's {split} folder there ({split}.json, "
            f"{split}_tables.json, {split}_databases/<db_id>/<db_id>.sqlite, {split}.sql), "
            "or set MTSQL_BIRD to the folder that holds dev/ and train/"
        )
    return found


def load_bird(found: BirdSplit) -> list[Turn]:
    """Every question of a BIRD split, in file order (the order of its gold and of prediction files)."""
    data = read_json(found.questions)
    expect(isinstance(data, list), found.questions, "expected a JSON list of questions")
    golds = read_gold(found) if found.gold_sql.is_file() else None
    if golds is not None and len(golds) != len(data):
        raise UsageError(
            f"{found.gold_sql} has {len(golds)} lines for the {len(data)} questions of "
            f"{found.questions}: one gold line per question, in the same order"
        )
    turns = []
    for index, item in enumerate(data):
        expect(
            isinstance(item, dict) and all(key in item for key in ("db_id", "question", "SQL")),
            found.questions,
            f"question {index} lacks 'db_id', 'question' or 'SQL'",
        )
        gold = golds[index][0] if golds is not None else item["SQL"].strip()
        extra = {"question_id": item.get("question_id", index), "difficulty": item.get("difficulty")}
        turns.append(
            Turn(
                dataset="bird",
                split=found.split,
                interaction_id=f"bird-{found.split}-{index:04d}",
                interaction_index=index,
                turn_index=0,
                db_id=item["db_id"],
                question=item["question"].strip(),
                gold_sql=gold,
                evidence=(item.get("evidence") or "").strip(),
                extra=extra,
            )
        )
    return turns


def read_gold(found: BirdSplit) -> list[tuple[str, str]]:
    """(SQL, db_id) of every line of the split's gold file, as the official evaluator reads it: the
    line stripped and cut at its tab."""
    pairs = []
    text = read_text(found.gold_sql)
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.strip().split("\t")
        if len(parts) != 2:
            raise UsageError(
                f"{found.gold_sql} line {number}: expected '<SQL><TAB><db_id>', found {len(parts) - 1} tab(s)"
            )
        pairs.append((parts[0], parts[1]))
    return pairs


def read_predictions(path: Path) -> list[str]:
    """The SQL of every prediction, in order: BIRD's official prediction JSON (an object whose values
    are ``"<SQL>\\t----- bird -----\\t<db_id>"``, taken in key order, each read as the official
    evaluator reads it: :func:`mtsql.core.sql.bird_exec.prediction_sql`), or mtsql's own prediction
    file (one SQL a line, as for Spider)."""
    path = Path(path)
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise UsageError(f"prediction file {path} is not a regular file: give the file itself")
    if not path.is_file():
        raise UsageError(f"prediction file not found: {path}")
    text = read_text(path)
    if text.lstrip().startswith("["):
        raise UsageError(
            f"{path} holds a JSON list: BIRD's predictions are one JSON object "
            '({"0": "<SQL>\\t----- bird -----\\t<db_id>", ...})'
        )
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path} line {exc.lineno} column {exc.colno}: malformed JSON ({exc.msg}); "
                "BIRD's predictions are one JSON object"
            ) from None
        return [prediction_sql(value) for value in data.values()]
    return [turns[0].sql for turns in read_questions(path, gold=False)]


def check_bird(
    split: str,
    root: Path | None = None,
    *,
    progress=None,
    timeout_s: float = BIRD_TIMEOUT_S,
    slow_s: float = SLOW_GOLD_S,
) -> dict:
    """`mtsql data check --dataset bird`: counts, the difficulty mix, questions with evidence, missing
    databases, and golds that fail, return nothing, or run slowly (over ``slow_s``; past ``timeout_s``,
    BIRD's limit for an item, they fail), each run as BIRD's evaluator runs it
    (:mod:`mtsql.core.sql.bird_exec`)."""
    found = bird_split(split, root)
    turns = load_bird(found)
    dbs = sorted({t.db_id for t in turns})
    missing = [db for db in dbs if not found.database(db).is_file()]
    runnable = [t for t in turns if t.db_id not in missing]
    failing, empty, slow = [], [], []
    for turn in progress(runnable) if progress else runnable:
        result = execute(
            found.database(turn.db_id),
            turn.gold_sql,
            timeout_s=timeout_s,
            max_rows=MAX_ROWS,
            lossy_text=False,
        )
        where = {"question_id": turn.extra["question_id"], "db_id": turn.db_id}
        if not result.ok:
            failing.append(where | {"error": result.error_class, "message": result.error_message})
        elif not result.rows:
            empty.append(where)
        if result.elapsed_s > slow_s:
            slow.append(where | {"seconds": round(result.elapsed_s, 1)})
    return {
        "dataset": "bird",
        "split": split,
        "root": str(found.folder),
        "unit": "questions",
        "questions": len(turns),
        "databases": len(dbs),
        "difficulty": dict(Counter(str(t.extra["difficulty"]) for t in turns)),
        "with_evidence": sum(bool(t.evidence) for t in turns),
        "missing_databases": {db: sum(t.db_id == db for t in turns) for db in missing},
        "questions_without_database": sum(t.db_id in missing for t in turns),
        "gold_fail": failing,
        "gold_empty": empty,
        "gold_slow": slow,
        "slow_s": slow_s,
    }
