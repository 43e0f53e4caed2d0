"""Sample and evaluate stages generating through real vLLM servers (tiny Qwen3, float32): the same
trajectories, token ids, masks and metrics as the hf backend; the engine in the fingerprint; no
server left once a stage is done or interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from mtsql.app.config import load_config
from mtsql.app.runner import run_stage
from mtsql.base.files import read_jsonl
from mtsql.engines.backends.vllm import UNVERIFIED
from mtsql.engines.backends.vllm_server import SERVED_NAME, signal_group

from ..held import ctrl_c_reaches_it, held_command, wait_for

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"


def cfg_for(tmp_path, tiny_qwen3, vllm_python, *overrides):
    """The tiny profile on the tiny Qwen3, in float32 on every CPU: the numerics in which vLLM gives hf's
    ids."""
    return load_config(
        TINY,
        [
            f"runs_dir={tmp_path / 'runs'}",
            f"model.name={tiny_qwen3}",
            "data.eval_limit=2",
            "model.dtype=float32",
            "data.train_limit=2",
            "env.max_messages=2",
            "sample.max_new_tokens=24",
            f"sample.vllm.python={vllm_python}",
            "sample.vllm.kv_cache_gib=1",
            *overrides,
        ],
    )


def by_key(artifact, dataset: str) -> dict[str, dict]:
    return {row["key"]: row for row in read_jsonl(artifact.path / dataset / "trajectories.jsonl")}


@pytest.fixture
def started(monkeypatch):
    """The process groups of the vLLM servers started during the test."""
    from mtsql.engines.backends.vllm_server import ManagedServer

    groups, real_start = [], ManagedServer.start

    def start(server, *args, **kwargs):
        try:
            return real_start(server, *args, **kwargs)
        finally:
            groups.append(server.process.pid if server.process else None)

    monkeypatch.setattr(ManagedServer, "start", start)
    return groups


def alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


def test_evaluate_through_a_managed_server_gives_the_hf_trajectories(
    tmp_path, tiny_qwen3, vllm_python, started
):
    served = run_stage(
        "evaluate", cfg_for(tmp_path, tiny_qwen3, vllm_python, "sample.backend=vllm"), label="e-vllm"
    )
    assert len(started) == 1 and not alive(started[0]), "the stage's server is stopped when the stage ends"
    local = run_stage(
        "evaluate", cfg_for(tmp_path, tiny_qwen3, vllm_python, "sample.backend=hf"), label="e-hf"
    )
    assert served.fingerprint != local.fingerprint
    engine = yaml.safe_load((served.path / "config.yaml").read_text())["engine"]
    assert (
        engine["engine"] == "vllm-server"
        and engine["dtype"] == "float32"
        and engine["version"].startswith("vllm")
    )
    assert "engine" not in yaml.safe_load((local.path / "config.yaml").read_text())
    assert "Application startup complete" in (served.path / "vllm-server.log").read_text()
    for dataset in ("cosql", "sparc"):
        a, b = by_key(served, dataset), by_key(local, dataset)
        assert a.keys() == b.keys() and a
        for key in a:
            for field in ("prompt_ids", "response_ids", "response_mask", "final_sql", "execution", "exact"):
                assert a[key][field] == b[key][field], (key, field)
    assert without_timings(served.metrics["datasets"]) == without_timings(local.metrics["datasets"])


def without_timings(tree):
    """Metrics less the seconds they took (the engines differ in speed, not in what they produce)."""
    if isinstance(tree, dict):
        return {key: without_timings(value) for key, value in tree.items() if key != "wall_s"}
    return tree


def test_sample_through_a_user_run_server_records_that_it_cannot_be_verified(
    tmp_path, tiny_qwen3, vllm_python, tiny_server
):
    cfg = cfg_for(
        tmp_path,
        tiny_qwen3,
        vllm_python,
        "sample.backend=vllm",
        "sample.policy=model",
        "sample.n=2",
        f"sample.vllm.base_url={tiny_server.base_url}",
        f"sample.vllm.model={SERVED_NAME}",
    )
    sampled = run_stage("sample", cfg, label="sample-r1")
    engine = yaml.safe_load((sampled.path / "config.yaml").read_text())["engine"]
    assert engine == {
        "engine": "vllm-server",
        "base_url": tiny_server.base_url,
        "served_model": SERVED_NAME,
        "note": UNVERIFIED,
    }
    rows = read_jsonl(sampled.path / "trajectories.jsonl")
    assert rows and len(rows) == 2 * len({row["uid"] for row in rows})
    for row in rows:
        assert len(row["response_ids"]) == len(row["response_mask"]) and 1 in row["response_mask"]
        assert row["prompt_ids"] and row["generated_tokens"] == sum(row["response_mask"])
    assert not (sampled.path / "vllm-server.log").exists()  # nothing started for a user-run server


def test_an_interrupted_evaluation_stops_its_server(tmp_path, tiny_qwen3, vllm_python):
    """Ctrl-C while a request is with the server (the stage is held right after sending its first one, so
    the evaluation cannot end first): exit 130, no server left, the partial folder kept."""
    marker = tmp_path / "sent"
    args = held_command(
        marker,
        "mtsql.engines.backends.vllm:VLLMBackend.submit",
        "evaluate",
        "--config",
        str(TINY),
        "--model",
        "base",
        f"runs_dir={tmp_path / 'runs'}",
        f"model.name={tiny_qwen3}",
        "data.eval_limit=16",
        "sample.max_new_tokens=96",
        f"sample.vllm.python={vllm_python}",
        "sample.vllm.kv_cache_gib=1",
    )
    child = subprocess.Popen(
        args,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=ctrl_c_reaches_it,
    )
    pgid = None
    for line in child.stderr:
        if "starting (pid" in line:
            pgid = int(line.split("(pid ")[1].split(",")[0])
        if "ready after" in line:
            break
    assert pgid is not None, "the stage did not start a vLLM server"
    wait_for(marker, child)
    child.send_signal(signal.SIGINT)
    rest = child.stderr.read()
    assert child.wait(60) == 130, rest
    assert not alive(pgid), "the vLLM server outlived the interrupted stage"
    assert list((tmp_path / "runs").rglob("*.partial")), "the interrupted stage is left to resume"


def test_local_rl_rolls_out_with_vllm_on_each_steps_weights(
    tmp_path, tiny_qwen3, vllm_python, monkeypatch, started
):
    """rl.local.rollout_backend: vllm: step 2 samples from a server restarted on step 1's updated weights."""
    from mtsql.app.runner import view_for
    from mtsql.core.data.records import read_turns
    from mtsql.engines.backends.vllm import VLLMBackend
    from mtsql.engines.local_grpo.trainer import train_curriculum_stage

    served = []
    real_reload = VLLMBackend.reload

    def reload(backend, folder):
        served.append(sorted(p.name for p in Path(folder).iterdir()))
        real_reload(backend, folder)

    monkeypatch.setattr(VLLMBackend, "reload", reload)
    cfg = cfg_for(
        tmp_path,
        tiny_qwen3,
        vllm_python,
        "rl.local.rollout_backend=vllm",
        "rl.steps_per_stage=2",
        "rl.n=2",
        "rl.batch_size=2",
        "rl.mini_batch_size=2",
        "rl.local.trainable_layers=1",
        "rl.max_message_tokens=8",
    )
    curriculum = run_stage("curriculum", cfg)
    turns = read_turns(curriculum.path / "stage-1.jsonl") or read_turns(curriculum.path / "stage-2.jsonl")
    out = tmp_path / "rl"
    metrics = train_curriculum_stage(
        view_for("rl", cfg),
        turns,
        base_model=str(tiny_qwen3),
        out_dir=out,
        metrics_path=out / "metrics.jsonl",
    )
    assert len(started) == 2 and not any(map(alive, started)), (
        "each server is stopped: at the restart, at the end"
    )
    assert metrics.steps == 2 and len(read_jsonl(out / "metrics.jsonl")) == 2
    assert len(served) == 1 and "model.safetensors" in served[0], "one restart, on the weights after step 1"
    assert (out / "model" / "model.safetensors").exists() and not (out / "rollout-weights").exists()
    assert "Application startup complete" in (out / "vllm-server.log").read_text()
