"""What every evaluation writes and prints: the file evaluator of `mtsql evaluate --pred` and the
``evaluate`` stage alike.

    result = evaluate_files("sparc", Path("pred.txt"))             # official-format files, the data's gold
    result = score_pairs([(turn, sql), ...])                        # the same, from Turn records
    write_outputs(Path("out"), result)                              # items.jsonl + summary.json
    render(result.summary, console)                                 # rich tables

Scoring itself (items, summary, official semantics) is :mod:`mtsql.core.sql.evaluation`; this module
finds the gold, tables and databases of a dataset in the data folder, and writes and prints the
results, for the command and for the ``evaluate`` stage alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mtsql.base.files import check_folder, write_text
from mtsql.base.paths import data_dir
from mtsql.core.data import SINGLE_TURN_DATASETS, dataset_file, gold_file, load_turns, tables_file
from mtsql.core.data.records import Turn
from mtsql.core.data.robustness import TYPE_KEY, check_present, ex_by_type
from mtsql.core.sql.evaluation import EvaluateOptions, Evaluation, score_files, score_rows
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import METRICS, TURN_BUCKETS
from mtsql.core.sql.official_format import prediction_line, replace_value_placeholder
from mtsql.core.sql.scoring import DataSources

DEFAULT_OPTIONS = EvaluateOptions()  # both metrics, the test-suite algorithm, the official parser


def evaluate_files(
    dataset: str,
    pred_path: Path,
    *,
    data_root: Path | None = None,
    gold_path: Path | None = None,
    db_dir: Path | None = None,
    tables_path: Path | None = None,
    options: EvaluateOptions = DEFAULT_OPTIONS,
    allow_mismatch: bool = False,
    progress: bool = False,
) -> Evaluation:
    """Score an official-format prediction file against a gold file (defaults: those of ``data_root``,
    else of the data folder)."""
    root = data_root or data_dir()
    own_gold = gold_path is None
    if own_gold:
        check_present(dataset, dataset_file(dataset, "dev", root), root)
    gold_path = gold_path or gold_file(dataset, root)
    sources = DataSources(
        Path(db_dir or root / "database").resolve(),
        tables_path or tables_file(dataset, root),
        (root / "database_schema_only",),
    )
    result = score_files(
        gold_path,
        pred_path,
        sources,
        dataset=dataset,
        single_turn=dataset in SINGLE_TURN_DATASETS,
        options=options,
        allow_mismatch=allow_mismatch,
        progress=progress,
    )
    if own_gold and dataset in TYPE_KEY:  # the gold file's lines are the questions of dev.json, in order
        turns = load_turns(dataset, "dev", root=root, with_hardness=False)
        _add_types(result, {turn.interaction_index: turn.extra["type"] for turn in turns})
    return result


def score_pairs(
    pairs: Iterable[tuple[Turn, str]],
    *,
    data_root: Path | None = None,
    options: EvaluateOptions = DEFAULT_OPTIONS,
    progress: bool = False,
) -> Evaluation:
    """Score (turn, predicted SQL) pairs exactly as if the SQL had been written to a prediction file
    (single-turn tables when every turn is of a single-turn dataset)."""
    pairs = list(pairs)
    root = data_dir(data_root)
    sources = DataSources.from_root(root)
    names = {turn.dataset for turn, _ in pairs}
    if len(names) == 1:  # the dataset's own tables.json (Spider-DK's differs from Spider's)
        sources = replace(sources, tables_json=tables_file(names.pop(), root))
    rows = [
        {
            "interaction_index": turn.interaction_index,
            "turn_index": turn.turn_index,
            "db_id": turn.db_id,
            "gold": turn.gold_sql,
            "pred": replace_value_placeholder(prediction_line(sql)),
        }
        for turn, sql in pairs
    ]
    single_turn = bool(pairs) and all(turn.dataset in SINGLE_TURN_DATASETS for turn, _ in pairs)
    result = score_rows(rows, sources, options, progress, single_turn)
    if pairs and all("type" in turn.extra for turn, _ in pairs):
        _add_types(result, {turn.interaction_index: turn.extra["type"] for turn, _ in pairs})
    return result


def _add_types(result: Evaluation, types: dict[int, object]) -> None:
    """EX by question type (Spider-DK's ``type``) into the summary, as ``ex_by_type``."""
    result.summary["ex_by_type"] = ex_by_type(result.items, types)


def write_outputs(out_dir: Path, result: Evaluation) -> tuple[Path, Path]:
    """Write ``items.jsonl`` and ``summary.json`` into ``out_dir`` as one set: the old summary goes
    first and the new one comes last (each file atomically), so a folder with a ``summary.json``
    always holds the items it counts, even after a crash or a full disk between the two."""
    check_out_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    items_path, summary_path = out_dir / "items.jsonl", out_dir / "summary.json"
    summary_path.unlink(missing_ok=True)
    write_text(items_path, "".join(json.dumps(item) + "\n" for item in result.items))
    write_text(summary_path, json.dumps(result.summary, indent=2) + "\n")
    return items_path, summary_path


def check_out_dir(out_dir: Path) -> None:
    """A ``UsageError`` when ``out_dir`` or a folder above it is a file (checked before scoring)."""
    check_folder(out_dir, f"--out {out_dir}", "give a folder for items.jsonl and summary.json")


def render(summary: dict, console: Console) -> None:
    """Print the summary as the official programs lay it out (by hardness, then by turn; no turn
    table and no ``joint_all`` for a single-turn dataset), then what was left out and why."""
    single = summary.get("single_turn", False)
    metrics = [m for m in METRICS if m in summary]
    levels = [*HARDNESS_LEVELS, "all", *([] if single else ["joint_all"])]

    def cells_by_level(metric: str) -> list[dict]:
        tables = summary[metric]
        return [
            *(tables["by_hardness"][lv] for lv in HARDNESS_LEVELS),
            tables["question"],
            *([] if single else [tables["interaction"]]),
        ]

    shape = (
        f"{summary['turns']} questions"
        if single
        else f"{summary['turns']} turns, {summary['interactions']} interactions"
    )
    title = (
        f"{summary.get('dataset', '')} {shape} "
        f"({summary['exec_semantics']} execution, {summary['semantics']} parser)"
    )
    table = _table(title, levels, metrics, cells_by_level)
    if not single:
        table.caption = JOINT_ALL
    console.print(table)
    if not single:
        console.print(
            _table(
                "by turn",
                [f"turn {b}" for b in TURN_BUCKETS],
                metrics,
                lambda metric: [summary[metric]["by_turn"][b] for b in TURN_BUCKETS],
            )
        )
    for metric in metrics:
        for line in _left_out_lines(_LABELS[metric], summary[metric], single):
            console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line per fact, for grep
    if summary.get("ex_by_type"):
        console.print(_type_table(summary["ex_by_type"]))
    if summary["missing"]:
        console.print(f"{len(summary['missing'])} gold turn(s) had no prediction and scored 0")
    if summary.get("extra_predictions"):
        console.print(
            f"{summary['extra_predictions']} prediction line(s) had no gold turn and were not scored"
        )


def _type_table(by_type: dict) -> Table:
    """EX by question type (Spider-DK: 0 needs no domain knowledge, 1-5 the paper's kinds T1-T5)."""
    table = Table(title="execution by question type")
    table.add_column("type")
    for kind in by_type:
        table.add_column(kind, justify="right")
    table.add_row("count", *(str(cell["scored"]) for cell in by_type.values()))
    table.add_row(
        "execution", *("-" if c["accuracy"] is None else f"{c['accuracy']:.3f}" for c in by_type.values())
    )
    return table


def _table(title: str, columns: list[str], metrics: list[str], cells_of) -> Table:
    """Counts (one row, or one per metric where they differ), accuracies, and left-out turns."""
    table = Table(title=title, min_width=len(title))  # a title wider than the columns is not wrapped
    table.add_column("")
    for column in columns:
        table.add_column(column, justify="right")
    counts = {metric: [str(c["scored"]) for c in cells_of(metric)] for metric in metrics}
    if len({tuple(row) for row in counts.values()}) == 1:
        table.add_row("count", *counts[metrics[0]])
    else:
        for metric in metrics:
            table.add_row(f"count ({_LABELS[metric]})", *counts[metric])
    for metric in metrics:
        cells = cells_of(metric)
        table.add_row(
            _LABELS[metric], *("-" if c["accuracy"] is None else f"{c['accuracy']:.3f}" for c in cells)
        )
        if any(c["left_out"] for c in cells):
            table.add_row(f"{_LABELS[metric]} left out", *(str(c["left_out"]) for c in cells))
    return table


def _left_out_lines(label: str, tables: dict, single: bool) -> list[str]:
    """What a metric's tables leave out, grouped by reason (the item's error)."""
    left_out = tables["left_out"]
    if not left_out:
        return []
    if single:
        head = f"{label}: {len(left_out)} question(s) left out, as the official program cannot score them:"
    else:
        turns = sum(entry["turns"] for entry in left_out)
        head = (
            f"{label}: {len(left_out)} interaction(s) ({turns} turns) left out, each with a turn the "
            f"official program skips:"
        )
    by_reason: dict[str, list[str]] = {}
    for entry in left_out:
        turns_by_reason: dict[str, list[str]] = {}
        for turn in entry["unscorable"]:
            turns_by_reason.setdefault(turn["error"] or "unscorable", []).append(str(turn["turn_index"]))
        for reason, turns in turns_by_reason.items():
            whole = single or len(turns) == entry["turns"]
            place = str(entry["interaction_index"])
            by_reason.setdefault(reason, []).append(place if whole else f"{place} (turn {', '.join(turns)})")
    unit = "question" if single else "interaction"
    lines = [head]
    for reason, places in by_reason.items():
        shown = ", ".join(places[:10]) + (f", … ({len(places)} in all)" if len(places) > 10 else "")
        lines.append(f"  {reason}: {unit} {shown}")
    return lines


_LABELS = {"exact": "exact match", "execution": "execution"}
JOINT_ALL = "joint_all: interactions with every turn right"
