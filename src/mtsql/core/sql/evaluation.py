"""Scoring SParC / CoSQL / Spider prediction files against gold with official semantics.

    result = score_files(gold_path, pred_path, sources, dataset="sparc", single_turn=False)
    result = score_rows(rows, sources, options, progress=False)    # rows of gold and predicted SQL

Each item is one gold turn: ``interaction_index``/``turn_index`` (0-based positions in the gold
file), ``db_id``, ``gold``, ``pred``, ``hardness``, ``exact_match`` and ``exec_match`` (1, 0, or
null when unscorable or not computed), ``error``, and ``missing`` for turns without a prediction.
The summary counts them as the official programs do, leaving out whole every interaction with an
unscorable turn (see :mod:`mtsql.core.sql.metrics`); ``--exec-semantics`` picks the execution algorithm
only: files are read, and exact match is scored, the same way under both. The ``mtsql evaluate``
command (the data folder's gold, output files, tables) is :mod:`mtsql.core.evaluation_files`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

from mtsql.base.errors import UsageError
from mtsql.base.progress import progress_bar
from mtsql.core.sql import gold_cache
from mtsql.core.sql.exec_match import remove_distinct
from mtsql.core.sql.metrics import summarize
from mtsql.core.sql.official_format import (
    FileTurn,
    read_interactions,
    read_questions,
    replace_value_placeholder,
)
from mtsql.core.sql.parser import SEMANTICS
from mtsql.core.sql.schema import check_databases, load_foreign_key_maps
from mtsql.core.sql.scoring import ETYPES, EXEC_SEMANTICS, DataSources, hardness_of, score
from mtsql.core.sql.tokenizer import tokenize
from mtsql.core.sql.workers import GroupWorkers, available_cores

ETYPE_METRICS = {"all": ("exact", "execution"), "match": ("exact",), "exec": ("execution",)}
MIN_ROWS_PER_PROCESS = 100  # fewer rows than this per process: scoring in this process is faster


@dataclass(frozen=True)
class EvaluateOptions:
    """How to score: which metrics, which execution algorithm, which parser semantics, time budget;
    and how fast: ``workers`` processes (0: one per core; databases are spread over them) and
    ``gold_cache`` (keep gold parses and results on disk between runs, see :mod:`mtsql.core.sql.gold_cache`).
    Neither changes a verdict."""

    etype: str = "all"
    exec_semantics: str = "testsuite"
    semantics: str = "official"
    timeout_s: float = 5.0
    workers: int = 1
    gold_cache: bool = False

    def __post_init__(self):
        for name, value, allowed in (
            ("etype", self.etype, ETYPES),
            ("exec-semantics", self.exec_semantics, EXEC_SEMANTICS),
            ("semantics", self.semantics, SEMANTICS),
        ):
            if value not in allowed:
                raise UsageError(f"--{name} {value!r}: choose one of {', '.join(allowed)}")
        if self.workers < 0:
            raise UsageError(f"--workers {self.workers}: give a number of processes, or 0 for one per core")

    @classmethod
    def from_config(cls, sql, **overrides) -> EvaluateOptions:
        """The options a config's ``sql`` section sets (``exec_semantics``, ``semantics``, ``timeout_s``),
        with ``overrides`` that are not None."""
        values = {
            "exec_semantics": sql.exec_semantics,
            "semantics": sql.semantics,
            "timeout_s": sql.timeout_s,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class Evaluation:
    """Scored items (one per gold turn) and their summary."""

    items: list[dict]
    summary: dict = field(default_factory=dict)


def score_files(
    gold_path: Path,
    pred_path: Path,
    sources: DataSources,
    *,
    dataset: str,
    single_turn: bool,
    options: EvaluateOptions = EvaluateOptions(),
    allow_mismatch: bool = False,
    progress: bool = False,
) -> Evaluation:
    """Score an official-format prediction file against a gold file of ``dataset`` (one question a
    line when ``single_turn``, else interactions that end at a blank line)."""
    _check_inputs(gold_path, pred_path, sources)
    read = read_questions if single_turn else read_interactions
    gold, pred = read(gold_path, gold=True), read(pred_path, gold=False)
    if not gold:
        unit = "question" if single_turn else "interaction"
        raise UsageError(f"gold file {gold_path} holds no {unit}: nothing to score")
    rows, extra = _align(gold, pred, gold_path, pred_path, allow_mismatch, single_turn)
    for row in rows:
        row["pred"] = replace_value_placeholder(row["pred"])
    result = score_rows(rows, sources, options, progress, single_turn)
    result.summary.update(
        {
            "dataset": dataset,
            "gold_file": str(gold_path),
            "pred_file": str(pred_path),
            "extra_predictions": extra,
        }
    )
    return result


def _check_inputs(gold_path: Path, pred_path: Path, sources: DataSources) -> None:
    for what, path in (
        ("gold file", gold_path),
        ("prediction file", pred_path),
        ("tables file", sources.tables_json),
    ):
        if Path(path).is_dir():
            raise UsageError(f"{what} {path} is a folder: give the file itself")
        if Path(path).exists() and not Path(path).is_file():
            raise UsageError(f"{what} {path} is not a regular file (a device or a pipe?): give a file")
        if not Path(path).is_file():
            raise UsageError(f"{what} not found: {path}")
    if not sources.db_dir.is_dir():
        raise UsageError(f"database folder not found: {sources.db_dir} (pass --db-dir)")


def _align(
    gold: list[list[FileTurn]],
    pred: list[list[FileTurn]],
    gold_path: Path,
    pred_path: Path,
    allow_mismatch: bool,
    single_turn: bool,
) -> tuple[list[dict], int]:
    """One row per gold turn with its prediction; (rows, number of predictions without a gold turn)."""
    divergence = next(
        (
            i
            for i in range(max(len(gold), len(pred)))
            if i >= len(gold) or i >= len(pred) or len(gold[i]) != len(pred[i])
        ),
        None,
    )
    if divergence is not None and not allow_mismatch:
        describe = _count_mismatch_message if single_turn else _mismatch_message
        raise UsageError(describe(gold, pred, gold_path, pred_path, divergence))
    rows = []
    for i, interaction in enumerate(gold):
        predicted = pred[i] if i < len(pred) else []
        for j, turn in enumerate(interaction):
            missing = j >= len(predicted)
            rows.append(
                {
                    "interaction_index": i,
                    "turn_index": j,
                    "db_id": turn.db_id,
                    "gold": turn.sql,
                    "pred": "" if missing else predicted[j].sql,
                    "missing": missing,
                }
            )
    extra = sum(max(0, len(p) - (len(gold[i]) if i < len(gold) else 0)) for i, p in enumerate(pred))
    return rows, extra


def _mismatch_message(gold, pred, gold_path, pred_path, index: int) -> str:
    def describe(interactions, path):
        if index >= len(interactions):
            return f"{path} has only {len(interactions)} interactions"
        turns = interactions[index]
        if not turns:
            return f"{path} has an interaction of no turn at line {turns.line} (two blank lines in a row)"
        return f"{path} has {len(turns)} turn(s) from line {turns.line}"

    return (
        f"predictions do not line up with the gold at interaction {index} (0-based): "
        f"{describe(gold, gold_path)}, {describe(pred, pred_path)} "
        f"({len(gold)} gold vs {len(pred)} predicted interactions in all). Write one line per gold turn "
        f"and a blank line after each interaction, or pass --allow-mismatch to score missing turns as 0"
    )


def _count_mismatch_message(gold, pred, gold_path, pred_path, index: int) -> str:
    if index < len(gold):
        where = f"line {gold[index][0].line} of {gold_path} has no prediction"
    else:
        where = f"line {pred[index][0].line} of {pred_path} has no gold question"
    return (
        f"{pred_path} has {len(pred)} predictions for the {len(gold)} questions of {gold_path}: {where}. "
        f"Write one prediction per line, in the order of the gold file, or pass --allow-mismatch "
        f"to score questions without a prediction as 0"
    )


def score_rows(
    rows: list[dict],
    sources: DataSources,
    options: EvaluateOptions,
    progress: bool,
    single_turn: bool = False,
) -> Evaluation:
    """Score rows of ``interaction_index``, ``turn_index``, ``db_id``, ``gold``, ``pred`` (and ``missing``)
    and summarise them as the official programs do (single-turn tables when ``single_turn``)."""
    metrics = ETYPE_METRICS[options.etype]
    groups: dict[str, list[tuple[int, dict]]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(row["db_id"], []).append((index, row))
    check_databases(
        sources.database(db_id) for db_id in groups
    )  # not scored against nothing (a gold cache hit)
    workers = min(options.workers or available_cores(), len(groups), len(rows) // MIN_ROWS_PER_PROCESS)
    scores: list[dict] = [{}] * len(rows)
    columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with (
        _scored(groups, sources, options, workers) as results,
        progress_bar(*columns, transient=True, disable=not progress) as bar,
    ):
        task = bar.add_task("scoring", total=len(rows))
        for index, result in results:
            scores[index] = result
            bar.advance(task)
    items = [_item(row | score_) for row, score_ in zip(rows, scores, strict=True)]
    summary = summarize(items, metrics, single_turn=single_turn)
    summary.update(
        {
            "etype": options.etype,
            "exec_semantics": options.exec_semantics,
            "semantics": options.semantics,
            "timeout_s": options.timeout_s,
        }
    )
    return Evaluation(items, summary)


@contextmanager
def _scored(groups: dict, sources: DataSources, options: EvaluateOptions, workers: int) -> Iterator:
    """(row index, scores) of every row, from this process or from ``workers`` processes."""
    if workers <= 1:
        yield _score_groups(groups, sources, options)
        return
    tokenize("SELECT 1")  # load NLTK, sqlparse and tables.json here, once, rather than in every process
    remove_distinct("SELECT DISTINCT 1")
    load_foreign_key_maps(sources.tables_json)
    if options.gold_cache:
        gold_cache.code_digest()
    with GroupWorkers(_score_groups, groups, (sources, options), workers=workers) as pool:
        yield pool.results()


def _score_groups(groups: dict, sources: DataSources, options: EvaluateOptions) -> Iterator[tuple[int, dict]]:
    """Score the rows of each database in turn (its gold entries saved and loaded with ``gold_cache``)."""
    for db_id, members in groups.items():
        folders = (sources.db_dir, *sources.schema_dirs)
        with gold_cache.persisted(db_id, folders) if options.gold_cache else nullcontext():
            for index, row in members:
                yield index, _score_row(row, sources, options)


def _score_row(row: dict, sources: DataSources, options: EvaluateOptions) -> dict:
    if row.get("missing"):
        metrics = ETYPE_METRICS[options.etype]
        return {
            "hardness": hardness_of(row["gold"], row["db_id"], sources=sources),
            "exact": 0 if "exact" in metrics else None,
            "execution": 0 if "execution" in metrics else None,
            "error": "missing prediction",
        }
    result = score(
        row["gold"],
        row["pred"],
        row["db_id"],
        sources,
        etype=options.etype,
        exec_semantics=options.exec_semantics,
        semantics=options.semantics,
        timeout_s=options.timeout_s,
    )
    return {
        "hardness": result.hardness,
        "exact": result.exact,
        "execution": result.execution,
        "error": result.error,
    }


def _item(row: dict) -> dict:
    item = {
        "interaction_index": row["interaction_index"],
        "turn_index": row["turn_index"],
        "db_id": row["db_id"],
        "gold": row["gold"],
        "pred": row["pred"],
        "hardness": row["hardness"],
        "exact_match": row["exact"],
        "exec_match": row["execution"],
        "error": row["error"],
    }
    if row.get("missing"):
        item["missing"] = True
    return item
