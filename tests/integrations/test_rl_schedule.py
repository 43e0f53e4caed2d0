"""Stage length (steps or epochs) and validation during RL: the local engine's hook and verl's overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.app.report import build_report
from mtsql.base.errors import UsageError
from mtsql.base.files import read_jsonl
from mtsql.core.results import TrainingStep
from mtsql.engines.rl_schedule import best_step, stage_steps, validation_due
from mtsql.engines.rl_settings import RlConfig
from mtsql.engines.verl.engine import verl_curve as _verl_curve
from mtsql.engines.verl.main_ppo import CurriculumParquet, build_stage_plan, compose_train_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("rl", "items", "steps"),
    [
        (RlConfig(steps_per_stage=60), 1000, 60),
        (
            RlConfig(epochs_per_stage=60, batch_size=256),
            256,
            60,
        ),  # the release's total_epochs=60 on one batch
        (
            RlConfig(epochs_per_stage=60, batch_size=256),
            1000,
            180,
        ),  # 3 full batches an epoch (the last 232 dropped)
        (RlConfig(epochs_per_stage=2, batch_size=256), 100, 2),  # at least one step an epoch
        (RlConfig(epochs_per_stage=2), None, None),  # before the curriculum exists
    ],
)
def test_stage_steps(rl, items, steps):
    assert stage_steps(rl, items) == steps


def test_validation_is_due_every_n_steps_and_at_the_last():
    rl = RlConfig(val_every=10)
    assert [s for s in range(1, 26) if validation_due(rl, s, 25)] == [10, 20, 25]
    assert not any(validation_due(RlConfig(), s, 25) for s in range(1, 26))


def test_best_step_is_the_first_of_the_highest_validated():
    lines = [
        TrainingStep(1, 1),
        *(
            TrainingStep(1, step, val_reward_mean=reward)
            for step, reward in ((2, 0.5), (3, 0.7), (4, 0.7), (5, None))
        ),
    ]
    assert best_step(lines) == 3 and best_step([TrainingStep(1, 1)]) is None


def test_best_without_validation_and_bad_values_are_usage_errors():
    with pytest.raises(UsageError, match="rl.val_every"):
        load_config(None, ["rl.val_pick=best"])
    with pytest.raises(UsageError, match="'rl.epochs_per_stage' must be >= 1"):
        load_config(None, ["rl.epochs_per_stage=0"])


@pytest.mark.verl
def test_verl_validates_on_the_dev_parquet_every_n_steps_and_keeps_checkpoints_to_pick_from(tmp_path):
    cfg = load_config(None, ["rl.val_every=10", "rl.val_pick=best", "rl.epochs_per_stage=60"])
    stage = CurriculumParquet("stage-1", tmp_path / "stage-1.parquet", 600, val_file=tmp_path / "val.parquet")
    plan = build_stage_plan(
        cfg,
        [stage],
        model_path="Qwen/Qwen3-1.7B",
        out_dir=tmp_path / "rl",
        data_root=tmp_path,
        python="python",
    )
    config = compose_train_config(plan[0].argv[3:])
    assert config.data.val_files.endswith("val.parquet") and config.data.train_files.endswith(
        "stage-1.parquet"
    )
    assert (config.trainer.test_freq, config.trainer.save_freq, config.trainer.val_before_train) == (
        10,
        10,
        False,
    )
    assert (config.trainer.total_epochs, config.trainer.total_training_steps) == (
        60,
        120,
    )  # 600 // 256 = 2 a pass
    assert not config.actor_rollout_ref.rollout.val_kwargs.do_sample
    assert "global_step_120" in plan[1].argv[plan[1].argv.index("--local_dir") + 1]
    default = compose_train_config(
        build_stage_plan(
            load_config(None),
            [CurriculumParquet("s", tmp_path / "s.parquet", 600)],
            model_path="m",
            out_dir=tmp_path / "d",
            data_root=tmp_path,
            python="python",
        )[0].argv[3:]
    )
    assert (default.trainer.test_freq, default.trainer.save_freq, default.trainer.total_training_steps) == (
        -1,
        60,
        60,
    )


def test_verl_curve_reads_the_validation_reward_of_each_dataset(tmp_path):
    stage_dir = tmp_path / "stage-1"
    stage_dir.mkdir()
    rows = [
        {"step": 1, "data": {"critic/score/mean": 1.0}},
        {
            "step": 2,
            "data": {
                "critic/score/mean": 1.5,
                "val-core/mtsql-cosql/reward/mean@1": 0.4,
                "val-core/mtsql-sparc/reward/mean@1": 0.6,
                "val-aux/mtsql-cosql/ex/mean@1": 9.0,
            },
        },
    ]
    (stage_dir / "verl_metrics.1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = _verl_curve(stage_dir, 1)
    assert curve[0].val_reward_mean is None and curve[1].val_reward_mean == pytest.approx(0.5)
    assert best_step(curve) == 2


def test_local_engine_validates_and_keeps_the_best_step(tmp_path, tiny_qwen3, monkeypatch):
    import torch

    from mtsql.engines import rl_schedule
    from mtsql.engines.local_grpo import trainer, update

    cfg = load_config(
        REPO / "configs" / "profiles" / "tiny.yaml",
        [
            f"runs_dir={tmp_path / 'runs'}",
            "model.name=tiny-qwen3",
            "data.train_limit=2",
            "rl.max_message_tokens=8",
            "rl.steps_per_stage=3",
            "rl.n=2",
            "rl.batch_size=2",
            "rl.mini_batch_size=2",
            "sample.batch_size=8",
            "rl.local.trainable_layers=1",
            "rl.val_every=2",
            "rl.val_limit=1",
            "rl.val_pick=best",
            "curriculum.stages=[[easy, medium, hard, extra]]",
        ],
    )
    scores = iter([0.9, 0.1])  # step 2 validates best, the last step (3) worse: the model must be step 2's
    kept, last_weights = {}, {}
    real_measure = rl_schedule.LocalValidation.measure

    def scripted(self, step):
        line = real_measure(self, step)
        weights = {
            n: p.detach().clone() for n, p in self.engine.backend.model.named_parameters() if p.requires_grad
        }
        (kept if step == 2 else last_weights).update(weights)  # the weights as steps 2 and 3 left them
        return line | {"val_reward_mean": next(scores)}

    monkeypatch.setattr(rl_schedule.LocalValidation, "measure", scripted)

    def moving_update(model, optimizer, episodes, settings, **kwargs):  # a tiny random model earns no reward
        with torch.no_grad():  # spread: move the weights every step
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(0.01)
        return dict.fromkeys(update.STATS, 0.0)

    monkeypatch.setattr(trainer, "grpo_update", moving_update)
    last = pipeline.rl(cfg, curriculum_art=pipeline.curriculum(cfg), engine="local")
    curve = read_jsonl(last.path / "metrics.jsonl")
    assert [line["step"] for line in curve if "val_ex" in line] == [2, 3]
    assert all(line["val_turns"] > 0 for line in curve if "val_ex" in line)
    assert last.metrics["picked_step"] == 2 and last.metrics["val_reward_picked"] == 0.9

    from transformers import AutoModelForCausalLM

    saved = dict(AutoModelForCausalLM.from_pretrained(last.path / "model").named_parameters())
    assert kept and all(torch.equal(saved[name], value) for name, value in kept.items())
    assert any(not torch.equal(last_weights[name], value) for name, value in kept.items()), "step 3 trained"
    report = build_report(tmp_path / "runs" / cfg.run).read_text()
    assert "* rl-c1 dev validation: step 2: reward 0.900, EX " in report and "step 3: reward 0.100" in report
    assert "model kept: step 2" in report
