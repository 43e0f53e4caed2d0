"""The report's section with SQL-R1's Tables 1-3: this run's rates (n, interval) beside the paper's, keyed
by dataset name (a ``bird`` evaluation fills BIRD's columns and its difficulty table)."""

from __future__ import annotations

import json
from pathlib import Path

from mtsql.app.pipeline import load_pipeline
from mtsql.app.report.build import build_report
from mtsql.app.report.runs import evaluations, run_artifacts
from mtsql.app.report.sqlr1_tables import sqlr1_section
from mtsql.app.report.stats import Rate
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.core.data.robustness import ex_by_type
from mtsql.core.sql.metrics import summarize

from .blocks import block, metrics

LEVELS = ("simple", "moderate", "challenging")


def _items(folder: Path, flags: list[int | None], dataset: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "interaction_index": i,
            "turn_index": 0,
            "exec_match": flag,
            "exact_match": flag,
            "hardness": "easy",
            "db_id": "x",
            "error": None,
        }
        for i, flag in enumerate(flags)
    ]
    if dataset == "bird":
        rows = [row | {"question_id": i, "difficulty": LEVELS[i % 3]} for i, row in enumerate(rows)]
    (folder / "items.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = summarize(rows, single_turn=True) | {"dataset": dataset}
    if dataset == "spider_dk":
        summary["ex_by_type"] = ex_by_type(rows, {i: i % 2 for i in range(len(rows))})
    (folder / "summary.json").write_text(json.dumps(summary))


def _evaluation(store: Store, label: str, results: dict[str, tuple[list, list]]) -> None:
    """An evaluation with greedy items and vote@8 items per dataset."""

    def work(ctx):
        for name, (greedy, voted) in results.items():
            _items(ctx.out / name / "greedy", greedy, name)
            _items(ctx.out / name, voted, name)
        return metrics(
            {name: block(len(voted), 0) for name, (_, voted) in results.items()},
            mode="short",
            decoding="vote@8",
        )

    store.run(ArtifactKey.evaluation(None, name=label), {"label": label}, {}, work)


def _section(root: Path) -> str:
    return "\n".join(sqlr1_section(evaluations(run_artifacts(root, []))))


def test_a_run_without_robustness_sets_or_bird_has_no_such_section(tmp_path):
    _evaluation(Store(tmp_path), "eval-base", {"spider": ([1, 0], [1, 1])})
    assert _section(tmp_path) == ""


def test_the_three_tables_hold_each_decoding_with_n_and_interval_beside_the_paper(tmp_path):
    store = Store(tmp_path)
    dk_greedy, dk_vote = [1, 0, 0, None], [1, 1, 0, None]  # the unscorable item is not counted
    _evaluation(
        store,
        "eval-base",
        {"spider": ([0, 0, 1], [1, 0, 1]), "spider_dk": (dk_greedy, dk_vote), "spider_syn": ([0, 0], [0, 1])},
    )
    text = _section(tmp_path)
    table_1, rest = text.split("**Table 2**")
    table_2, table_3 = rest.split("**Table 3**")
    assert f"| ours: eval-base, greedy | {Rate(1, 3).cell()} | – | – |" in table_1
    assert f"| ours: eval-base, vote@8 | {Rate(2, 3).cell()} | – | – |" in table_1
    assert f"| ours: eval-base, greedy | {Rate(1, 3).cell()} | {Rate(0, 2).cell()} | – |" in table_2
    assert f"| ours: eval-base, vote@8 | {Rate(2, 3).cell()} | {Rate(1, 2).cell()} | – |" in table_2
    assert "| paper: SQL-R1-7B | 87.6 [85.5, 89.5] (n=1,034) | 88.7" in table_1
    assert "| paper: SQL-R1-14B | 79.3" in table_2 and "| paper: SQL-R1-7B | 72.1" in table_3
    assert "smollm2-135m" in text and "no GPU" in text and "Ours are not the paper's setting" in text
    assert "Not evaluated in this run: Spider test, BIRD dev, Spider-Realistic" in text
    by_type = text.split("Spider-DK by question type")[
        1
    ]  # types 0 and 1 by turns; the None item is not scored
    assert f"| ours: eval-base, greedy | {Rate(1, 2).cell()} | {Rate(0, 1).cell()} |" in by_type
    assert f"| ours: eval-base, vote@8 | {Rate(1, 2).cell()} | {Rate(1, 1).cell()} |" in by_type


def test_a_bird_evaluation_fills_table_1_and_the_difficulty_table(tmp_path):
    flags = [1, 0, 1, 1, 1, 0]  # by index: simple, moderate, challenging, simple, moderate, challenging
    _evaluation(Store(tmp_path), "eval-rl", {"bird": (flags, flags), "spider": ([1], [1])})
    text = _section(tmp_path)
    table_3 = text.split("**Table 3**")[1]
    assert (
        f"| ours: eval-rl, vote@8 | {Rate(2, 2).cell()} | {Rate(1, 2).cell()} | {Rate(1, 2).cell()} | "
        f"{Rate(4, 6).cell()} |" in table_3
    )
    assert (
        f"| ours: eval-rl, greedy | {Rate(1, 1).cell()} | – | {Rate(4, 6).cell()} |"
        in text.split("**Table 2**")[0]
    )


def test_the_report_holds_the_section_where_the_pipeline_names_it(tmp_path):
    _evaluation(Store(tmp_path / "run"), "eval-base", {"spider_syn": ([1], [1])})
    spider = load_pipeline(Path(__file__).resolve().parents[2] / "pipelines" / "spider.yaml").report
    report = build_report(tmp_path / "run", sections=spider).read_text()
    assert "## SQL-R1's tables, this run beside the paper" in report
    plain = build_report(tmp_path / "run", tmp_path / "plain").read_text()
    assert "## SQL-R1's tables" not in plain and "## Evaluations" in plain
