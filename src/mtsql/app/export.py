"""`mtsql export RUN`: every evaluation of a run as two tables, for pandas, R or a spreadsheet.

    mtsql export runs/tiny                  # runs/tiny/export/items.parquet and turns.parquet
    mtsql export runs/tiny --format csv     # the same as items.csv and turns.csv

``items``: one row per gold turn the official evaluator scored (a dataset's ``items.jsonl``, for each
decoding: ``greedy`` and ``vote@n`` when the evaluation voted): the predicted and gold SQL, hardness,
exact and execution match, and the error that left it unscored. ``turns``: one row per rolled-out
trajectory (every sample, as ``trajectories.jsonl`` holds them): the agent's final query, EX / EM,
protocol validity, tool calls, messages, self-correction, tokens and why it stopped. Both carry the
evaluation's label, fingerprint, model, dataset and decoding, so the evaluations of a run stack into
one table (``pd.read_parquet("turns.parquet").groupby(["evaluation", "dataset"]).ex.mean()``).

Only the newest artifact of each label whose files verify is read (as for the report); the export
folder (default ``<run>/export``) is replaced as a whole and holds nothing else.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from mtsql.app.report.runs import evaluation_of, evaluations, latest_artifacts
from mtsql.base.artifacts import Artifact
from mtsql.base.errors import UsageError
from mtsql.base.files import read_jsonl
from mtsql.core.trajectories import read_rows

log = logging.getLogger(__name__)

FORMATS = ("parquet", "csv")


def item_rows(art: Artifact) -> list[dict]:
    """The official items of every dataset and decoding of an evaluation, with where they come from."""
    result = evaluation_of(art)
    rows = []
    for dataset in result.datasets:
        for decoding, folder in _decodings(art, dataset, result.decoding):
            if (folder / "items.jsonl").exists():
                rows += [
                    _origin(art, result, dataset, decoding) | item
                    for item in read_jsonl(folder / "items.jsonl")
                ]
    return rows


def turn_rows(art: Artifact) -> list[dict]:
    """Every scored trajectory of an evaluation, one flat row each, with where it comes from."""
    result = evaluation_of(art)
    out = []
    for dataset in result.datasets:
        for decoding, folder in [
            *_decodings(art, dataset, result.decoding),
            ("samples", art.path / dataset / "samples"),
        ]:
            if not (folder / "trajectories.jsonl").exists():
                continue
            for row in read_rows(folder / "trajectories.jsonl"):
                turn = row.turn
                out.append(
                    _origin(art, result, dataset, decoding)
                    | {
                        "uid": row.uid,
                        "sample": row.sample,
                        "interaction_id": turn.interaction_id,
                        "interaction_index": turn.interaction_index,
                        "turn_index": turn.turn_index,
                        "db_id": turn.db_id,
                        "hardness": row.hardness,
                        "question": turn.question,
                        "gold_sql": turn.gold_sql,
                        "final_sql": row.final_sql,
                        "ex": row.execution,
                        "em": row.exact,
                        "protocol_valid": row.protocol_valid,
                        "tool_calls": row.tool_calls,
                        "messages": len(row.trajectory.steps),
                        "self_corrected": row.self_corrected,
                        "reward": row.reward.get("score"),
                        "generated_tokens": row.generated_tokens,
                        "prompt_tokens": sum(g.get("prompt_tokens", 0) for g in row.generations),
                        "truncated": row.truncated,
                        "stop": row.stop,
                        "finish_reason": row.trajectory.finish_reason,
                    }
                )
    return out


def export_run(run: Path, out: Path | None = None, fmt: str = "parquet") -> dict[str, Path]:
    """Write ``items`` and ``turns`` of every evaluation of ``run`` into ``out`` (default ``<run>/export``)
    as Parquet or CSV; returns the paths by table."""
    import pandas as pd

    if fmt not in FORMATS:
        raise UsageError(f"export --format {fmt}: choose {' or '.join(FORMATS)}")
    run = Path(run)
    if not run.is_dir():
        raise UsageError(f"no run folder {run.resolve()}")
    damaged: list[str] = []
    evals = evaluations(latest_artifacts(run, damaged))
    for problem in damaged:
        log.warning("left out of the export: %s", problem)
    if not evals:
        raise UsageError(f"{run.resolve()}: no complete evaluation to export (run `mtsql evaluate` first)")
    tables = {
        "items": [row for art in evals.values() for row in item_rows(art)],
        "turns": [row for art in evals.values() for row in turn_rows(art)],
    }
    out = Path(out) if out is not None else run / "export"
    if out.exists() and not out.is_dir():
        raise UsageError(f"export --out {out}: a file is in the way; give a folder")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, rows in tables.items():
        frame = pd.DataFrame(rows)
        if fmt == "parquet":
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
        else:
            frame.to_csv(tmp / f"{name}.csv", index=False)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return {name: out / f"{name}.{fmt}" for name in tables}


def _decodings(art: Artifact, dataset: str, decoding: str) -> list[tuple[str, Path]]:
    """(decoding, folder) of a dataset's official outputs: greedy first when the evaluation voted."""
    greedy = art.path / dataset / "greedy"
    return ([("greedy", greedy)] if greedy.is_dir() else []) + [(decoding, art.path / dataset)]


def _origin(art: Artifact, result, dataset: str, decoding: str) -> dict:
    return {
        "evaluation": art.label,
        "fingerprint": art.fingerprint[:12],
        "model": result.model,
        "model_name": result.model_name,
        "dataset": dataset,
        "decoding": decoding,
    }
