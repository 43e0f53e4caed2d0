"""The RL engine contract: every registered engine is an ``RlEngine``, both return one ``RlStageResult`` drawn
from their ``TrainingStep`` lines, and the no-gradient warning reads that result under either engine."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.app.status import summary
from mtsql.base.errors import UsageError
from mtsql.base.files import read_jsonl
from mtsql.core.results import RlStageResult, TrainingStep
from mtsql.engines.rl_engines import RL_ENGINES, RlEngine, groups_with_signal, rl_engine
from mtsql.engines.verl import engine as verl_engine
from mtsql.engines.verl.main_ppo import ROLLOUTS_DIR

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
CONTRACT = ("train_curriculum_stage", "plan_curriculum_stage", "identity", "sample_settings")


@pytest.mark.parametrize("name", list(RL_ENGINES))
def test_every_registered_engine_has_the_contracts_signatures(name):
    module = rl_engine(name)
    for member in CONTRACT:
        declared = inspect.signature(getattr(RlEngine, member))
        without_self = declared.replace(parameters=list(declared.parameters.values())[1:])
        assert inspect.signature(getattr(module, member)) == without_self, f"{RL_ENGINES[name]}.{member}"


def test_a_stage_result_is_drawn_from_its_steps_alike_for_both_engines():
    steps = [
        TrainingStep(1, 1, reward_mean=0.2, groups_with_signal=0.0),
        TrainingStep(1, 2, reward_mean=0.4, groups_with_signal=0.5, val_reward_mean=0.3),
        TrainingStep(1, 3, reward_mean=0.6, groups_with_signal=0.0, ex=0.25, response_length=40.0),
    ]
    result = RlStageResult.of_steps(steps, engine="verl", items=8, picked_step=2)
    assert (result.steps, result.reward_first, result.reward_last, result.ex_last) == (3, 0.2, 0.6, 0.25)
    assert (result.steps_without_signal, result.picked_step, result.val_reward_picked) == (2, 2, 0.3)
    assert RlStageResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    unknown = RlStageResult.of_steps([TrainingStep(1, 1)], engine="verl", items=8, picked_step=1)
    assert unknown.steps_without_signal is None, "no step logged its groups: unknown, not 0"
    with pytest.raises(ValueError, match="not an RL stage's metrics: no items"):
        RlStageResult.from_dict({"engine": "verl", "steps": 1, "picked_step": 1})


def test_groups_with_signal_counts_groups_whose_rewards_differ():
    assert groups_with_signal([("a", 1.0), ("a", 1.0), ("b", 0.0), ("b", 1.0)]) == 0.5
    assert groups_with_signal([("a", 1.0), ("a", 1.0), ("b", 0.0), ("b", 0.0)]) == 0.0
    assert groups_with_signal([]) == 0.0


def rl_cfg(tmp_path, engine: str, *overrides):
    return load_config(
        TINY,
        [
            f"runs_dir={tmp_path / 'runs'}",
            "model.name=tiny-qwen3",
            "data.train_limit=4",
            "sample.backend=hf",
            f"rl.engine={engine}",
            "rl.n=2",
            "rl.batch_size=2",
            "rl.mini_batch_size=2",
            "rl.steps_per_stage=2",
            "rl.max_message_tokens=8",
            "curriculum.stages=[[easy, medium, hard, extra]]",
            *overrides,
        ],
    )


def recorded_verl_run(scores: dict[str, list[float]]):
    """A stand-in for ``main_ppo`` and its merge: what they leave in a stage folder, in verl's own shapes (one
    metrics line per step, the step's samples dumped with compute_score's keys, the merged model)."""

    def run(commands, log_path, *, steps):
        train = commands[0]
        stage_dir = Path(train.cwd)
        train.produces["metrics"].parent.mkdir(parents=True, exist_ok=True)
        mean = sum(sum(group) for group in scores.values()) / sum(len(group) for group in scores.values())
        train.produces["metrics"].write_text(
            "".join(
                json.dumps({"step": step, "data": {"critic/score/mean": mean, "actor/pg_loss": 0.0}}) + "\n"
                for step in range(1, steps + 1)
            )
        )
        (stage_dir / ROLLOUTS_DIR).mkdir()
        for step in range(1, steps + 1):
            (stage_dir / ROLLOUTS_DIR / f"{step}.jsonl").write_text(
                "".join(
                    json.dumps(
                        {
                            "input": prompt,
                            "output": "...",
                            "gts": "SELECT 1",
                            "score": score,
                            "step": step,
                            "trajectory_ok": 0.0,
                        }
                    )
                    + "\n"
                    for prompt, group in scores.items()
                    for score in group
                )
            )
        (stage_dir / "merged").mkdir()
        (stage_dir / "merged" / "config.json").write_text("{}")

    return run


def test_a_verl_stage_whose_groups_all_had_equal_rewards_gets_the_warning(
    tmp_path, models_home, tiny_qwen3, monkeypatch, capsys
):
    monkeypatch.setattr(
        verl_engine, "run_stage_plan", recorded_verl_run({"q1": [1.0, 1.0], "q2": [0.0, 0.0]})
    )
    cfg = rl_cfg(tmp_path, "verl")
    done = pipeline.rl(cfg, curriculum_art=pipeline.curriculum(cfg))
    steps = [TrainingStep.from_dict(line) for line in read_jsonl(done.path / "metrics.jsonl")]
    assert [(step.step, step.groups_with_signal, step.reward_std) for step in steps] == [
        (1, 0.0, 0.5),
        (2, 0.0, 0.5),
    ]
    result = pipeline.rl_result_of(done)
    assert (result.engine, result.steps, result.steps_without_signal, result.picked_step) == ("verl", 2, 2, 2)
    assert "rl-c1: 2 of 2 steps had equal rewards in every group, so no policy gradient" in " ".join(
        capsys.readouterr().err.split()
    )
    assert summary(done.manifest).endswith(", 2 without signal")


def test_a_verl_stage_with_signal_gets_no_warning(tmp_path, models_home, tiny_qwen3, monkeypatch, capsys):
    monkeypatch.setattr(
        verl_engine, "run_stage_plan", recorded_verl_run({"q1": [1.0, 0.0], "q2": [0.0, 0.0]})
    )
    cfg = rl_cfg(tmp_path, "verl")
    done = pipeline.rl(cfg, curriculum_art=pipeline.curriculum(cfg))
    assert pipeline.rl_result_of(done).steps_without_signal == 0
    assert "no policy gradient" not in capsys.readouterr().err


def test_a_local_stage_whose_groups_all_had_equal_rewards_gets_the_warning(
    tmp_path, models_home, tiny_qwen3, capsys
):
    cfg = rl_cfg(tmp_path, "local", "rl.local.trainable_layers=1", "env.max_messages=2")
    done = pipeline.rl(cfg, curriculum_art=pipeline.curriculum(cfg))
    steps = [TrainingStep.from_dict(line) for line in read_jsonl(done.path / "metrics.jsonl")]
    assert all(step.reward_std == 0.0 for step in steps), (
        "a random tiny model earns the same reward every time"
    )
    assert pipeline.rl_result_of(done).steps_without_signal == 2
    assert "rl-c1: 2 of 2 steps had equal rewards in every group" in " ".join(capsys.readouterr().err.split())


def test_rl_metrics_of_another_shape_are_refused_in_one_line(tmp_path):
    from mtsql.base.artifacts import ArtifactKey, Store

    art, _ = Store(tmp_path).run(ArtifactKey("rl", 1), {}, {}, lambda ctx: {"steps": 1, "reward_last": 0.5})
    with pytest.raises(
        UsageError, match="not an RL stage's metrics: no engine, items, picked_step .*rerun"
    ) as err:
        pipeline.rl_result_of(art)
    assert "\n" not in str(err.value)
