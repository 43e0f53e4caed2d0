"""The warm-start ablation (pipelines/warmstart-ablation.yaml with
configs/experiments/warmstart-ablation.yaml): its dry run, the attempts an own_mistakes round keeps, and
how a pipeline names them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.app.runner import Pending
from mtsql.base.errors import UsageError
from mtsql.core.trajectories import read_rows
from mtsql.stages import sample as sample_stage

REPO = Path(__file__).resolve().parents[1]
ABLATION = REPO / "pipelines" / "warmstart-ablation.yaml"
CONFIG = REPO / "configs" / "experiments" / "warmstart-ablation.yaml"
ROW = read_rows(REPO / "tests" / "fixtures" / "scored_rows.jsonl")[0]


def planned(capsys) -> list[str]:
    err = capsys.readouterr().err
    return [line.split()[0] for line in err.splitlines() if "will run" in line or "will be built" in line]


def test_dry_run_plans_at_least_three_round_one_designs(tmp_path, capsys):
    pipeline.run_pipeline(ABLATION, CONFIG, [f"runs_dir={tmp_path / 'runs'}"], dry_run=True)
    steps = planned(capsys)
    round_one = [label for label in steps if label.startswith("sft-") and label.endswith("-r1")]
    assert round_one == [
        "sft-gold-r1",
        "sft-correction-r1",
        "sft-grounded-r1",
        "sft-groundedlr-r1",
        "sft-hinted-r1",
        "sft-own-r1",
        "sft-short-r1",
    ]
    assert steps.count("eval-base") == 1, "the base model is scored once for every design"
    assert steps.index("sample-attempts-own") > steps.index("sft-gold-r1"), (
        "own mistakes are the gold model's"
    )
    assert {"eval-sft-hinted", "eval-sft-short", "report"} <= set(steps)
    assert not list((tmp_path / "runs").rglob("manifest.json")), "a dry run writes no artifact"


def test_the_designs_share_items_and_budget():
    """Every variant trains the same items for one round from the base model for one epoch; only the policy,
    the learning rate and hint of the grounded variants and the short mode differ (the step overrides)."""
    steps = pipeline.load_pipeline(ABLATION).steps
    policies = {}
    for step in (s for s in steps if s.stage == "sft-iterate"):
        cfg = load_config(CONFIG, list(step.overrides))
        assert cfg.sft.rounds == 1 and cfg.data.train_limit == 30
        assert cfg.sft.epochs == 1.0
        policies[step.label] = (cfg.sft.first_round_policy, cfg.sft.learning_rate, cfg.env.error_hint)
    assert policies == {
        "gold": ("gold", 2e-4, False),
        "correction": ("gold_with_correction", 2e-4, False),
        "grounded": ("gold_grounded", 2e-4, False),
        "groundedlr": ("gold_grounded", 5e-4, False),
        "hinted": ("gold_grounded", 5e-4, True),
        "own": ("own_mistakes", 2e-4, False),
        "short": ("gold", 2e-4, False),
    }
    assert load_config(CONFIG).sample.failure_share == 0.586


def write(tmp_path, steps: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"steps:\n{steps}")
    return path


@pytest.mark.parametrize(
    "steps",
    [
        "  - stage: evaluate\n    attempts: base\n",
        "  - stage: sft-iterate\n    label: own\n    attempts: sft-gold\n",
    ],
)
def test_attempts_name_an_earlier_model_on_an_sft_iterate_step(tmp_path, steps):
    with pytest.raises(UsageError, match="attempts names the model whose first queries"):
        pipeline.load_pipeline(write(tmp_path, steps))


def test_attempts_are_one_greedy_sample_of_the_named_model(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(
        pipeline,
        "run_stage",
        lambda name, cfg, *, key, inputs, **_: (
            seen.append((key.label, cfg.sample.policy, cfg.sample.n, cfg.sample.temperature, inputs))
            or Pending(key.label, None)
        ),
    )
    cfg = load_config(CONFIG, [f"runs_dir={tmp_path / 'runs'}", "sample.n=4"])
    model = Pending("sft-gold-r1", None)
    pipeline.sample_attempts(cfg, model, variant="own", dry_run=True)
    assert seen == [
        ("sample-attempts-own", "model", 1, 0.0, {"model": model, "pool": None, "attempts": None})
    ]


def test_first_attempts_take_each_items_first_sample():
    first = ROW.trajectory.messages[2]["content"]
    later = replace(
        ROW,
        sample=1,
        trajectory=replace(
            ROW.trajectory,
            messages=[*ROW.trajectory.messages[:2], {"role": "assistant", "content": "another"}],
        ),
    )
    silent = replace(
        ROW, uid="other", trajectory=replace(ROW.trajectory, messages=ROW.trajectory.messages[:2])
    )
    assert sample_stage.first_attempts([later, ROW, silent]) == {ROW.uid: first}


def test_own_mistakes_without_attempts_is_refused_before_it_runs():
    cfg = load_config(CONFIG, ["sample.policy=own_mistakes"])
    with pytest.raises(UsageError, match="give the attempts input"):
        sample_stage.check(cfg, model=None, pool=None, attempts=None)


def test_an_own_mistakes_round_keeps_the_attempts_that_failed_and_replaces_the_plausible_ones(tmp_path):
    """Through the sample stage: gold_with_correction's first queries stand in for a model's attempts; those
    that failed to run are kept and corrected, those that ran with rows are not kept (the gold runs)."""
    cfg = load_config(CONFIG, [f"runs_dir={tmp_path / 'runs'}", "data.train_limit=3"])
    attempts = pipeline.sample(cfg, policy="gold_with_correction", label="sample-attempts")
    own = pipeline.sample(cfg, policy="own_mistakes", attempts=attempts, label="sample-own")
    tried = {r.uid: r.trajectory.steps[0] for r in read_rows(attempts.path / "trajectories.jsonl")}
    rows = read_rows(own.path / "trajectories.jsonl")
    assert rows and all(r.protocol_valid and r.execution == 1 for r in rows)
    for r in rows:
        first = r.trajectory.steps[0]
        if tried[r.uid].result_kind == "error":
            assert first.sql == tried[r.uid].sql and first.verdict == "no_pass"
        else:
            assert first.sql != tried[r.uid].sql and first.verdict == "pass"
    assert {tried[r.uid].result_kind for r in rows} == {"error", "ok"}


def test_verl_agent_loop_gets_the_error_hint_with_the_env_section(tmp_path):
    """verl's agent loop builds its SqlAgentEnv from the env section mtsql writes: the switch travels with
    it."""
    import yaml

    from mtsql.core.agent.settings import EnvConfig
    from mtsql.engines.verl.main_ppo import agent_loop_yaml
    from mtsql.engines.verl.reward import config_section

    cfg = load_config(CONFIG, ["env.error_hint=true"])
    (entry,) = yaml.safe_load(agent_loop_yaml(cfg, tmp_path))
    assert config_section(EnvConfig, entry["env"], source="test", prefix="env") == cfg.env
    assert cfg.env.error_hint
