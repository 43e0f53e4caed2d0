"""The scored row: one dataclass, one to/from JSON, and the bytes of trajectories.jsonl unchanged."""

import json
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.base.artifacts import ArtifactKey
from mtsql.base.errors import UsageError
from mtsql.core.trajectories import ScoredRow, read_rows, write_rows

REPO = Path(__file__).resolve().parents[1]
# two rows of real trajectories.jsonl files written by mtsql (rewritten in the current trajectory shape): a
# scripted episode (sample-r1) and a model episode with token ids (eval-base of the tiny Qwen3)
REAL_ROWS = REPO / "tests" / "fixtures" / "scored_rows.jsonl"


def test_real_rows_round_trip_byte_for_byte(tmp_path):
    lines = REAL_ROWS.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 2 and json.loads(lines[1])["prompt_ids"], "a scripted and a model row"
    for line in lines:
        row = ScoredRow.from_dict(json.loads(line))
        assert json.dumps(row.to_dict(), default=str, ensure_ascii=False) + "\n" == line
    write_rows(tmp_path / "trajectories.jsonl", read_rows(REAL_ROWS))
    assert (tmp_path / "trajectories.jsonl").read_bytes() == REAL_ROWS.read_bytes()


def test_rows_written_now_have_the_keys_in_the_order_they_had(tmp_path):
    cfg = load_config(
        REPO / "configs" / "profiles" / "tiny.yaml",
        [f"runs_dir={tmp_path / 'runs'}", "data.train_limit=2", "sample.n=1"],
    )
    art = pipeline.sample(cfg, key=ArtifactKey("sample", 1), policy="gold_with_correction")
    written = (art.path / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    assert written and all(
        list(json.loads(line)) == list(json.loads(REAL_ROWS.read_text().splitlines()[0])) for line in written
    )
    write_rows(tmp_path / "again.jsonl", read_rows(art.path / "trajectories.jsonl"))
    assert (tmp_path / "again.jsonl").read_bytes() == (art.path / "trajectories.jsonl").read_bytes()


def test_a_line_that_is_not_a_scored_row_names_its_file_and_record(tmp_path):
    path = tmp_path / "kept.jsonl"
    first = REAL_ROWS.read_text().splitlines()[0]
    path.write_text(first + "\n" + json.dumps({**json.loads(first), "reward": None, "extra": 1}) + "\n")
    with pytest.raises(UsageError, match=r"kept.jsonl record 2: not a scored trajectory row: unknown extra"):
        read_rows(path)
    path.write_text(json.dumps({"uid": "x"}) + "\n")
    with pytest.raises(UsageError, match="record 1: not a scored trajectory row: no key, sample"):
        read_rows(path)
