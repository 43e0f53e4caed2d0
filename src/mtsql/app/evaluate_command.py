"""The ``mtsql evaluate --pred`` command: official-format prediction files scored against the data
folder's gold (:mod:`mtsql.core.evaluation_files`), written and printed."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mtsql.core.evaluation_files import check_out_dir, evaluate_files, render, write_outputs
from mtsql.core.sql.evaluation import Evaluation


def run_evaluate(dataset: str, pred_path: Path, out_dir: Path, *, console: Console, **kwargs) -> Evaluation:
    """The ``mtsql evaluate`` command: score, write the two files, print the tables."""
    check_out_dir(out_dir)
    result = evaluate_files(dataset, pred_path, progress=True, **kwargs)
    items_path, summary_path = write_outputs(out_dir, result)
    render(result.summary, console)
    console.print(f"wrote {items_path} and {summary_path}", markup=False)
    return result

