"""The whole tiny chain with TensorBoard and MLflow on: SFT loss, RL reward per step and each evaluation's
EX read back from the event files and the MLflow store (docs/trackers.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.app import pipeline

from .tracker_files import mlflow_runs, tensorboard_scalars

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
CHAIN = (
    "run=tracked",
    "sample.backend=hf",
    "model.dtype=float32",
    "data.train_limit=2",
    "data.eval_limit=1",
    "sample.max_new_tokens=32",
    "env.max_messages=3",
    "rl.local.trainable_layers=0",
    "rl.max_message_tokens=32",
    "sft.heldout=0",
    "sft.max_steps=2",
    "trackers.tensorboard=true",
    "trackers.mlflow=true",
)


def latest(run: Path, label: str) -> Path:
    return (run / label / "latest").resolve()


@pytest.mark.slow
def test_the_reproduce_chain_leaves_sft_loss_rl_rewards_and_every_evaluations_ex(
    tmp_path, monkeypatch, tiny_qwen3
):
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    pipeline.run_pipeline(
        REPO / "pipelines" / "reproduce.yaml",
        TINY,
        [f"runs_dir={tmp_path / 'runs'}", f"model.name={tiny_qwen3}", *CHAIN],
    )
    run = tmp_path / "runs" / "tracked"
    boards, store = run / "trackers" / "tensorboard" / "tracked", f"file:{run / 'trackers' / 'mlruns'}"
    runs = mlflow_runs(store)

    def both(label: str) -> tuple[dict, dict]:
        folder = latest(run, label)
        assert (
            runs[f"tracked/{label}"].params["fingerprint"]
            == json.loads((folder / "manifest.json").read_text())["fingerprint"]
        )
        return tensorboard_scalars(boards / label / folder.name), runs[f"tracked/{label}"].metrics

    events, mlflow = both("sft-r1")
    state = json.loads((latest(run, "sft-r1") / "model" / "trainer_state.json").read_text())
    losses = [(entry["step"], entry["loss"]) for entry in state["log_history"] if "loss" in entry]
    assert [step for step, _ in losses] == [1, 2]
    assert mlflow["sft/loss"] == losses
    assert events["sft/loss"] == [(step, pytest.approx(loss, rel=1e-6)) for step, loss in losses]
    assert "train/loss" in events, "LLaMA-Factory's own TensorBoard logger wrote into the stage's folder"

    stages = sorted(folder.name for folder in run.glob("rl-c*"))
    assert stages, "the chain trained at least one curriculum stage"
    for label in stages:
        events, mlflow = both(label)
        lines = [json.loads(line) for line in (latest(run, label) / "metrics.jsonl").read_text().splitlines()]
        assert mlflow["rl/reward_mean"] == [(line["step"], line["reward_mean"]) for line in lines]
        assert [step for step, _ in events["rl/reward_mean"]] == [line["step"] for line in lines]

    for label in ("eval-base", "eval-sft", "eval-rl"):
        events, mlflow = both(label)
        blocks = json.loads((latest(run, label) / "metrics.json").read_text())["datasets"]
        for name, block in blocks.items():
            assert mlflow[f"eval/{name}/ex"] == [(0, block["ex"])]
            assert events[f"eval/{name}/ex"] == [(0, pytest.approx(block["ex"], rel=1e-6))]
