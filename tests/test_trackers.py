"""The trackers module: what is logged is what TensorBoard's and MLflow's own readers read back."""

from __future__ import annotations

import pytest

from mtsql.app.config import TrackersConfig, load_config
from mtsql.base.errors import UsageError
from mtsql.base.trackers import Trackers, flat

from .tracker_files import mlflow_run, mlflow_runs, tensorboard_params, tensorboard_scalars


def stage_trackers(tmp_path, **on) -> Trackers:
    return Trackers.for_folder(
        TrackersConfig(**on), run="demo", folder=tmp_path / "demo" / "rl-c1" / "0123456789ab.partial"
    )


def test_off_by_default_logs_nowhere_and_imports_nothing(tmp_path):
    trackers = stage_trackers(tmp_path)
    with trackers:
        trackers.log_params({"config": {"rl": {"lr": 1e-6}}})
        trackers.log_metrics(1, {"rl/reward_mean": 0.5})
    assert not trackers and trackers.names == () and trackers.env() == {}
    assert not (tmp_path / "demo" / "trackers").exists()
    assert not Trackers.off()


def test_tensorboard_and_mlflow_at_once_read_back(tmp_path):
    trackers = stage_trackers(tmp_path, tensorboard=True, mlflow=True)
    with trackers:
        trackers.log_params(
            {"config": {"rl": {"lr": 1e-6, "engine": "local"}}, "fingerprint": "0123456789abcdef"}
        )
        trackers.log_metrics(1, {"rl/reward_mean": 0.25, "rl/kl": 0.0, "rl/pg_loss": None, "note": "text"})
        trackers.log_metrics(2, {"rl/reward_mean": 0.75, "rl/kl": 0.125, "rl/clipfrac": float("nan")})
        env = trackers.env()
    assert trackers.last_step == 2
    folder = tmp_path / "demo" / "trackers" / "tensorboard" / "demo" / "rl-c1" / "0123456789ab"
    scalars = tensorboard_scalars(folder)
    assert scalars == {"rl/reward_mean": [(1, 0.25), (2, 0.75)], "rl/kl": [(1, 0.0), (2, 0.125)]}
    assert tensorboard_params(folder)["config.rl.engine"] == "local"
    uri = f"file:{(tmp_path / 'demo' / 'trackers' / 'mlruns').resolve()}"
    run = mlflow_run(uri, "demo/rl-c1")
    assert run.status == "FINISHED" and run.metrics == scalars
    assert run.params["config.rl.lr"] == "1e-06" and run.params["fingerprint"] == "0123456789abcdef"
    assert run.tags["mtsql.run"] == "demo" and run.tags["mtsql.fingerprint"] == "0123456789ab"
    # what an engine's own loggers read, in another process: the same folder, the same MLflow run
    assert env["TENSORBOARD_DIR"] == env["TENSORBOARD_LOGGING_DIR"] == str(folder)
    assert env["MLFLOW_TRACKING_URI"] == uri and env["MLFLOW_ALLOW_FILE_STORE"] == "true"
    assert env["MLFLOW_RUN_ID"] and "WANDB_MODE" not in env


def test_a_failed_stage_marks_its_mlflow_run_failed(tmp_path):
    with (
        pytest.raises(RuntimeError),
        stage_trackers(tmp_path, mlflow=True, dir=str(tmp_path / "t")) as trackers,
    ):
        trackers.log_metrics(1, {"rl/reward_mean": 0.5})
        raise RuntimeError("the stage failed")
    runs = mlflow_runs(f"file:{(tmp_path / 't' / 'mlruns').resolve()}")
    assert runs["demo/rl-c1"].status == "FAILED" and runs["demo/rl-c1"].metrics == {
        "rl/reward_mean": [(1, 0.5)]
    }


def test_mlflow_logs_to_a_file_store_only(tmp_path):
    with pytest.raises(UsageError, match="trackers.mlflow_uri=http://mlflow:5000: give a file: URI"):
        stage_trackers(tmp_path, mlflow=True, mlflow_uri="http://mlflow:5000")


def test_one_setting_turns_each_tracker_on_and_the_old_loggers_say_where_they_went():
    cfg = load_config(None, ["trackers.tensorboard=true", "trackers.mlflow=true"])
    assert (cfg.trackers.tensorboard, cfg.trackers.wandb, cfg.trackers.mlflow) == (True, False, True)
    for old in ("sft.logger", "rl.verl.logger"):
        with pytest.raises(UsageError, match=f"unknown key '{old}'; moved: trackers.tensorboard"):
            load_config(None, [f"{old}=tensorboard"])


def test_flat_names_nested_settings_by_dotted_keys():
    assert flat({"rl": {"lr": 1e-6, "verl": {"extra": []}}, "seed": 0, "empty": {}}) == {
        "rl.lr": 1e-6,
        "rl.verl.extra": [],
        "seed": 0,
        "empty": {},
    }


def test_wandb_runs_offline_beside_the_others(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    trackers = stage_trackers(tmp_path, wandb=True, tensorboard=True)
    with trackers:
        trackers.log_params({"config": {"rl": {"lr": 1e-6}}})
        trackers.log_metrics(1, {"rl/reward_mean": 0.25})
        trackers.log_metrics(2, {"rl/reward_mean": 0.75})
    assert trackers.env()["WANDB_MODE"] == "offline"
    import wandb

    wandb.teardown()  # the run's records reach its file when W&B's service stops (at exit in mtsql)
    runs = list((tmp_path / "demo" / "trackers" / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 1, "one offline run, nothing synced"
    # wandb 0.31 ships no reader of its run file: its history records hold the keys and values as written
    written = runs[0].read_bytes()
    assert b"rl/reward_mean" in written and b"0.75" in written and b"demo/rl-c1" in written
