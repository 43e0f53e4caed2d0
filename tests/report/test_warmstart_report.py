"""The report on a warm-start ablation: the designs side by side, failed executions recovered from per dev
set, the model's own recoveries among kept trajectories, and the RL reward's change with its interval."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.app.pipeline import load_pipeline
from mtsql.app.report import build_report
from mtsql.app.report.rl_change import change_sentence, reward_change
from mtsql.app.report.runs import evaluations, latest_artifacts
from mtsql.app.report.stats import Mean
from mtsql.app.report.warmstart import WarmstartSettings, short_baseline
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.core.agent.env import Step
from mtsql.core.measures.revisions import revisions
from mtsql.core.measures.verdicts import verdict_calibration
from mtsql.core.trajectories import write_rows

from .blocks import block, metrics
from .conftest import DATA, GOLD, exec_step, row, summary, turn

BROKEN = "SELECT nam FROM singer"
PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def failed_step(i: int, verdict: str | None) -> Step:
    return replace(
        exec_step(i, BROKEN, verdict), result_kind="error", error_class="no_such_column", row_count=None
    )


def answer(i: int, sql: str) -> Step:
    return Step(index=i, text=f"<answer_sql>{sql}</answer_sql>", action="answer", sql=sql)


def episodes(dataset: str, recovered: int, stuck: int, direct: int) -> list:
    """``recovered`` turns that failed, ran the gold and answered it; ``stuck`` that failed and answered the
    failed query; ``direct`` that ran the gold and answered it."""
    out = []
    for i in range(recovered):
        out.append(
            row(
                turn(dataset, i, 0),
                [failed_step(0, "no_pass"), exec_step(1, GOLD, "pass"), answer(2, GOLD)],
                GOLD,
                1,
            )
        )
    for i in range(recovered, recovered + stuck):
        out.append(row(turn(dataset, i, 0), [failed_step(0, "pass"), answer(1, BROKEN)], BROKEN, 0))
    for i in range(recovered + stuck, recovered + stuck + direct):
        out.append(row(turn(dataset, i, 0), [exec_step(0, GOLD, "pass"), answer(1, GOLD)], GOLD, 1))
    return out


def judge(_row, sql):
    return int(sql == GOLD)


def evaluation(
    store: Store, label: str, mode: str, per_dataset: dict[str, tuple[int, int, int]], model=None
) -> None:
    def work(ctx):
        datasets = {}
        for name, counts in per_dataset.items():
            rows = episodes(name, *counts)
            (ctx.out / name).mkdir()
            (ctx.out / name / "summary.json").write_text(
                json.dumps(summary(name, len(rows), counts[0] + counts[2]))
            )
            write_rows(ctx.out / name / "trajectories.jsonl", rows)
            datasets[name] = block(
                len(rows),
                counts[0] + counts[2],
                verdict_calibration=verdict_calibration(rows, judge),
                revisions=revisions(rows, judge),
            )
        return metrics(datasets, mode=mode)

    store.run(
        ArtifactKey.evaluation(model.key if model else None, name=label),
        {"data": DATA, "env": {"max_messages": 4}, "label": label},
        {"model": model} if model else {},
        work,
    )


def trained(store: Store, variant: str, corrected: float):
    """The chain sample -> reject -> sft of one variant's round 1 (``corrected``: the sample's
    self-correction rate)."""
    sampled = store.run(
        ArtifactKey("sample", 1, variant),
        {"v": variant},
        {},
        lambda ctx: {"policy": "x", "count": 10, "self_correction_rate": corrected},
    )[0]
    kept = store.run(
        ArtifactKey("reject", 1, variant), {"v": variant}, {"sample": sampled}, lambda ctx: {"kept": 10}
    )[0]
    return store.run(
        ArtifactKey("sft", 1, variant), {"v": variant}, {"reject": kept}, lambda ctx: {"steps": 3}
    )[0]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs") / "warmstart-ablation"
    store = Store(root)
    evaluation(store, "eval-base", "long", {"cosql": (0, 0, 8), "sparc": (0, 0, 4)})
    for variant, counts, corrected in (
        ("gold", (0, 6, 2), 0.0),
        ("correction", (1, 5, 2), 1.0),
        ("grounded3", (3, 3, 2), 0.6),
    ):
        evaluation(
            store,
            f"eval-sft-{variant}",
            "long",
            {"cosql": counts, "sparc": (1, 1, 2)},
            model=trained(store, variant, corrected),
        )
    evaluation(
        store,
        "eval-sft-short",
        "short",
        {"cosql": (0, 0, 8), "sparc": (0, 0, 4)},
        model=trained(store, "short", 0.0),
    )
    kept = [*episodes("cosql", 2, 0, 1)]
    kept[1] = replace(kept[1], response_ids=None)  # a scripted correction: not the model's recovery

    def reject(ctx):
        write_rows(ctx.out / "kept.jsonl", kept)
        return {"items": 3, "solved": 3, "sampled": 3, "kept": 3}

    store.run(
        ArtifactKey("sample", 2), {"r": 2}, {}, lambda ctx: {"policy": "model", "model": "sft-r1", "count": 3}
    )
    store.run(ArtifactKey("reject", 2), {"r": 2}, {}, reject)
    return build_report(
        root, sections=load_pipeline(PIPELINES / "warmstart-ablation.yaml").report
    ).read_text()


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    following = text.find("\n## ", start + 1)
    return text[start:] if following == -1 else text[start:following]


def test_designs_side_by_side(ablation):
    table = section(ablation, "Warm-start designs side by side")
    # grounded3 on cosql: 3 recovered, 3 stuck, 2 direct; no_pass said 3 times, all of wrong queries, of 6
    # wrong
    assert (
        "| eval-sft-grounded3 | cosql | 6/10 | 62.5 [30.6, 86.3] (5/8) | 3 (3) | 100.0 [43.9, 100.0] (3/3) | "
        "50.0 [18.8, 81.2] (3/6) | 50.0 [18.8, 81.2] (3/6) | 50.0 [18.8, 81.2] (3/6) | 3 / 0 |"
    ) in table
    assert (
        "| eval-sft-gold | cosql | 0/10 | 25.0 [7.1, 59.1] (2/8) | 0 (0) | – (n=0) | 0.0 [0.0, 39.0] (0/6) | "
        "0.0 [0.0, 39.0] (0/6) |" in table
    )
    assert "| eval-sft-short |" not in table, "the short-horizon model is the baseline, not a row"
    assert "| eval-sft-gold | sparc | 0/10 | 75.0 [30.1, 95.4] (3/4) |" in table
    assert "EX minus that of `eval-sft-short`" in table


def test_summary_counts_failed_executions_recovered_from_per_dev_set(ablation):
    text = section(ablation, "Summary")
    cosql, sparc = text.split("**sparc**")
    assert re.search(r"Failed executions recovered from .*: base 0 of 0; SFT [0-9] of 6\.", cosql)
    assert "base 0 of 0; SFT 1 of 2." in sparc


def test_kept_recoveries_by_the_model_are_counted(ablation):
    table = section(ablation, "Kept trajectories by who wrote them")
    assert "| reject-r2 | sft-r1 | 3 | 3 | 3 | 3 | 1 | 2 | 1 |" in table


def test_a_run_without_an_sft_variants_long_horizon_evaluation_has_no_side_by_side(shared_run, tmp_path):
    spec = load_pipeline(PIPELINES / "warmstart-ablation.yaml").report
    assert (
        "Warm-start designs side by side"
        not in build_report(shared_run, tmp_path / "r", sections=spec).read_text()
    )


def test_the_baseline_is_the_short_horizon_evaluation_of_the_model_the_pipeline_names(tmp_path):
    store = Store(tmp_path / "run")
    for variant in ("short", "terse"):
        evaluation(
            store, f"eval-sft-{variant}", "short", {"cosql": (0, 0, 2)}, model=trained(store, variant, 0.0)
        )
    evals = evaluations(latest_artifacts(store.root))
    assert short_baseline(evals, "terse").label == "eval-sft-terse"
    assert short_baseline(evals, "short").label == "eval-sft-short"
    assert WarmstartSettings("sft-terse").variant == "terse" and WarmstartSettings().variant is None


def test_pooled_means_and_their_difference():
    pooled = Mean.pooled([Mean(0.0, 0.0, 4), Mean(1.0, 0.0, 4)])
    assert (pooled.mean, pooled.std, pooled.n) == (0.5, 0.5, 8)
    value, low, high = Mean(1.0, 0.2, 8).minus(Mean(0.6, 0.2, 8))
    assert value == pytest.approx(0.4) and low == pytest.approx(0.4 - 0.2095, abs=1e-3) and high > value
    assert Mean(1.0, 0.2, 1).minus(Mean(0.6, 0.2, 8)) is None


def test_reward_change_compares_the_first_and_last_quarter():
    steps = [Mean(0.1 * k, 0.1, 8) for k in range(8)]
    block, first, last, difference = reward_change(steps)
    assert block == 2 and first.mean == pytest.approx(0.05) and last.mean == pytest.approx(0.65)
    assert difference[1] > 0
    assert reward_change(steps[:1]) is None


def test_a_step_without_a_logged_spread_gives_the_change_but_no_interval():
    steps = [
        Mean(0.72, math.nan, 8),
        Mean(0.22, 0.3, 8),
        Mean(0.19, 0.2, 8),
    ]  # verl before it logged a spread
    line = change_sentence("rl", steps)
    assert "first 1 of 3 steps 0.720 (8 samples), of the last 1 0.190 (8 samples)" in line
    assert "change -0.530, no interval (a step logged no reward spread)" in line
    assert "[" not in line.split("change")[1], "no interval where the spread is unknown"
    assert "[" in change_sentence("rl", [Mean(0.72, 0.3, 8), Mean(0.19, 0.2, 8)]).split("change")[1]


def test_a_rise_the_interval_does_not_show_comes_with_the_chain_length_that_would_show_it():
    steps = [Mean(0.40, 0.45, 8), Mean(0.42, 0.45, 8), Mean(0.50, 0.45, 8), Mean(0.55, 0.45, 8)]
    block, first, last, difference = reward_change(steps)
    assert difference[1] < 0 < difference[0]
    needed = int(
        re.search(r"about (\d+) steps in all \(blocks of (\d+)", change_sentence("rl", steps)).group(2)
    )

    # blocks of `needed` steps, each step as large and as spread: the interval of the same rise clears 0 there
    # and not at 80 % of it
    def low(k: int) -> float:
        return Mean(last.mean, last.std, last.n * k).minus(Mean(first.mean, first.std, first.n * k))[1]

    assert low(needed) > 0 and low(math.floor(0.8 * needed)) < 0
    assert "steps in all" not in change_sentence("rl", steps[::-1]), "a fall is not sized"
    shown = [Mean(0.1, 0.05, 8), Mean(0.9, 0.05, 8)]
    assert "steps in all" not in change_sentence("rl", shown), "a rise already shown needs no sizing"
    assert "steps in all" not in change_sentence("rl", [Mean(0.1, math.nan, 8), Mean(0.2, 0.3, 8)]), (
        "no spread"
    )


def test_rl_section_gives_the_reward_change_with_its_interval(shared_run):
    text = section(build_report(shared_run).read_text(), "Curriculum GRPO")
    # conftest: rl-c1 steps 1-3 then rl-c2 steps 1-2, reward 0.5 k + 0.1 s, std 0.2, 2 groups x 4 samples
    assert (
        "* rl: training reward of the first 1 of 5 steps 0.600 (8 samples), of the last 1 1.200 (8 samples); "
        "change +0.600 [+0.390, +0.810] (95 % interval)."
    ) in text
