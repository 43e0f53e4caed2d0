"""verl with more than one worker on the CPUs: ``rl.verl.n_gpus_per_node`` worker processes (each an FSDP2
rank over gloo with a vLLM engine of its own) against one worker of the same global batch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtsql.app.config import load_config
from mtsql.engines.verl.main_ppo import CurriculumParquet, build_stage_plan

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"


def overrides(tmp_path: Path, *settings: str) -> dict[str, str]:
    cfg = load_config(TINY, ["rl.batch_size=2", *settings])
    plan = build_stage_plan(
        cfg,
        [CurriculumParquet("stage-1", tmp_path / "s.parquet", 4)],
        model_path="m",
        out_dir=tmp_path,
        data_root=tmp_path,
        cpu=True,
        python="python",
    )
    return dict(item.split("=", 1) for item in plan[0].argv[3:])


def test_each_cpu_worker_is_a_gpu_of_the_private_ray_cluster(tmp_path):
    """verl places one worker per GPU bundle: on the CPUs ``rl.verl.n_gpus_per_node`` workers, and the private
    Ray cluster says it has that many GPUs (else the placement group never schedules)."""
    for workers in (1, 2):
        pairs = overrides(tmp_path, f"rl.verl.n_gpus_per_node={workers}")
        assert (pairs["trainer.n_gpus_per_node"], pairs["+ray_kwargs.ray_init.num_gpus"]) == (
            str(workers),
        ) * 2
        assert pairs["trainer.nnodes"] == "1"


# ---------------------------------------------------------------------------------------------
# Real main_ppo runs: two CPU workers against one, and the trackers read back

GOLD_REWARD = Path(__file__).with_name("verl_gold_reward.py")
LR = 0.1  # plain SGD: a weight's change is lr x its gradient, so the weights compare the gradients themselves
# One step of 2 prompts x 2 samples. The rollouts are greedy (top_k 1: vLLM's sampling seeds differ with the
# number of engines), so every sample of a prompt is alike and GRPO's group advantages would all be 0:
# REINFORCE++ whitens the rewards over the batch instead (the gold reward differs between prompts).
SETTINGS = (
    "model.name=tiny-qwen3",
    "data.train_limit=3",
    "curriculum.stages=[[easy,medium,hard,extra]]",
    "rl.batch_size=2",
    "rl.mini_batch_size=2",
    "rl.n=2",
    "rl.micro_batch_size_per_gpu=1",
    "rl.max_prompt_len=2048",
    "rl.max_response_len=128",
    "rl.max_message_tokens=32",
    f"rl.lr={LR}",
    "rl.verl.extra_override=true",
    "rl.verl.extra=["
    + ",".join(
        (
            f"reward.custom_reward_function.path={GOLD_REWARD}",
            "actor_rollout_ref.rollout.top_k=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "actor_rollout_ref.actor.optim.optimizer=SGD",
            "actor_rollout_ref.actor.optim.weight_decay=0",
        )
    )
    + "]",
)
RUN_S = 1200.0


def train_rl(runs: Path, workers: int, *more: str) -> Path:
    """``mtsql rl --curriculum --engine verl`` with ``workers`` CPU workers; the stage's artifact folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200"}
    env.pop("MTSQL_DATA", None)  # the fixture turns
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mtsql",
            "rl",
            "--curriculum",
            "--engine",
            "verl",
            "--config",
            str(TINY),
            f"runs_dir={runs}",
            "run=verl",
            *SETTINGS,
            f"rl.verl.n_gpus_per_node={workers}",
            *more,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=RUN_S,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return (runs / "verl" / "rl-c1" / "latest").resolve()


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_S + 120)
def test_two_cpu_workers_update_as_one_worker_of_the_same_global_batch(verl_python, tiny_qwen3, tmp_path):
    """``rl.verl.n_gpus_per_node=2`` (two FSDP2 ranks over gloo, each with a vLLM engine, the batch split
    between them) against one worker: the same rollouts, rewards and advantages, and the same update up to
    float32 summation order.

    Tolerances: the gradient norm to 1e-4 relative, the loss to 1e-5 absolute, each weight tensor's change
    to 1e-3 of its norm. What differs is the order of float32 sums (verl divides each rank's token sum by the
    global token count and gloo adds the ranks' gradients) and the padding of each micro-batch; a rank given
    the other's samples, a loss averaged per rank, or gradients summed instead of averaged changes the update
    by far more. The one-worker run also logs to TensorBoard and MLflow: verl's own step reward and mtsql's
    are read back."""
    from safetensors.torch import load_file

    from ..tracker_files import mlflow_run, tensorboard_scalars

    one = train_rl(tmp_path / "one", 1, "trackers.tensorboard=true", "trackers.mlflow=true")
    two = train_rl(tmp_path / "two", 2)
    steps = {
        name: [json.loads(line) for line in (stage / "metrics.jsonl").read_text().splitlines()]
        for name, stage in (("one", one), ("two", two))
    }
    assert [row["step"] for row in steps["one"]] == [row["step"] for row in steps["two"]] == [1]
    first, second = steps["one"][0]["verl"], steps["two"][0]["verl"]
    for key in (
        "critic/score/mean",
        "critic/advantages/max",
        "critic/advantages/min",
        "response_length/mean",
    ):
        assert first[key] == second[key], (
            key,
            first[key],
            second[key],
        )  # the same greedy rollouts and rewards
    assert first["critic/advantages/max"] > 0 > first["critic/advantages/min"]
    assert math.isclose(first["actor/grad_norm"], second["actor/grad_norm"], rel_tol=1e-4)
    assert first["actor/grad_norm"] > 0
    # the loss is a mean of whitened advantages (x ratio 1), ~0 by construction: to 1e-5 of the advantages'
    # scale
    assert math.isclose(first["actor/pg_loss"], second["actor/pg_loss"], abs_tol=1e-5)

    base = load_file(tiny_qwen3 / "model.safetensors")
    weights = {
        name: load_file(stage / "model" / "model.safetensors") for name, stage in (("one", one), ("two", two))
    }
    assert weights["one"].keys() == weights["two"].keys() == base.keys()
    for key, before in base.items():
        moved = (weights["one"][key] - before).norm().item()
        apart = (weights["one"][key] - weights["two"][key]).norm().item()
        assert apart <= 1e-3 * moved or apart == moved == 0, (key, apart, moved)
    assert any(not weights["one"][key].equal(before) for key, before in base.items())

    trackers = tmp_path / "one" / "verl" / "trackers"
    board = tensorboard_scalars(trackers / "tensorboard" / "verl" / "rl-c1" / one.name)
    logged = mlflow_run(
        f"file:{trackers / 'mlruns'}", "verl/rl-c1"
    ).metrics  # the stage's run, verl's logger in it
    for curves in (board, logged):
        assert curves["critic/score/mean"] == [
            (1, pytest.approx(first["critic/score/mean"]))
        ]  # verl's, as it trains
        assert curves["rl/reward_mean"] == [
            (1, pytest.approx(steps["one"][0]["reward_mean"]))
        ]  # mtsql's, at the end
