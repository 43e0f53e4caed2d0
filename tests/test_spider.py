"""SQL-R1's single-turn setting end to end: Spider dev on the tiny model (fixture data)."""

import re
from pathlib import Path

import pytest

from mtsql.app.pipeline import run_pipeline

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_spider_experiment_runs_and_reports_greedy_and_vote_side_by_side(
    tmp_path, models_home, tiny_qwen3, monkeypatch
):
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    run_pipeline(
        REPO / "pipelines" / "spider.yaml",
        REPO / "configs" / "experiments" / "spider-sqlr1.yaml",
        [
            f"runs_dir={tmp_path}",
            "model.name=tiny-qwen3",
            "data.train_limit=2",
            "data.eval_limit=6",
            "sample.max_new_tokens=16",
            "rl.max_message_tokens=16",
            "rl.steps_per_stage=1",
            "sft.max_steps=1",
            "rl.local.trainable_layers=0",
        ],
    )
    report = (tmp_path / "spider-sqlr1" / "report" / "report.md").read_text()
    for label in ("eval-base", "eval-sft", "eval-rl"):
        for dataset in ("spider", "spider_dk", "spider_syn"):
            assert f"| {label} | short | gold | greedy | {dataset} | 6 |" in report
            assert f"| {label} | short | gold | vote@8 | {dataset} | 6 |" in report
        assert f"| ours: {label}, vote@8 |" in report
    assert "Published numbers from the SQL-R1 paper (not this run)" in report and "87.6" in report
    assert "**Table 2** (SQL-R1's Table 2, robustness)" in report


def test_the_spider_experiments_dry_run_plans_the_robustness_sets(tmp_path, monkeypatch, capsys):
    """Every evaluation of the experiment scores Spider dev, Spider-DK and Spider-Syn, greedy and vote@8, and
    BIRD dev, whose folder the packaged fixture holds; Spider-Realistic, not in it, is named as not scored."""
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    run_pipeline(
        REPO / "pipelines" / "spider.yaml",
        REPO / "configs" / "experiments" / "spider-sqlr1.yaml",
        [f"runs_dir={tmp_path}"],
        dry_run=True,
    )
    err = capsys.readouterr().err
    for label in ("eval-base", "eval-sft", "eval-rl"):
        plan = err.split(f"  {label} ")[1].split("\n  ")[0]
        assert re.search(
            r"scores spider dev \(12 questions\), spider_dk dev \(12 questions\), spider_syn dev "
            r"\(12 questions\), bird dev \(12 questions\): greedy and vote@8",
            plan,
        ), plan
        assert "not in the data folder, so not scored: spider_realistic" in plan
    assert not list(tmp_path.rglob("manifest.json"))
