"""`mtsql export RUN`: every evaluation's official items and scored trajectories as Parquet or CSV tables that
pandas reads back with the values the artifacts hold."""

from __future__ import annotations

import json
import os

from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.base.files import read_jsonl
from mtsql.core.trajectories import write_rows

from ..inprocess import mtsql_in_process
from .blocks import block, metrics
from .conftest import DATA, GOLD, trajectories


def export(*args: str):
    return mtsql_in_process(["export", *args], env={**os.environ, "COLUMNS": "200"})


def with_items(root):
    """A run with one greedy evaluation whose cosql folder holds official items (2 right of 3) and
    trajectories."""
    items = [
        {
            "interaction_index": 0,
            "turn_index": i,
            "db_id": "concert_singer",
            "gold": GOLD,
            "pred": GOLD if i < 2 else "SELECT 1",
            "hardness": "easy",
            "exact_match": int(i < 2),
            "exec_match": int(i < 2),
            "error": None,
        }
        for i in range(3)
    ]

    def work(ctx):
        (ctx.out / "cosql").mkdir()
        (ctx.out / "cosql" / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
        write_rows(ctx.out / "cosql" / "trajectories.jsonl", trajectories("cosql", "long"))
        return metrics({"cosql": block(3, 2)})

    Store(root).run(
        ArtifactKey.evaluation(None, name="eval-base"), {"data": DATA, "label": "eval-base"}, {}, work
    )
    return root, items


def test_items_and_turns_come_back_from_parquet_as_the_artifacts_hold_them(tmp_path):
    import pandas as pd

    run, items = with_items(tmp_path / "tiny")
    done = export(str(run))
    assert done.returncode == 0, done.stderr
    got = pd.read_parquet(run / "export" / "items.parquet")
    assert list(got["exec_match"]) == [1, 1, 0] and list(got["pred"]) == [item["pred"] for item in items]
    assert set(got["evaluation"]) == {"eval-base"} and set(got["dataset"]) == {"cosql"}
    assert set(got["decoding"]) == {"greedy"}
    turns = pd.read_parquet(run / "export" / "turns.parquet")
    rows = read_jsonl(next(run.glob("eval-base/*/cosql/trajectories.jsonl")))
    assert list(turns["uid"]) == [r["uid"] for r in rows]
    assert list(turns["ex"]) == [r["execution"] for r in rows]
    assert list(turns["final_sql"]) == [r["final_sql"] for r in rows]
    assert list(turns["tool_calls"]) == [r["tool_calls"] for r in rows]
    assert list(turns["prompt_tokens"]) == [sum(g["prompt_tokens"] for g in r["generations"]) for r in rows]


def test_every_evaluation_and_decoding_of_a_run_stacks_into_one_csv_table(shared_run, tmp_path):
    import pandas as pd

    out = tmp_path / "tables"
    done = export(str(shared_run), "--format", "csv", "--out", str(out))
    assert done.returncode == 0, done.stderr
    turns = pd.read_csv(out / "turns.csv")
    files = [
        f
        for f in [
            *shared_run.glob("eval-*/*/*/trajectories.jsonl"),
            *shared_run.glob("eval-*/*/*/greedy/trajectories.jsonl"),
        ]
        if "latest" not in f.relative_to(shared_run).parts
    ]  # each artifact once, not again through latest
    assert len(turns) == sum(len(read_jsonl(f)) for f in files)
    assert {"eval-base", "eval-sft", "eval-rl", "eval-sft-vote4"} <= set(turns["evaluation"])
    assert set(turns.loc[turns["evaluation"] == "eval-sft-vote4", "decoding"]) == {"vote@4"}
    assert not list(shared_run.glob("*/*/export")), "nothing is written inside an artifact"


def test_a_run_without_an_evaluation_or_a_bad_format_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    done = export(str(tmp_path / "empty"))
    assert done.returncode == 2 and "no complete evaluation to export" in done.stderr
    run, _ = with_items(tmp_path / "tiny")
    done = export(str(run), "--format", "xlsx")
    assert done.returncode == 2 and "choose parquet or csv" in done.stderr
    assert not (run / "export").exists() and not (tmp_path / "empty" / "export").exists()
