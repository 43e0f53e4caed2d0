"""SQL-R1's single-turn setting end to end: Spider dev on the tiny model (fixture data)."""

from pathlib import Path

import pytest

from mtsql.app.pipeline import run_pipeline

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_spider_experiment_runs_and_reports_greedy_and_vote_side_by_side(tmp_path, models_home, tiny_qwen3,
                                                                            monkeypatch):
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    run_pipeline(REPO / "pipelines" / "spider.yaml", REPO / "configs" / "experiments" / "spider-sqlr1.yaml",
                 [f"runs_dir={tmp_path}", "model.name=tiny-qwen3", "data.train_limit=2", "data.eval_limit=6",
                  "sample.max_new_tokens=16", "rl.steps_per_stage=1", "sft.max_steps=1"])
    report = (tmp_path / "spider-sqlr1" / "report" / "report.md").read_text()
    for label in ("eval-base", "eval-sft", "eval-rl"):
        assert f"| {label} | short | gold | greedy | spider | 6 |" in report
        assert f"| {label} | short | gold | vote@4 | spider | 6 |" in report
    assert "Published numbers from the SQL-R1 paper (not this run)" in report and "87.6" in report
