"""The ``mtsql evaluate --pred`` command: official-format prediction files scored against the data
folder's gold (:mod:`mtsql.core.evaluation_files`), written and printed."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mtsql.base.errors import UsageError
from mtsql.base.run_folders import run_holding
from mtsql.core.bird_evaluation import evaluate_bird, render_bird
from mtsql.core.evaluation_files import DEFAULT_OPTIONS, check_out_dir, evaluate_files, render, write_outputs
from mtsql.core.sql.evaluation import EvaluateOptions, Evaluation


def bird_file(
    pred_path: Path,
    *,
    data_root=None,
    gold_path=None,
    db_dir=None,
    tables_path=None,
    options: EvaluateOptions = DEFAULT_OPTIONS,
    allow_mismatch: bool = False,
) -> Evaluation:
    """BIRD's scoring of a prediction file: ``--gold`` a BIRD split folder, ``--db-dir`` its databases;
    the SParC/Spider options (tables, etype, semantics, --allow-mismatch) do not apply."""
    if allow_mismatch or tables_path is not None:
        raise UsageError(
            "evaluate --dataset bird: --allow-mismatch and --tables do not apply (BIRD's evaluator "
            "needs one prediction per question; its tables are not read)"
        )
    return evaluate_bird(
        pred_path,
        data_root=data_root,
        gold_path=gold_path,
        db_dir=db_dir,
        workers=options.workers,
        gold_cache=options.gold_cache,
        progress=True,
    )


def run_evaluate(
    dataset: str, pred_path: Path, out_dir: Path, *, console: Console, runs_dir: Path | None = None, **kwargs
) -> Evaluation:
    """The ``mtsql evaluate`` command: score, write the two files, print the tables."""
    check_outside_runs(out_dir, runs_dir)
    check_out_dir(out_dir)
    if dataset == "bird":
        result = bird_file(pred_path, **kwargs)
    else:
        result = evaluate_files(dataset, pred_path, progress=True, **kwargs)
    items_path, summary_path = write_outputs(out_dir, result)
    (render_bird if dataset == "bird" else render)(result.summary, console)
    console.print(f"wrote {items_path} and {summary_path}", markup=False)
    return result


def check_outside_runs(out_dir: Path, runs_dir: Path | None) -> None:
    """A UsageError when ``out_dir`` lies in a run: under ``runs_dir``, or in a folder that is part of a run
    by what it holds (``run_folders.run_holding``: an artifact, a label folder, a run), wherever it lies,
    through symlinks such as ``latest`` too. A run's folders are written by its stages only, so a score
    written there would pass for theirs."""
    where = Path(out_dir).expanduser().resolve()
    inside = run_holding(where) is not None or (
        runs_dir is not None and where.is_relative_to(Path(runs_dir).expanduser().resolve())
    )
    if inside:
        raise UsageError(
            f"--out {out_dir} is inside a run folder ({where}); a run's folders are written by its "
            f"stages only: give --out a folder outside runs_dir ({runs_dir}) and outside any run"
        )
