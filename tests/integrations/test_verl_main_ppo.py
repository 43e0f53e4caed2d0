"""The verl launch plan: every override checked against verl 0.9.1's own Hydra config, the stage
chain through merged checkpoints, the dry-run script, and the subprocess runner."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from mtsql.app.config import load_config
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.trackers import Trackers
from mtsql.engines.commands import Command
from mtsql.engines.verl.dataset import AGENT_NAME
from mtsql.engines.verl.main_ppo import (
    AGENT_LOOP_TARGET,
    PINNED,
    CurriculumParquet,
    StepWatcher,
    build_stage_plan,
    compose_train_config,
    hydra_value,
    next_metrics_file,
    read_metrics,
    render_plan,
    run_stage_plan,
)

DATA_ROOT = Path("/shared/data")


def plan_for(tmp_path: Path, *overrides: str, stages: int = 2, rows: int = 512) -> list[Command]:
    cfg = load_config(None, ["run=paper", "rl.kl_coef=0.001", "rl.lr=1e-6", *overrides])
    data = [
        CurriculumParquet(f"stage-{k}", tmp_path / "data dir" / f"stage-{k}.parquet", rows)
        for k in range(stages)
    ]
    return build_stage_plan(
        cfg, data, model_path="Qwen/Qwen3-1.7B", out_dir=tmp_path / "rl", data_root=DATA_ROOT, python="python"
    )


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """The first stage's overrides composed with verl's ppo_trainer config and validated like main_ppo."""
    plan = plan_for(tmp_path_factory.mktemp("plan"))
    return plan, compose_train_config(plan[0].argv[3:])


@pytest.mark.verl
def test_every_override_is_a_verl_key_with_the_intended_value(composed):
    plan, config = composed
    train = plan[0]
    assert train.argv[:3] == ("python", "-m", "verl.trainer.main_ppo")
    from omegaconf import OmegaConf

    for item in train.argv[3:]:
        key, value = item.split("=", 1)
        assert (
            OmegaConf.select(config, key.lstrip("+"), throw_on_missing=True) is not None or value == "null"
        ), key
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.algorithm.adv_estimator == "grpo" and not config.algorithm.use_kl_in_reward
    assert (actor.optim.lr, actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (
        1e-6,
        True,
        0.001,
        "low_var_kl",
    )
    assert (actor.loss_agg_mode, actor.entropy_coeff, actor.ppo_mini_batch_size) == ("token-mean", 0, 256)
    assert (rollout.name, rollout.mode, rollout.n, rollout.prompt_length, rollout.response_length) == (
        "vllm",
        "async",
        5,
        4000,
        8000,
    )
    assert rollout.agent.default_agent_loop == AGENT_NAME
    assert rollout.agent.agent_loop_config_path.endswith("rl/agent_loop.yaml")
    assert (
        config.data.train_files.endswith("data dir/stage-0.parquet") and config.data.train_batch_size == 256
    )
    assert (config.trainer.n_gpus_per_node, config.trainer.nnodes, config.trainer.total_training_steps) == (
        4,
        1,
        60,
    )
    assert config.trainer.save_freq == 60 and config.trainer.default_local_dir.endswith("stage-0/checkpoints")
    assert config.trainer.rollout_data_dir.endswith("stage-0/rollouts"), (
        "each step's samples, for the behaviour curves"
    )
    assert config.trainer.logger == ["console", "file"] and config.trainer.experiment_name == "paper-stage-0"
    reward = config.reward.custom_reward_function
    assert (reward.path, reward.name) == ("pkg://mtsql.engines.verl.reward", "compute_score")
    assert reward.reward_kwargs.reward.family == "process" and reward.reward_kwargs.reward.clause_f1 == 0.8
    assert reward.reward_kwargs.sql.timeout_s == 5.0 and reward.reward_kwargs.data_root == str(DATA_ROOT)
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH.endswith(
        "stage-0/verl_metrics.1.jsonl"
    )


@pytest.mark.verl
def test_main_ppo_starts_the_classic_trainer_mtsql_is_built_for(composed, monkeypatch):
    """main_ppo itself, with the composed config: which TaskRunner would it hand to Ray?"""
    import verl.trainer.main_ppo as main_ppo
    from verl.trainer.main_ppo_v0 import TaskRunner

    started = []
    monkeypatch.setattr(
        main_ppo, "run_ppo", lambda config, task_runner_class: started.append(task_runner_class)
    )
    main_ppo.main.__wrapped__(composed[1].copy())
    assert started == [TaskRunner], "trainer.use_v1=true would start TaskRunnerV1, which needs transfer_queue"


@pytest.mark.verl
def test_switches_verl_defaults_would_pick_are_pinned(composed):
    from omegaconf import OmegaConf

    plan, config = composed
    for key, value in PINNED:
        assert f"{key}={hydra_value(value)}" in plan[0].argv
        assert OmegaConf.select(config, key) == value, key
    assert (
        plan[1].argv[plan[1].argv.index("--backend") + 1] == config.actor_rollout_ref.actor.strategy == "fsdp"
    )
    assert not config.trainer.use_v1 and config.reward.reward_manager.name == "naive"


@pytest.mark.verl
def test_rl_extra_is_appended_but_cannot_silently_replace_an_override(tmp_path):
    plan = plan_for(
        tmp_path, "rl.verl.extra=[actor_rollout_ref.actor.optim.weight_decay=0.05, +trainer.wandb_proxy=x]"
    )
    assert plan[0].argv[-2:] == ("actor_rollout_ref.actor.optim.weight_decay=0.05", "+trainer.wandb_proxy=x")
    assert compose_train_config(plan[0].argv[3:]).actor_rollout_ref.actor.optim.weight_decay == 0.05
    with pytest.raises(
        UsageError,
        match=r"rl.verl.extra sets actor_rollout_ref.rollout.n, trainer.use_v1, "
        r".*rl.verl.extra_override: true",
    ):
        plan_for(tmp_path, "rl.verl.extra=[trainer.use_v1=true, actor_rollout_ref.rollout.n=8]")
    with pytest.raises(
        UsageError, match="rl.verl.extra sets reward.custom_reward_function"
    ):  # a whole subtree
        plan_for(tmp_path, "rl.verl.extra=['reward.custom_reward_function={path: x}']")
    overridden = plan_for(
        tmp_path, "rl.verl.extra=[actor_rollout_ref.rollout.n=8]", "rl.verl.extra_override=true"
    )[0].argv
    assert [a for a in overridden if a.startswith("actor_rollout_ref.rollout.n=")] == [
        "actor_rollout_ref.rollout.n=8"
    ]
    with pytest.raises(UsageError, match="'trainer.use_v1' is not a Hydra override"):
        plan_for(tmp_path, "rl.verl.extra=[trainer.use_v1]")


@pytest.mark.verl
def test_trackers_reach_verls_own_loggers_in_the_stages_folder_and_mlflow_run(tmp_path):
    cfg = load_config(
        None, ["run=paper", "trackers.tensorboard=true", "trackers.mlflow=true", "trackers.project=p"]
    )
    trackers = Trackers.for_folder(
        cfg.trackers, run="paper", folder=tmp_path / "paper" / "rl-c1" / "0123456789ab"
    )
    data = [CurriculumParquet("stage-0", tmp_path / "stage-0.parquet", 512)]
    with trackers:  # open, as the runner opens them: verl joins the stage's MLflow run
        plan = build_stage_plan(
            cfg,
            data,
            model_path="m",
            out_dir=tmp_path / "rl",
            data_root=DATA_ROOT,
            python="python",
            trackers=trackers,
        )
        run_id = trackers.env()["MLFLOW_RUN_ID"]
    config = compose_train_config(plan[0].argv[3:])
    assert list(config.trainer.logger) == ["console", "file", "tensorboard", "mlflow"]
    assert config.trainer.project_name == "p"
    env = config.ray_kwargs.ray_init.runtime_env.env_vars  # what every Ray worker's loggers read
    assert env.TENSORBOARD_DIR == str(
        tmp_path / "paper" / "trackers" / "tensorboard" / "paper" / "rl-c1" / "0123456789ab"
    )
    assert env.MLFLOW_TRACKING_URI == trackers.mlflow_uri and env.MLFLOW_RUN_ID == run_id
    assert env.MLFLOW_ALLOW_FILE_STORE == "true"
    off = compose_train_config(plan_for(tmp_path)[0].argv[3:])
    assert (
        list(off.trainer.logger) == ["console", "file"]
        and "MLFLOW_RUN_ID" not in off.ray_kwargs.ray_init.runtime_env.env_vars
    )


@pytest.mark.verl
def test_a_misspelt_or_inconsistent_override_is_rejected_before_launch(composed):
    plan, _ = composed
    with pytest.raises(UsageError, match="adv_estimatr"):
        compose_train_config([*plan[0].argv[3:], "algorithm.adv_estimatr=grpo"])
    with pytest.raises(UsageError, match="verl rejects the training config"):
        compose_train_config([*plan[0].argv[3:], "actor_rollout_ref.actor.ppo_mini_batch_size=512"])


@pytest.mark.verl
def test_the_reward_function_verl_loads_is_mtsql_compute_score(composed):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from mtsql.engines.verl.reward import compute_score

    _, config = composed
    fn = get_custom_reward_fn(config)
    assert fn.args[0] is compute_score
    assert fn.args[1]["reward"]["family"] == "process" and fn.args[1]["data_root"] == str(DATA_ROOT)


def test_stages_chain_through_merged_checkpoints(tmp_path):
    plan = plan_for(tmp_path, stages=3)
    assert [c.name for c in plan] == [
        "stage-0 train",
        "stage-0 merge",
        "stage-1 train",
        "stage-1 merge",
        "stage-2 train",
        "stage-2 merge",
    ]
    rl = tmp_path / "rl"
    for k in range(3):
        train, merge = plan[2 * k], plan[2 * k + 1]
        checkpoint = rl / f"stage-{k}" / "checkpoints" / "global_step_60" / "actor"
        assert train.produces == {
            "checkpoint": checkpoint,
            "metrics": rl / f"stage-{k}" / "verl_metrics.1.jsonl",
        }
        assert merge.argv == (
            "python",
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(checkpoint),
            "--target_dir",
            str(rl / f"stage-{k}" / "merged"),
        )
        model = dict(a.split("=", 1) for a in train.argv[3:])["actor_rollout_ref.model.path"]
        assert model == ("Qwen/Qwen3-1.7B" if k == 0 else str(rl / f"stage-{k - 1}" / "merged"))
        assert "actor_rollout_ref.model.lora_adapter_path" not in dict(
            a.split("=", 1) for a in train.argv[3:]
        )


@pytest.mark.verl
def test_merge_command_is_accepted_by_verls_model_merger(tmp_path, monkeypatch):
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    merge = plan_for(tmp_path)[1]
    monkeypatch.setattr(sys, "argv", ["model_merger", *merge.argv[3:]])
    config = generate_config_from_args(parse_args())
    assert (config.operation, config.backend, config.local_dir, config.target_dir) == (
        "merge",
        "fsdp",
        merge.argv[7],
        merge.argv[9],
    )


@pytest.mark.verl
def test_lora_stages_continue_the_previous_adapter(tmp_path):
    # sglang: verl checks a LoRA rank against the installed vllm, which a CPU machine does not have
    plan = plan_for(tmp_path, "rl.lora_rank=16", "rl.lora_alpha=32", "rl.verl.rollout_name=sglang")
    first, second = (dict(a.split("=", 1) for a in plan[k].argv[3:]) for k in (0, 2))
    assert (first["actor_rollout_ref.model.lora_rank"], first["actor_rollout_ref.model.lora_alpha"]) == (
        "16",
        "32",
    )
    assert "actor_rollout_ref.model.lora_adapter_path" not in first
    merged = tmp_path / "rl" / "stage-0" / "merged"
    assert second["actor_rollout_ref.model.path"] == str(merged)
    assert second["actor_rollout_ref.model.lora_adapter_path"] == str(merged / "lora_adapter")
    assert plan[1].produces["lora_adapter"] == merged / "lora_adapter"
    compose_train_config(plan[2].argv[3:])


def test_agent_loop_yaml_registers_the_loop_with_the_env_settings(tmp_path):
    plan = plan_for(tmp_path, "env.max_messages=6", "sql.timeout_s=2.5", "rl.max_message_tokens=512")
    ((path, text),) = plan[0].files.items()
    assert path == tmp_path / "rl" / "agent_loop.yaml"
    (entry,) = yaml.safe_load(text)
    assert (entry["name"], entry["_target_"]) == (AGENT_NAME, AGENT_LOOP_TARGET)
    assert (
        entry["env"]["max_messages"] == 6
        and entry["sql"]["timeout_s"] == 2.5
        and entry["max_message_tokens"] == 512
    )
    assert entry["data_root"] == str(DATA_ROOT)


def test_dry_run_script_holds_every_file_and_complete_command(tmp_path):
    plan = plan_for(tmp_path)
    script = render_plan(plan)
    assert script.count("-m verl.trainer.main_ppo") == 2 and script.count("-m verl.model_merger merge") == 2
    assert f"cat > {tmp_path / 'rl' / 'agent_loop.yaml'} <<'MTSQL_EOF'\n- name: {AGENT_NAME}" in script
    assert "HYDRA_FULL_ERROR=1 python -m verl.trainer.main_ppo" in script
    train_block = script.split("# stage-0 train")[1].split("# stage-0 merge")[0]
    command = train_block[train_block.index("HYDRA_FULL_ERROR") :].replace("\\\n", " ")
    assert shlex.split(command)[4:] == list(plan[0].argv[3:])  # the shell reads back the exact overrides


def test_multi_node_needs_a_ray_address_and_says_how_to_start_ray(tmp_path):
    with pytest.raises(UsageError, match="rl.verl.ray_address"):
        plan_for(tmp_path, "rl.verl.nnodes=2")
    plan = plan_for(tmp_path, "rl.verl.nnodes=2", "rl.verl.ray_address=10.0.0.1:6379")
    assert plan[0].env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert (
        "ray start --head --port=6379" in plan[0].note and "ray start --address=10.0.0.1:6379" in plan[0].note
    )
    assert "# Ray cluster at 10.0.0.1:6379" in render_plan(plan)


def test_bad_plans_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="fewer than rl.batch_size=256"):
        plan_for(tmp_path, rows=100)
    with pytest.raises(UsageError, match="'rl.verl.rollout_name' must be one of vllm, sglang"):
        plan_for(tmp_path, "rl.verl.rollout_name=hf")


@pytest.mark.parametrize(
    "value, text",
    [
        (True, "true"),
        (None, "null"),
        (3, "3"),
        (1e-6, "1e-06"),
        (["console", "file"], "[console,file]"),
        ("/a/b-c.parquet", "/a/b-c.parquet"),
        ("pkg://x.y", "pkg://x.y"),
        ("null", "'null'"),
        ("1.5", "'1.5'"),
        ("a b,c", "'a b,c'"),
        ("it's", "'it\\'s'"),
    ],
)
def test_hydra_values(value, text):
    assert hydra_value(value) == text


# ---------------------------------------------------------------------------------------------
# Metrics: one file per attempt, merged by step; progress from the console logger


def write_attempt(stage_dir: Path, steps: range, reward: float) -> Path:
    path = next_metrics_file(stage_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"step": k, "data": {"critic/score/mean": reward + k}}) + "\n" for k in steps)
    )
    return path


def test_a_resumed_attempt_appends_its_steps_and_replaces_the_ones_it_redid(tmp_path):
    assert next_metrics_file(tmp_path).name == "verl_metrics.1.jsonl" and read_metrics(tmp_path) == []
    write_attempt(tmp_path, range(1, 4), 0.0)  # steps 1-3; the checkpoint was saved after step 2
    second = write_attempt(tmp_path, range(3, 6), 10.0)
    assert (
        second.name == "verl_metrics.2.jsonl" and next_metrics_file(tmp_path).name == "verl_metrics.3.jsonl"
    )
    with second.open("a") as handle:
        handle.write('{"step": 6, "da')  # cut by a crash
    assert [(r["step"], r["critic/score/mean"]) for r in read_metrics(tmp_path)] == [
        (1, 1.0),
        (2, 2.0),
        (3, 13.0),
        (4, 14.0),
        (5, 15.0),
    ]


def test_step_watcher_reads_the_console_logger():
    watcher = StepWatcher()
    assert not watcher.line("(TaskRunner pid=7) Training Progress: 0%")
    assert watcher.line(
        "(TaskRunner pid=7) step:3 - actor/pg_loss:0.1 - critic/score/mean:np.float64(0.25) - x:1"
    )
    assert (watcher.steps, watcher.step, watcher.reward) == (1, 3, 0.25)


FAKE_VERL = """\
import sys
overrides = dict(a.lstrip("+").split("=", 1) for a in sys.argv[2:])
path = overrides["ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"]
steps, write = int(overrides["trainer.total_training_steps"]), sys.argv[1] == "write"
with open(path, "wb") as log:  # as verl's file logger opens it
    for step in range(1, steps + 1):
        print(f"(TaskRunner pid=1) step:{step} - critic/score/mean:{step / 10}", flush=True)
        if write:
            log.write(('{"step": %d, "data": {"critic/score/mean": %s}}\\n' % (step, step / 10)).encode())
"""


def fake_verl_plan(tmp_path: Path, write: str) -> list[Command]:
    """The real one-stage plan (its overrides are checked against verl), run by a stand-in for main_ppo."""
    script = tmp_path / "fake_verl.py"
    script.write_text(FAKE_VERL)
    train, merge = plan_for(tmp_path, "rl.steps_per_stage=2", stages=1)
    return [
        dataclasses.replace(train, argv=(sys.executable, str(script), write, *train.argv[3:])),
        dataclasses.replace(merge, argv=(sys.executable, "-c", "print('merged')")),
    ]


@pytest.mark.verl
def test_run_stage_plan_keeps_every_attempts_metrics(tmp_path):
    for _ in range(2):
        run_stage_plan(fake_verl_plan(tmp_path, "write"), tmp_path / "log.txt", steps=2)
    stage_dir = tmp_path / "rl" / "stage-0"
    assert sorted(p.name for p in stage_dir.glob("verl_metrics.*")) == [
        "verl_metrics.1.jsonl",
        "verl_metrics.2.jsonl",
    ]
    assert [r["step"] for r in read_metrics(stage_dir)] == [1, 2]
    assert "step:2 - critic/score/mean:0.2" in (tmp_path / "log.txt").read_text()


@pytest.mark.verl
def test_run_stage_plan_fails_when_reported_steps_left_no_metrics(tmp_path):
    with pytest.raises(StageFailed) as caught:
        run_stage_plan(fake_verl_plan(tmp_path, "drop"), tmp_path / "log.txt", steps=2)
    message = str(caught.value)
    assert "\n" not in message and "stage-0 train: verl reported 2 step(s) but its metrics file" in message
    assert "storage every node shares" in message


@pytest.mark.verl
def test_run_stage_plan_checks_the_overrides_before_starting_anything(tmp_path):
    train, merge = fake_verl_plan(tmp_path, "write")
    broken = dataclasses.replace(train, argv=(*train.argv, "trainer.no_such_key=1"))
    with pytest.raises(UsageError, match="verl rejects the training overrides"):
        run_stage_plan([broken, merge], tmp_path / "log.txt", steps=2)
    assert not (tmp_path / "log.txt").exists()


def test_the_local_engines_settings_leave_verls_plan_alone(tmp_path):
    assert plan_for(tmp_path, "rl.local.trainable_layers=12")[0].argv == plan_for(tmp_path)[0].argv


def test_the_stage_curve_adds_each_steps_behaviour_from_the_dump(tmp_path):
    from mtsql.engines.verl.engine import verl_curve as _verl_curve
    from mtsql.engines.verl.main_ppo import ROLLOUTS_DIR

    write_attempt(tmp_path, range(1, 3), 0.0)
    (tmp_path / ROLLOUTS_DIR).mkdir()
    episode = {
        "tool_calls": 2.0,
        "memory_calls": 1.0,
        "messages": 3.0,
        "invalid_messages": 0.0,
        "self_corrected": 1.0,
        "response_tokens": 90.0,
        "trajectory_ok": 1.0,
    }
    lines = [
        {**episode, "score": 2.0},
        {
            **episode,
            "tool_calls": 0.0,
            "memory_calls": 0.0,
            "messages": 2.0,
            "invalid_messages": 2.0,
            "self_corrected": 0.0,
            "response_tokens": 30.0,
            "score": 0.0,
        },
    ]
    (tmp_path / ROLLOUTS_DIR / "1.jsonl").write_text(
        "".join(json.dumps({"step": 1, "input": "q", **line}) + "\n" for line in lines)
    )
    first, second = _verl_curve(tmp_path, stage=2)
    assert (first.stage, first.step, first.reward_mean) == (2, 1, 1.0)
    assert {
        key: getattr(first, key)
        for key in (
            "tool_calls_per_turn",
            "memory_calls_per_turn",
            "self_correction_rate",
            "invalid_message_rate",
            "messages_per_turn",
            "response_length",
        )
    } == {
        "tool_calls_per_turn": 1.0,
        "memory_calls_per_turn": 0.5,
        "self_correction_rate": 0.5,
        "invalid_message_rate": 2 / 5,
        "messages_per_turn": 2.5,
        "response_length": 60.0,
    }
    assert first.reward_std == 1.0, "the spread of the step's sample scores (2 and 0)"
    assert first.groups_with_signal == 1.0, "one prompt, two scores"
    assert second.tool_calls_per_turn is None and second.reward_std is None, (
        "step 2 left no dump: verl's only"
    )


def test_verls_steps_reach_the_trackers_under_the_local_engines_names(tmp_path):
    from mtsql.engines.rl_engines import step_metrics
    from mtsql.engines.verl.engine import verl_curve as _verl_curve

    logged = {
        "critic/score/mean": 0.5,
        "actor/kl_loss": 0.01,
        "actor/grad_norm": 2.0,
        "actor/pg_clipfrac": 0.125,
        "actor/pg_loss": -0.2,
        "response_length/mean": 40.0,
    }
    next_metrics_file(tmp_path).write_text(json.dumps({"step": 1, "data": logged}) + "\n")
    (line,) = _verl_curve(tmp_path, stage=1)
    shown = step_metrics(line)
    assert {
        name: shown[name]
        for name in (
            "rl/reward_mean",
            "rl/kl",
            "rl/grad_norm",
            "rl/clipfrac",
            "rl/pg_loss",
            "rl/response_length",
        )
    } == {
        "rl/reward_mean": 0.5,
        "rl/kl": 0.01,
        "rl/grad_norm": 2.0,
        "rl/clipfrac": 0.125,
        "rl/pg_loss": -0.2,
        "rl/response_length": 40.0,
    }
    assert "rl/stage" not in shown and "rl/step" not in shown
