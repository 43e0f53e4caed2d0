"""verl's ``main_ppo`` trains on the CPUs through ``mtsql rl --curriculum`` (.venv-verl, the CPU platform).

One stage of the tiny Qwen3 on fixture turns: killed while Ray and vLLM start (nothing of it may be
left), resumed, trained with rewards that differ within each group (``verl_spread_reward``), merged,
scored by ``mtsql evaluate --model rl`` and reported. A second run is interrupted (Ctrl-C) beside a Ray
cluster already up on this machine, which must stay up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from mtsql.engines.verl.cleanup import TAG, stop_tagged

from ..held import ctrl_c_reaches_it
from ..waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
SPREAD_REWARD = Path(__file__).with_name("verl_spread_reward.py")
SETTINGS = (
    "model.name=tiny-qwen3",
    "data.train_limit=3",
    "curriculum.stages=[[easy,medium,hard,extra]]",
    "rl.batch_size=2",
    "rl.mini_batch_size=2",
    "rl.n=2",
    "rl.local.trainable_layers=0",
    "rl.max_prompt_len=2048",
    "rl.max_response_len=128",
    "rl.max_message_tokens=32",
    "rl.verl.extra_override=true",
    f"rl.verl.extra=[reward.custom_reward_function.path={SPREAD_REWARD}]",
)
START_S = 300.0  # Ray and vLLM up on a loaded 2-core machine
RUN_S = 480.0

pytestmark = pytest.mark.timeout(900)


def mtsql(runs: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200"}
    env.pop("MTSQL_DATA", None)  # the fixture turns
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mtsql",
            *args,
            "--config",
            str(TINY),
            f"runs_dir={runs}",
            "run=verl",
            *SETTINGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
        preexec_fn=ctrl_c_reaches_it,
    )


def run_processes(runs: Path) -> list[psutil.Process]:
    """The live processes of the verl runs under ``runs`` (tagged by the launcher)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(TAG, "").startswith(str(runs)):
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def wait_for(what, timeout: float, message: str):
    return wait_until(what, timeout, message, every=0.5)


def names(processes: list[psutil.Process]) -> set[str]:
    """Each process's name and the program it runs (``raylet``, ``gcs_server``, ``VLLM::EngineCore``, ...)."""
    out = set()
    for process in processes:
        try:
            out.add(f"{process.name()} {' '.join(process.cmdline()[:1])}")
        except psutil.Error:
            continue
    return out


def has(runs: Path, part: str):
    return lambda: [p for p in run_processes(runs) if any(part in name for name in names([p]))]


def finish(proc: subprocess.Popen, timeout: float = RUN_S) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_a_killed_verl_stage_resumes_trains_merges_and_is_scored(verl_python, tiny_qwen3, tmp_path):
    from safetensors.torch import load_file

    runs = tmp_path / "runs"
    first = mtsql(runs, "rl", "--curriculum", "--engine", "verl")
    wait_for(has(runs, "raylet"), START_S, "no Ray started")
    first.send_signal(signal.SIGKILL)  # mtsql itself: nothing of its stage may outlive it
    first.communicate()
    wait_for(lambda: not run_processes(runs) or None, 60, f"left after a kill: {names(run_processes(runs))}")

    code, err = finish(mtsql(runs, "rl", "--curriculum", "--engine", "verl"))
    assert code == 0 and "Traceback" not in err, err[-3000:]
    stage = runs / "verl" / "rl-c1" / "latest"
    curve = [json.loads(line) for line in (stage / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in curve] == [1]
    verl = curve[0]["verl"]
    assert verl["actor/grad_norm"] > 0 and curve[0]["grad_norm"] == verl["actor/grad_norm"]
    assert verl["training/rollout_probs_diff_max"] < 1e-3  # the rollout engine got the actor's weights
    assert curve[0]["groups_with_signal"] == 1.0, (
        "read from verl's own sample dump: every group's rewards differ"
    )
    result = json.loads((stage / "manifest.json").read_text())["metrics"]
    assert (result["engine"], result["steps"], result["steps_without_signal"]) == ("verl", 1, 0)
    trained, base = (
        load_file(stage / "model" / "model.safetensors"),
        load_file(tiny_qwen3 / "model.safetensors"),
    )
    assert max((trained[name] - base[name]).abs().max().item() for name in base) > 0
    assert not run_processes(runs)

    code, err = finish(mtsql(runs, "evaluate", "--model", "rl", "sample.backend=hf", "data.eval_limit=1"))
    assert code == 0, err[-3000:]
    assert list((runs / "verl").glob("eval-rl*/latest/*/summary.json"))
    code, err = finish(mtsql(runs, "report"), timeout=120)
    assert code == 0, err[-3000:]
    assert "| rl-c1 | verl | 1 |" in (runs / "verl" / "report" / "report.md").read_text()


def test_ctrl_c_stops_verl_beside_a_ray_cluster_already_up(verl_python, tiny_qwen3, tmp_path):
    runs = tmp_path / "runs"
    ray = Path(verl_python).with_name("ray")
    foreign, ray_dir = (
        f"foreign-ray:{tmp_path}",
        tempfile.mkdtemp(prefix="ray", dir="/tmp"),
    )  # short: socket paths
    started = subprocess.run(
        [
            str(ray),
            "start",
            "--head",
            "--port=6379",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={ray_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, TAG: foreign},
    )
    try:
        proc = mtsql(runs, "rl", "--curriculum", "--engine", "verl")
        wait_for(has(runs, "VLLM"), START_S, "no vLLM engine started")
        proc.send_signal(signal.SIGINT)
        code, err = finish(proc, timeout=120)
        assert code != 0
        assert "verl stage-1 train interrupted: no Ray or vLLM process of it is left" in err, err[-2000:]
        assert not run_processes(runs), names(run_processes(runs))
        if started.returncode == 0:  # else port 6379 was taken by another cluster: that one must be up still
            assert any(
                "gcs_server" in name
                for name in names(
                    [p for p in psutil.process_iter() if p.pid != os.getpid() and _tagged(p, foreign)]
                )
            )
    finally:
        stop_tagged(foreign)
        shutil.rmtree(ray_dir, ignore_errors=True)


def _tagged(process: psutil.Process, run: str) -> bool:
    try:
        return process.environ().get(TAG) == run
    except psutil.Error:
        return False


def test_verl_without_its_environment_says_what_to_run(tmp_path, monkeypatch):
    from mtsql.app.config import load_config
    from mtsql.base.errors import UsageError
    from mtsql.engines.verl import main_ppo

    cfg = load_config(TINY, ["rl.local.trainable_layers=0", "rl.batch_size=1"])
    monkeypatch.setattr(main_ppo.sys, "prefix", str(tmp_path / ".venv"))
    plan = main_ppo.build_stage_plan(
        cfg,
        [main_ppo.CurriculumParquet("stage-1", tmp_path / "s.parquet", 4)],
        model_path="m",
        out_dir=tmp_path,
        data_root=tmp_path,
        cpu=True,
    )
    with pytest.raises(UsageError, match=r"\.venv-verl/bin/python does not exist: run `make setup`"):
        main_ppo.run_stage_plan(plan, tmp_path / "log.txt", steps=1)


def test_the_pinned_versions_are_the_installed_ones(verl_python):
    probe = "from mtsql.engines.verl import cpu_platform as c\nfor name in c.PINNED: c.check_version(name)\n"
    done = subprocess.run(
        [str(verl_python), "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_changed_version_under_a_patch_fails_loudly(monkeypatch):
    from mtsql.engines.verl import cpu_platform

    monkeypatch.setitem(cpu_platform.PINNED, "verl", "0.0.1")
    with pytest.raises(cpu_platform.VersionMismatch, match="written for verl==0.0.1"):
        cpu_platform.check_version("verl")


def test_a_packed_layer_is_not_dispatched_again():
    """A bucket's weight reload re-runs vLLM's CPU linear dispatch on layers it already packed (their weight
    an empty 1-D tensor): the patch leaves those alone and passes every other layer on."""
    import torch

    from mtsql.engines.verl.cpu_platform import keep_packed

    seen = []
    dispatch = keep_packed(lambda layer, remove_weight: seen.append((layer, remove_weight)))
    packed = torch.nn.Linear(4, 2)
    packed.cpu_linear = torch.nn.functional.linear
    packed.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    fresh = torch.nn.Linear(4, 2)  # a layer the bucket reloaded: its 2-D weight is dispatched
    bare = torch.nn.Linear(4, 2)
    bare.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)  # never dispatched: passed on
    for layer in (packed, fresh, bare):
        dispatch(layer, True)
    assert seen == [(fresh, True), (bare, True)]
    assert dispatch.mtsql_cpu_patch


def test_cpu_platform_does_nothing_where_cuda_is_visible(monkeypatch):
    import torch

    from mtsql.engines.verl import cpu_platform

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cpu_platform.install() is False
