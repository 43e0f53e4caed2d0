"""`--dry-run` shows the whole plan, engine commands included, from an empty run folder."""

import os
import re
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config

from .inprocess import mtsql_in_process

REPO = Path(__file__).resolve().parents[1]
PAPER = ["paper-qwen3-4b", "paper-qwen3-1.7b"]
ON_THE_FIXTURE = ("data.require_full=false",)  # the paper profiles refuse the fixture; a plan is shown anyway


def mtsql(*args):
    return mtsql_in_process(
        args,
        env={
            "COLUMNS": "100",
            "PATH": "/usr/bin:/bin",
            **{k: v for k, v in os.environ.items() if k == "MTSQL_DATA"},
        },
    )


@pytest.mark.parametrize("profile", PAPER)
def test_the_paper_pipeline_plans_every_round_and_curriculum_stage(profile, tmp_path, capsys):
    config = REPO / "configs" / "profiles" / f"{profile}.yaml"
    pipeline.run_pipeline(
        REPO / "pipelines" / "paper.yaml", config, [f"runs_dir={tmp_path}", *ON_THE_FIXTURE], dry_run=True
    )
    err = capsys.readouterr().err
    cfg = load_config(config)
    for k in range(1, cfg.sft.rounds + 1):
        block = err.split(f"  sft-r{k} ")[1]
        assert "llamafactory-cli train" in block.split("  sample-")[0], f"round {k}"
        assert f"<from reject-r{k}>" in block or k == 1 or "sft-r" in block
    assert err.count("llamafactory-cli train") == cfg.sft.rounds
    assert err.count("-m verl.trainer.main_ppo") == len(cfg.curriculum.stages) == 3
    assert err.count("verl.model_merger merge") == 3
    assert "'actor_rollout_ref.model.path='\"'\"'<from sft-r3>/model" in err, (
        "RL starts from the last SFT round"
    )
    assert re.search(r"rl-c2 .*will run \(after curriculum, rl-c1\)", err)
    assert "eval-rl-predicted-memory" in err and not list(tmp_path.rglob("manifest.json"))


def test_stage_commands_plan_without_a_traceback(tmp_path):
    config = str(REPO / "configs" / "profiles" / "paper-qwen3-4b.yaml")
    result = mtsql("sft-iterate", "--config", config, "--dry-run", f"runs_dir={tmp_path}", *ON_THE_FIXTURE)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("llamafactory-cli train") == 3
    result = mtsql(
        "rl",
        "--curriculum",
        "--engine",
        "verl",
        "--config",
        config,
        "--dry-run",
        f"runs_dir={tmp_path}",
        *ON_THE_FIXTURE,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("-m verl.trainer.main_ppo") == 3 and "curriculum " in result.stderr


def test_a_dry_run_after_a_real_curriculum_shows_its_sizes(tmp_path):
    cfg = load_config(
        REPO / "configs" / "profiles" / "tiny.yaml", [f"runs_dir={tmp_path}", "data.train_limit=3"]
    )
    done = pipeline.curriculum(cfg)
    result = mtsql(
        "rl",
        "--curriculum",
        "--engine",
        "verl",
        "--config",
        str(REPO / "configs/profiles/tiny.yaml"),
        "--dry-run",
        f"runs_dir={tmp_path}",
        "data.train_limit=3",
        "rl.batch_size=1",
    )
    assert result.returncode == 0, result.stderr
    assert "curriculum         " in result.stderr and "cached" in result.stderr
    first = done.metrics["table"]["stage 1"]["total"]
    assert f"# curriculum stage 1: {first} items" in result.stderr
    local = mtsql(
        "rl",
        "--curriculum",
        "--config",
        str(REPO / "configs/profiles/tiny.yaml"),
        "--dry-run",
        f"runs_dir={tmp_path}",
        "data.train_limit=3",
    )
    assert local.returncode == 0, local.stderr
    assert (
        f"training the last {cfg.rl.local.trainable_layers} decoder layers of" in local.stderr
        and cfg.rl.local.trainable_layers
    )


def test_a_plan_needs_no_vllm_but_a_run_does(tmp_path):
    """Planning a vLLM run on a machine without vLLM (a GPU run from a laptop) works; running it is one
    line."""
    from mtsql.app.runner import Pending, run_stage
    from mtsql.base.errors import UsageError

    cfg = load_config(
        REPO / "configs" / "profiles" / "tiny.yaml",
        [f"runs_dir={tmp_path}", "sample.backend=vllm", f"sample.vllm.python={tmp_path / 'none'}"],
    )
    assert isinstance(run_stage("evaluate", cfg, label="eval-base", dry_run=True), Pending)
    with pytest.raises(UsageError, match="sample.vllm.python=.*not an executable file"):
        run_stage("evaluate", cfg, label="eval-base")
    assert not list(tmp_path.rglob("*.partial"))
