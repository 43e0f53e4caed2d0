"""The ``mtsql evaluate --pred`` command: official-format prediction files scored against the data
folder's gold (:mod:`mtsql.core.evaluation_files`), written and printed."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mtsql.base.artifacts import MANIFEST, PARTIAL
from mtsql.base.errors import UsageError
from mtsql.core.evaluation_files import check_out_dir, evaluate_files, render, write_outputs
from mtsql.core.sql.evaluation import Evaluation


def run_evaluate(dataset: str, pred_path: Path, out_dir: Path, *, console: Console,
                 runs_dir: Path | None = None, **kwargs) -> Evaluation:
    """The ``mtsql evaluate`` command: score, write the two files, print the tables."""
    check_outside_runs(out_dir, runs_dir)
    check_out_dir(out_dir)
    result = evaluate_files(dataset, pred_path, progress=True, **kwargs)
    items_path, summary_path = write_outputs(out_dir, result)
    render(result.summary, console)
    console.print(f"wrote {items_path} and {summary_path}", markup=False)
    return result



def check_outside_runs(out_dir: Path, runs_dir: Path | None) -> None:
    """A UsageError when ``out_dir`` lies in a run: under ``runs_dir``, or in any artifact folder (one
    that holds a manifest, or a stage's ``.partial`` folder), through symlinks such as ``latest`` too.
    A run's folders are written by its stages only, so a score written there would pass for theirs."""
    where = Path(out_dir).expanduser().resolve()
    in_artifact = any((folder / MANIFEST).is_file() or folder.name.endswith(PARTIAL)
                      for folder in (where, *where.parents))
    inside = in_artifact or (runs_dir is not None and where.is_relative_to(Path(runs_dir).expanduser().resolve()))
    if inside:
        raise UsageError(f"--out {out_dir} is inside a run folder ({where}); a run's folders are written by its "
                         f"stages only: give --out a folder outside runs_dir ({runs_dir})")
