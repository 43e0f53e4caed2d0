"""Stages on the dashboards: what the runner, the evaluate stage and the local GRPO engine log to
TensorBoard and MLflow, read back with their own readers and compared with the artifacts' files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.app.config import TrackersConfig, load_config
from mtsql.app.runner import run_stage, view_for
from mtsql.base.trackers import Trackers
from mtsql.core.data import train_pool

from ..inprocess import mtsql_in_process
from ..tracker_files import mlflow_run, tensorboard_scalars

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
ON = ("trackers.tensorboard=true", "trackers.mlflow=true")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """The packaged data, a private MTSQL_HOME; returns the run folder of run ``t``."""
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    return tmp_path / "runs" / "t"


def cfg_for(tmp_path, *overrides):
    return load_config(TINY, [f"runs_dir={tmp_path / 'runs'}", "run=t", *overrides])


def approx_curve(values: dict[str, float], step: int) -> dict:
    """``values`` as one-point curves at ``step``, to the float32 precision TensorBoard stores."""
    return {key: [(step, pytest.approx(value, rel=1e-6))] for key, value in values.items()}


def test_a_stage_logs_its_config_fingerprints_and_metrics_and_trackers_rerun_nothing(tmp_path, home):
    gold = ("sample.policy=gold", "data.train_limit=2")
    quiet = run_stage("sample", cfg_for(tmp_path, *gold))
    assert not (home / "trackers").exists()  # off by default
    assert (
        run_stage("sample", cfg_for(tmp_path, *gold, *ON)).fingerprint == quiet.fingerprint
    )  # served from the store
    assert not (home / "trackers").exists()  # a cached stage runs nothing, logs nothing

    done = run_stage("sample", cfg_for(tmp_path, *gold, *ON), force=True)
    metrics = json.loads((done.path / "metrics.json").read_text())
    expected = {
        f"sample/{key}": float(value)
        for key, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    assert expected["sample/count"] > 0 and expected["sample/ex"] == 1.0  # the gold policy answers every turn
    scalars = tensorboard_scalars(home / "trackers" / "tensorboard" / "t" / "sample" / done.fingerprint[:12])
    assert scalars == approx_curve(expected, 0)
    run = mlflow_run(f"file:{home / 'trackers' / 'mlruns'}", "t/sample")
    assert run.status == "FINISHED" and run.metrics == {key: [(0, value)] for key, value in expected.items()}
    assert run.params["fingerprint"] == done.fingerprint and run.params["stage"] == "sample"
    assert run.params["config.sample.policy"] == "gold" and run.params["config.data.train_limit"] == "2"
    assert run.params["config.trackers.mlflow"] == "True"


def test_an_mlflow_server_is_refused_in_one_line_and_nothing_is_written(tmp_path, home):
    ran = mtsql_in_process(
        [
            "sample",
            "--config",
            str(TINY),
            f"runs_dir={tmp_path / 'runs'}",
            "run=t",
            "--policy",
            "gold",
            "data.train_limit=2",
            "trackers.mlflow=true",
            "trackers.mlflow_uri=http://mlflow.example:5000",
        ],
        cwd=tmp_path,
        env={"MTSQL_HOME": str(tmp_path / "home"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "error: trackers.mlflow_uri=http://mlflow.example:5000: give a file: URI (a folder); "
        "mtsql logs to no MLflow server"
    ]
    assert not (tmp_path / "runs").exists()


def test_an_evaluation_logs_each_datasets_headline(tmp_path, home, tiny_qwen3):
    cfg = cfg_for(
        tmp_path,
        f"model.name={tiny_qwen3}",
        "sample.backend=hf",
        "model.dtype=float32",
        "data.eval_limit=1",
        "env.max_messages=2",
        "sample.max_new_tokens=16",
        *ON,
    )
    done = run_stage("evaluate", cfg)
    blocks = json.loads((done.path / "metrics.json").read_text())["datasets"]
    assert set(blocks) == {"cosql", "sparc"}
    expected = {}
    for name, block in blocks.items():
        for key in ("turns", "ex", "em", "interaction_ex", "interaction_em"):
            expected[f"eval/{name}/{key}"] = float(block[key])
        expected[f"eval/{name}/protocol_valid"] = float(block["protocol"]["protocol_valid"])
    assert expected["eval/cosql/turns"] > 0
    scalars = tensorboard_scalars(
        home / "trackers" / "tensorboard" / "t" / done.label / done.fingerprint[:12]
    )
    assert {key: curve for key, curve in scalars.items() if key.startswith("eval/")} == approx_curve(
        expected, 0
    )
    run = mlflow_run(f"file:{home / 'trackers' / 'mlruns'}", f"t/{done.label}")
    assert {key: curve for key, curve in run.metrics.items() if key.startswith("eval/")} == {
        key: [(0, value)] for key, value in expected.items()
    }
    assert run.params["fingerprint"] == done.fingerprint


def test_the_local_grpo_engine_logs_every_step_under_the_shared_names(tmp_path, home, tiny_qwen3):
    from mtsql.engines.local_grpo.engine import train_curriculum_stage

    cfg = view_for(
        "rl",
        cfg_for(
            tmp_path,
            f"model.name={tiny_qwen3}",
            "model.dtype=float32",
            "rl.n=2",
            "rl.batch_size=1",
            "rl.mini_batch_size=1",
            "rl.steps_per_stage=2",
            "rl.local.trainable_layers=0",
            "env.max_messages=2",
            "rl.max_message_tokens=16",
            "sample.max_new_tokens=16",
            "data.train_limit=1",
        ),
    )
    turns = train_pool(cfg.data, cfg.data_root)[:2]
    trackers = Trackers.for_folder(
        TrackersConfig(tensorboard=True, mlflow=True), run="t", folder=home / "rl-c1" / "0123456789ab.partial"
    )
    with trackers:
        train_curriculum_stage(
            cfg,
            turns,
            base_model=str(tiny_qwen3),
            out_dir=tmp_path / "out",
            metrics_path=tmp_path / "metrics.jsonl",
            stage=1,
            trackers=trackers,
        )
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    scalars = tensorboard_scalars(trackers.tensorboard_dir)
    run = mlflow_run(trackers.mlflow_uri, "t/rl-c1")
    for ours in (
        "reward_mean",
        "reward_std",
        "kl",
        "grad_norm",
        "clipfrac",
        "pg_loss",
        "response_length",
        "protocol_valid",
        "groups_with_signal",
    ):
        curve = [(line["step"], float(line[ours])) for line in lines]
        assert run.metrics[f"rl/{ours}"] == curve, ours
        assert scalars[f"rl/{ours}"] == [(step, pytest.approx(value, rel=1e-6)) for step, value in curve], (
            ours
        )
