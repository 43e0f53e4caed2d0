"""What a BIRD evaluation writes and prints: `mtsql evaluate --dataset bird --pred` and the ``evaluate``
stage on ``bird`` alike.

    result = evaluate_bird_file(Path("predict_dev.json"), found)     # BIRD's JSON (or one SQL a line)
    result = score_bird_pairs([(turn, sql), ...], root)               # the same, from Turn records
    write_outputs(Path("out"), result)                                # items.jsonl + summary.json
    render_bird(result.summary, console)                              # the official table

Each item is one question: ``question_id``, ``difficulty`` (and its position, ``interaction_index``, with
``turn_index`` 0, as for Spider), ``db_id``, ``gold``, ``pred``,
``exec_match`` (1 or 0, :mod:`mtsql.core.sql.bird_exec`) and ``error``. The summary is BIRD's table:
EX by ``simple`` / ``moderate`` / ``challenging`` and ``total``, each with its count (the
official evaluator prints percentages with two decimals); a difficulty outside those three counts in
``total`` only, as officially. BIRD defines no exact match: ``exact`` is absent, and the table says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from mtsql.base.errors import UsageError
from mtsql.base.progress import progress_bar
from mtsql.core.data.bird import DIFFICULTIES, BirdSplit, bird_split, load_bird, read_gold, read_predictions
from mtsql.core.data.records import Turn
from mtsql.core.sql.bird_exec import BirdOptions, score_bird_rows
from mtsql.core.sql.evaluation import Evaluation

NO_EXACT_MATCH = "not defined for BIRD (its official evaluator scores execution only)"
LEVELS = (*DIFFICULTIES, "total")
DEFAULT_BIRD = BirdOptions()  # the official 30 s an item, in this process


def evaluate_bird(
    pred_path: Path,
    *,
    data_root: Path | None = None,
    gold_path: Path | None = None,
    db_dir: Path | None = None,
    workers: int = 1,
    gold_cache: bool = False,
    progress: bool = False,
) -> Evaluation:
    """`mtsql evaluate --dataset bird`: ``gold_path`` a BIRD split folder (default: ``<bird>/dev``; a folder
    named ``train`` is read as a train split: ``train.json``, ``train.sql``, ``train_databases/``)."""
    split = "train" if gold_path is not None and Path(gold_path).name == "train" else "dev"
    found = bird_split(split, data_root, gold_path)
    options = BirdOptions(workers=workers, gold_cache=gold_cache)
    return evaluate_bird_file(pred_path, found, db_dir=db_dir, options=options, progress=progress)


def evaluate_bird_file(
    pred_path: Path,
    found: BirdSplit,
    *,
    db_dir: Path | None = None,
    options: BirdOptions = DEFAULT_BIRD,
    progress: bool = False,
) -> Evaluation:
    """Score a prediction file against a BIRD split (its ``dev.sql`` when present, else its
    ``dev.json``; difficulties from ``dev.json``, by position, as officially)."""
    turns = load_bird(found)
    if not turns:
        raise UsageError(f"{found.questions} holds no question: nothing to score")
    if found.gold_sql.is_file():
        golds = read_gold(found)
        turns = [_with_gold(turn, sql, db_id) for turn, (sql, db_id) in zip(turns, golds, strict=True)]
    preds = read_predictions(pred_path)
    if len(preds) != len(turns):
        fewer = "fewer" if len(preds) < len(turns) else "more"
        raise UsageError(
            f"{pred_path} has {len(preds)} predictions for the {len(turns)} questions of "
            f"{found.questions} ({fewer}): write one prediction per question, in its order"
        )
    databases = Path(db_dir).expanduser() if db_dir is not None else found.databases
    result = _score(list(zip(turns, preds, strict=True)), databases, options, progress)
    result.summary.update(
        {
            "gold_file": str(found.gold_sql if found.gold_sql.is_file() else found.questions),
            "pred_file": str(pred_path),
        }
    )
    return result


def _with_gold(turn: Turn, sql: str, db_id: str) -> Turn:
    """The question with the gold line's SQL and database: the official evaluator runs the gold line's
    SQL on the gold line's database."""
    return replace(turn, gold_sql=sql, db_id=db_id)


def check_databases(turns: Iterable[Turn], databases: Path) -> None:
    """One line naming the first database a question needs that the folder lacks, and where to put it."""
    if not Path(databases).is_dir():
        raise UsageError(
            f"BIRD databases folder not found: {databases} (put BIRD's <split>_databases there, "
            "or pass --db-dir)"
        )
    for db_id in dict.fromkeys(turn.db_id for turn in turns):
        path = Path(databases) / db_id / f"{db_id}.sqlite"
        if not path.is_file():
            count = sum(turn.db_id == db_id for turn in turns)
            raise UsageError(f"BIRD database {db_id} ({count} question(s)) is missing: put it at {path}")


def score_bird_pairs(
    pairs: Iterable[tuple[Turn, str]],
    databases: Path,
    *,
    options: BirdOptions = DEFAULT_BIRD,
    progress: bool = False,
) -> Evaluation:
    """Score (BIRD turn, predicted SQL) pairs as if the SQL had been written to BIRD's prediction JSON."""
    return _score(list(pairs), databases, options, progress)


def _score(
    pairs: list[tuple[Turn, str]], databases: Path, options: BirdOptions, progress: bool
) -> Evaluation:
    check_databases([turn for turn, _ in pairs], databases)
    rows = [
        {
            "db_id": turn.db_id,
            "db_path": str(Path(databases) / turn.db_id / f"{turn.db_id}.sqlite"),
            "gold": turn.gold_sql,
            "pred": sql,
        }
        for turn, sql in pairs
    ]
    scores: list[tuple] = [(0, None, 0.0)] * len(rows)
    columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with progress_bar(*columns, transient=True, disable=not progress) as bar:
        task = bar.add_task("scoring", total=len(rows))
        for index, score in score_bird_rows(rows, options):
            scores[index] = score
            bar.advance(task)
    items = [
        {
            "question_id": turn.extra.get("question_id", turn.interaction_index),
            "interaction_index": turn.interaction_index,
            "turn_index": 0,
            "difficulty": turn.extra.get("difficulty"),
            "db_id": turn.db_id,
            "gold": turn.gold_sql,
            "pred": sql,
            "exec_match": ex,
            "error": error,
        }
        for (turn, sql), (ex, error, _) in zip(pairs, scores, strict=True)
    ]
    return Evaluation(items, bird_summary(items, options))


def bird_summary(items: list[dict], options: BirdOptions) -> dict:
    """BIRD's table (``by_difficulty``), and the question tally the evaluate stage reads."""

    def tally(selected: list[dict]) -> dict:
        correct = sum(item["exec_match"] for item in selected)
        return {
            "count": len(selected),
            "scored": len(selected),
            "correct": correct,
            "unscorable": 0,
            "left_out": 0,
            "accuracy": correct / len(selected) if selected else None,
        }

    table = {level: tally([i for i in items if i["difficulty"] == level]) for level in DIFFICULTIES}
    table["total"] = tally(items)
    return {
        "dataset": "bird",
        "turns": len(items),
        "single_turn": True,
        "semantics": "bird",
        "timeout_s": options.timeout_s,
        "exact": None,
        "exact_match": NO_EXACT_MATCH,
        "execution": {"question": table["total"], "by_difficulty": table, "left_out": []},
        "unscorable": [],
        "missing": [],
    }


def render_bird(summary: dict, console: Console) -> None:
    """The official layout: counts, then EX in percent with two decimals, by difficulty and total."""
    table = Table(
        title=f"bird {summary['turns']} questions (BIRD's execution accuracy, "
        f"{summary['timeout_s']:g} s per item)"
    )
    table.add_column("")
    for level in LEVELS:
        table.add_column(level, justify="right")
    cells = [summary["execution"]["by_difficulty"][level] for level in LEVELS]
    table.add_row("count", *(str(c["count"]) for c in cells))
    table.add_row("EX", *("-" if c["accuracy"] is None else f"{100 * c['accuracy']:.2f}" for c in cells))
    console.print(table)
    console.print(f"exact match: {NO_EXACT_MATCH}", markup=False, highlight=False)
