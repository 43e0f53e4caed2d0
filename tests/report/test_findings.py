"""The "Paper findings" section, kept trajectories by writer and self-correction counts, on a fabricated
method run (pipelines/method.yaml's labels) whose rates were chosen to give each verdict."""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.app.pipeline import load_pipeline
from mtsql.app.report import build_report
from mtsql.app.report.findings import (
    CONTRADICTED,
    NOT_SHOWN,
    SUPPORTED,
    evals_pace,
    findings,
    findings_section,
)
from mtsql.app.report.runs import latest_artifacts
from mtsql.app.report.self_correction import is_verified, self_correction_section
from mtsql.app.report.self_taught import kept_rows, kept_section
from mtsql.app.report.stats import Rate
from mtsql.base import artifacts
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.core.agent.env import Step, Trajectory
from mtsql.core.data.records import Turn
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import summarize
from mtsql.core.trajectories import ScoredRow, read_rows, write_rows

from .blocks import block, metrics

DIALOGUES, TURNS = 25, 4  # 100 turns of cosql, 25 per turn position and per hardness level
G, W = "SELECT a FROM t", "SELECT b FROM t"
PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
METHOD = load_pipeline(PIPELINES / "method.yaml").report  # the sections pipelines/method.yaml names
SETTINGS = METHOD["findings"]
REAL_ROW = read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0]


def summary(right) -> dict:
    """The official summary of 100 turns; ``right(interaction, turn)`` says which match."""
    items = [
        {
            "interaction_index": i,
            "turn_index": t,
            "hardness": HARDNESS_LEVELS[i % 4],
            "exec_match": int(right(i, t)),
            "exact_match": 0,
            "db_id": "db",
            "error": None,
        }
        for i in range(DIALOGUES)
        for t in range(TURNS)
    ]
    return summarize(items) | {"dataset": "cosql"}


def trajectory(verified: bool, execution: int) -> ScoredRow:
    """A scored evaluation row: the agent runs a query, judges it pass, answers (that query if
    ``verified``)."""
    answer, ran = (G if execution else W), (G if execution else W) if verified else "SELECT 1"
    turn = Turn("cosql", "dev", "cosql-dev-0000", 0, 0, "db", "question", G, (), (), "easy")
    steps = [
        Step(
            index=0,
            text="<tool_call>...</tool_call>",
            action="tool_call",
            tool="exec_sql",
            arguments={"sql": ran},
            sql=ran,
            observation="Result: 1",
            result_kind="ok",
            verdict="pass",
        ),
        Step(
            index=1,
            text=f"<answer_sql>{answer}</answer_sql>",
            action="answer",
            sql=answer,
            exec_verdict="pass",
        ),
    ]
    traj = Trajectory(
        uid=turn.uid,
        dataset="cosql",
        db_id="db",
        question="question",
        mode="long",
        memory_source="gold",
        max_messages=4,
        thinking=False,
        memory=[],
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "question"}],
        steps=steps,
        final_sql=answer,
        finish_reason="answer",
        protocol_valid=True,
    )
    return replace(
        REAL_ROW,
        key=f"{turn.uid}#0",
        uid=turn.uid,
        sample=0,
        turn=turn,
        trajectory=traj,
        execution=execution,
        exact=0,
    )


def evaluation(
    store: Store,
    label: str,
    scored: ArtifactKey | None,
    right,
    *,
    mode: str = "long",
    revisions: dict | None = None,
    rows: list[ScoredRow] | None = None,
) -> None:
    """An evaluation of the model ``scored`` (its key; None: the base model), as the pipeline keys it."""

    def work(ctx):
        (ctx.out / "cosql").mkdir()
        (ctx.out / "cosql" / "summary.json").write_text(json.dumps(summary(right)))
        write_rows(ctx.out / "cosql" / "trajectories.jsonl", rows or [])
        counts = summary(right)["execution"]["question"]["correct"]
        return metrics(
            {"cosql": block(100, counts, **({"revisions": revisions} if revisions else {}))}, mode=mode
        )

    with (
        stepping_clock()
    ):  # each evaluation takes one second of the store's clock (the report's pace reads it)
        store.run(ArtifactKey.evaluation(scored, name=label), {"label": label}, {}, work)


@contextlib.contextmanager
def stepping_clock(step: float = 0.5):
    """The store's ``time.time`` advances ``step`` seconds per call, so a stage's wall time is non-zero and
    known without waiting; every other ``time`` function is the real one."""

    class Clock:
        now = 1_000_000.0

        def time(self):
            self.now += step
            return self.now

        def __getattr__(self, name):
            return getattr(time, name)

    real = artifacts.time
    artifacts.time = Clock()
    try:
        yield
    finally:
        artifacts.time = real


def revisions(fixed: int, broke: int, with_error: int, resolved: int) -> dict:
    return {
        "no_pass": fixed + broke + 3,
        "revised": fixed + broke + 1,
        "wrong_to_right": fixed,
        "right_to_wrong": broke,
        "stayed_wrong": 1,
        "stayed_right": 0,
        "unscored": 0,
        "with_error": with_error,
        "ran_after": with_error,
        "resolved": resolved,
        "recovered": 0,
    }


def build(root, *, outcome: bool = True, round1: bool = True, labels: dict[str, str] | None = None):
    """The method run; without ``round1``, round 2 trained nothing and eval-sft scores the round-1 model.
    ``labels``: other labels for the evaluations (the report must find them by key all the same)."""
    store = Store(root)

    def label(name):
        return (labels or {}).get(name, name)

    evaluation(store, label("eval-base"), None, lambda i, t: False)
    if round1:
        evaluation(
            store, label("eval-sft-r1"), ArtifactKey("sft", 1), lambda i, t: t == 0 and i < 20
        )  # 20/100, turn 1
    evaluation(
        store,
        label("eval-sft"),
        ArtifactKey("sft", 2 if round1 else 1),
        lambda i, t: t == 0 and i < 20 or t == 1 and i < 10,
        revisions=revisions(0, 0, 20, 15),
    )  # 30/100
    evaluation(
        store,
        label("eval-sft-short"),
        ArtifactKey("sft", 1, "short"),
        lambda i, t: t == 1 and i < 20,
        mode="short",
    )  # 20/100, all on turn 2
    rl_rows = (
        [trajectory(True, 1)] * 8
        + [trajectory(True, 0)] * 2
        + [trajectory(False, 1)]
        + [trajectory(False, 0)] * 9
    )
    evaluation(
        store,
        label("eval-rl"),
        ArtifactKey("rl", 3),
        lambda i, t: t == 0 and i < 10,
        revisions=revisions(12, 2, 20, 1),
        rows=rl_rows,
    )
    if outcome:
        evaluation(
            store, label("eval-rl-outcome"), ArtifactKey("rl", 3, "outcome"), lambda i, t: t == 1 and i < 10
        )  # 10/100, as eval-rl
    return root


@pytest.fixture
def run(tmp_path):
    return build(tmp_path / "method")


def rows_of(run, claim_start: str) -> dict[str, object]:
    return {
        row.slice: row
        for row in findings(latest_artifacts(run), SETTINGS)
        if row.claim.startswith(claim_start)
    }


def test_evaluations_are_found_by_key_whatever_their_labels(run, tmp_path):
    """Labels that say nothing of the model (and one that says the wrong thing) land in the same rows."""
    odd = {
        "eval-base": "zero",
        "eval-sft-r1": "first-round",
        "eval-sft": "eval-rl-old",
        "eval-sft-short": "terse",
        "eval-rl": "final",
        "eval-rl-outcome": "eval-sft-x",
    }
    renamed = build(tmp_path / "odd", labels=odd)

    def table(folder):
        return [
            (row.claim, row.slice, row.measured, row.difference)
            for row in findings(latest_artifacts(folder), SETTINGS)
        ]

    assert table(renamed) == table(run) and any(row[3] is not None for row in table(run))


def test_gains_and_losses_get_their_verdicts(run):
    assert rows_of(run, "Warm-start SFT")["cosql"].verdict == SUPPORTED  # 30/100 against 0/100
    assert rows_of(run, "RL improves")["cosql"].verdict == CONTRADICTED  # 10/100 against 30/100
    assert rows_of(run, "A self-taught round")["cosql"].verdict == NOT_SHOWN  # 30/100 against 20/100
    assert rows_of(run, "The process reward")["cosql"].verdict == NOT_SHOWN  # 10/100 against 10/100
    shown = rows_of(run, "Warm-start SFT")["cosql"]
    assert shown.difference[0] == pytest.approx(0.30) and shown.difference[1] > 0
    assert "eval-sft 30.0" in shown.measured and "eval-base 0.0" in shown.measured
    first = rows_of(run, "Round 1 of warm-start SFT")["cosql"]  # the last round's gain is not the only one
    assert (
        first.verdict == SUPPORTED
        and "eval-sft-r1 20.0" in first.measured
        and "eval-base 0.0" in first.measured
    )


def test_long_against_short_per_turn_and_hardness(run):
    """Round 1 (the same items and budget) against the short model: equal overall, apart by turn."""
    rows = rows_of(run, "Long horizon")
    assert "eval-sft-r1" in rows["cosql"].measured and rows["cosql"].difference[0] == pytest.approx(0.0)
    assert rows["cosql"].verdict == NOT_SHOWN and rows["cosql"].needed is None, "no trend: no budget"
    assert rows["cosql, turn 1"].verdict == SUPPORTED  # 20/25 against 0/25
    assert rows["cosql, turn 2"].verdict == CONTRADICTED  # 0/25 against 20/25
    assert "cosql, turn 3" in rows and "cosql, turn >4" not in rows, "a bucket with no turn has no row"
    assert rows["cosql, easy"].verdict == NOT_SHOWN and {"cosql, hard", "cosql, extra"} <= set(rows)


def test_turns_needed_is_where_the_same_rates_clear_zero(run):
    row = rows_of(run, "A self-taught round")["cosql"]
    assert row.needed > 100

    def low(n):
        return Rate(round(0.3 * n), n).minus(Rate(round(0.2 * n), n))[1]

    assert low(math.ceil(1.15 * row.needed)) > 0 and low(math.floor(0.8 * row.needed)) < 0


def test_verification_self_correction_and_execution_failures(run):
    verified = rows_of(run, "Verified answers")["cosql (eval-rl)"]
    assert verified.verdict == SUPPORTED and "verified 80.0" in verified.measured  # 8/10 against 1/10
    corrected = rows_of(run, "Self-correction")["cosql (eval-rl)"]
    assert corrected.verdict == SUPPORTED and corrected.difference[0] == pytest.approx(2 * 12 / 14 - 1)
    resolving = rows_of(run, "RL learns to resolve")["cosql"]
    assert resolving.verdict == CONTRADICTED  # 1/20 against 15/20


def test_missing_evaluations_are_named(tmp_path):
    run = build(tmp_path / "no-outcome", outcome=False)
    (row,) = rows_of(run, "The process reward").values()
    assert row.verdict == "missing: eval-rl-outcome" and row.difference is None
    lines = "\n".join(findings_section(latest_artifacts(run), SETTINGS))
    assert "missing: eval-rl-outcome" in lines and "## Paper findings" in lines


def test_a_round_two_that_kept_nothing_is_named_as_such(tmp_path):
    """eval-sft-r1 is then the same work as eval-sft (served under that label), not a missing evaluation."""
    run = build(tmp_path / "no-round-2", round1=False)
    assert not rows_of(run, "Round 1 of"), "no round-1 evaluation: eval-sft is the one warm-start row"
    (row,) = rows_of(run, "A self-taught round").values()
    assert row.verdict == "missing: eval-sft-r1", "without reject-r2, nothing says why"
    Store(run).run(ArtifactKey("reject", 2), {"r": 2}, {}, lambda ctx: {"items": 4, "kept": 0})
    (row,) = rows_of(run, "A self-taught round").values()
    assert (
        row.verdict == "round 2 kept 0 trajectories and trained no model: eval-sft scores the round-1 model"
    )
    Store(run).run(ArtifactKey("sft", 2), {"r": 2}, {}, lambda ctx: {"examples": 3})
    (row,) = rows_of(run, "A self-taught round").values()
    assert row.verdict == "missing: eval-sft-r1", "a round 2 that trained a model needs its own evaluation"


def test_a_run_without_the_method_evaluations_has_no_section(tmp_path):
    store = Store(tmp_path / "plain")
    evaluation(store, "eval-base", None, lambda i, t: False)
    assert findings_section(latest_artifacts(tmp_path / "plain"), SETTINGS) == []


def test_section_and_closing_note_in_the_report(run):
    text = build_report(run, sections=METHOD).read_text()
    section = text.split("## Paper findings")[1].split("\n## ")[0]
    assert "| Warm-start SFT improves on the base model | cosql |" in section
    assert "+30.0 [" in section and SUPPORTED in section and CONTRADICTED in section
    assert (
        "would clear 0 with about" in section
        and "A self-taught round improves on the round before (cosql)" in section
    )
    assert "s per evaluated turn" in section


def test_pace_is_wall_time_over_evaluated_turns(run):
    arts = latest_artifacts(run)
    evals = [art for label, art in arts.items() if label.startswith("eval-")]
    assert len(evals) == 6
    assert all(a.manifest["duration_s"] > 0 for a in evals)
    assert evals_pace(arts) == pytest.approx(sum(a.manifest["duration_s"] for a in evals) / 600)
    assert evals_pace({}) is None


def test_verified_means_run_and_judged_pass_before_answering():
    assert is_verified(trajectory(True, 1).trajectory)
    assert not is_verified(trajectory(False, 1).trajectory)
    judged_no_pass = trajectory(True, 1).trajectory
    judged_no_pass.steps[0].verdict = "no_pass"
    assert not is_verified(judged_no_pass)


def test_self_correction_counts_and_evaluations_without_them(run):
    arts = latest_artifacts(run)
    lines = self_correction_section({k: v for k, v in arts.items() if k.startswith("eval-")})
    rl = next(line for line in lines if line.startswith("| eval-rl | cosql"))
    assert rl.split(" | ")[2:6] == ["17", "15", "12", "2"], "no_pass, revised, wrong → right, right → wrong"
    assert "eval-sft-short" not in "\n".join(lines), "short mode has no verdicts"


def kept_row(model: bool) -> ScoredRow:
    return replace(REAL_ROW, uid="u", response_ids=[1, 2] if model else None)


def test_kept_trajectories_by_writer(tmp_path):
    store = Store(tmp_path / "rounds")

    def sampled(policy, model):
        return lambda ctx: {"policy": policy, "model": model, "count": 8}

    def kept(rows):
        def work(ctx):
            write_rows(ctx.out / "kept.jsonl", rows)
            return {"items": 4, "solved": 3, "sampled": 8, "kept": len(rows)}

        return work

    s1, _ = store.run(ArtifactKey("sample", 1), {"r": 1}, {}, sampled("gold_with_correction", "smollm2-135m"))
    store.run(ArtifactKey("reject", 1), {"r": 1}, {"sample": s1}, kept([kept_row(False)] * 3))
    s2, _ = store.run(ArtifactKey("sample", 2), {"r": 2}, {}, sampled("model", "sft-r1"))
    store.run(ArtifactKey("reject", 2), {"r": 2}, {"sample": s2}, kept([kept_row(True)] * 2))
    short, _ = store.run(ArtifactKey("sample", 1, "short"), {"r": 3}, {}, sampled("gold", "smollm2-135m"))
    store.run(ArtifactKey("reject", 1, "short"), {"r": 3}, {"sample": short}, kept([kept_row(False)]))
    rows = kept_rows(latest_artifacts(store.root))
    assert [(r["label"], r["sampled_by"], r["by_scripted"], r["by_model"]) for r in rows] == [
        ("reject-r1", "gold_with_correction", 3, 0),
        ("reject-r2", "sft-r1", 0, 2),
        ("reject-short-r1", "gold", 1, 0),
    ]
    text = "\n".join(kept_section(latest_artifacts(store.root)))
    assert "The model wrote 2 of the kept trajectories itself (reject-r2 sampled the model)" in text
