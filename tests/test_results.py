"""Typed results: an evaluation's metrics and an RL step line, read back from what is on disk, and the
one-line refusal of a record of another shape."""

import json

import pytest

from mtsql.app.report.runs import evaluation_of, rl_steps
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.base.errors import UsageError
from mtsql.core.results import DatasetBlock, EvaluationResult, TrainingStep

from .report.blocks import block, metrics


def test_an_evaluations_metrics_round_trip_through_json():
    written = metrics(
        {"cosql": block(40, 16), "spider": block(10, 3, pass_at_k={"ks": [1]})}, decoding="vote@4"
    )
    result = EvaluationResult.from_dict(json.loads(json.dumps(written)))
    assert (
        result.to_dict() == written and result.decoding == "vote@4" and result.budgets.max_new_tokens == 512
    )
    assert isinstance(result.datasets["cosql"], DatasetBlock) and result.datasets["cosql"].ex == 0.4
    assert result.datasets["spider"].pass_at_k == {"ks": [1]} and result.datasets["cosql"].pass_at_k is None
    assert set(result.datasets["cosql"].headline()) == {
        "turns",
        "ex",
        "em",
        "interaction_ex",
        "interaction_em",
        "cost",
    }


def test_metrics_of_another_shape_name_the_field():
    written = metrics({"cosql": block(40, 16)})
    del written["datasets"]["cosql"]["revisions"]
    with pytest.raises(ValueError, match="not an evaluated dataset: no revisions"):
        EvaluationResult.from_dict(written)
    with pytest.raises(ValueError, match="not an evaluation's metrics: unknown extra"):
        EvaluationResult.from_dict(metrics({}) | {"extra": 1})


def test_the_report_refuses_an_evaluation_of_another_shape_in_one_line(tmp_path):
    store = Store(tmp_path)
    art, _ = store.run(
        ArtifactKey.evaluation(None), {}, {}, lambda ctx: {"mode": "long", "datasets": {"cosql": {}}}
    )
    with pytest.raises(
        UsageError, match="not an evaluation's metrics: no model, .*; delete that folder and rerun"
    ) as err:
        evaluation_of(art)
    assert "\n" not in str(err.value) and str(art.path) in str(err.value)


def test_step_lines_of_both_engines_read_alike():
    local = {
        "stage": 1,
        "step": 2,
        "reward_mean": 0.5,
        "reward_std": 0.1,
        "pg_loss": -0.01,
        "clipfrac": 0.0,
        "groups_with_signal": 0.5,
        "ex": 0.25,
        "tool_calls_per_turn": 2.0,
        "episodes_trained": 8,
        "wall_s": 3.2,
    }
    verl = {
        "stage": 1,
        "step": 3,
        "reward_mean": 0.6,
        "response_length": 80.0,
        "kl": None,
        "val_reward_mean": 0.4,
        "verl": {"critic/score/mean": 0.6},
    }
    a, b = TrainingStep.from_dict(local), TrainingStep.from_dict(verl)
    assert (a.reward_std, a.clipfrac, a.extra) == (0.1, 0.0, {"episodes_trained": 8, "wall_s": 3.2})
    assert (b.reward_std, b.kl, b.val_reward_mean, b.extra) == (
        None,
        None,
        0.4,
        {"verl": {"critic/score/mean": 0.6}},
    )
    assert a.to_dict() == local and b.to_dict() == {k: v for k, v in verl.items() if v is not None}


def test_an_rl_line_without_its_step_is_refused_in_one_line(tmp_path):
    store = Store(tmp_path)

    def work(ctx):
        (ctx.out / "metrics.jsonl").write_text(json.dumps({"stage": 1, "reward_mean": 0.5}) + "\n")
        return {"steps": 1}

    art, _ = store.run(ArtifactKey("rl", 1), {}, {}, work)
    with pytest.raises(
        UsageError, match=r"metrics.jsonl: not an RL step line: no step \(written by another mtsql\)"
    ):
        rl_steps(art)
