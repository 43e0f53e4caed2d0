"""The verl launch plan: every override checked against verl 0.9.1's own Hydra config, the stage
chain through merged checkpoints, the dry-run script, and the subprocess runner."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml

from mtsql.config import load_config
from mtsql.errors import StageFailed, UsageError
from mtsql.integrations.verl.dataset import AGENT_NAME
from mtsql.integrations.verl.launch import (
    AGENT_LOOP_TARGET,
    Command,
    StageData,
    build_stage_plan,
    compose_train_config,
    error_line,
    hydra_value,
    render_plan,
    run_plan,
)

DATA_ROOT = Path("/shared/data")


def plan_for(tmp_path: Path, *overrides: str, stages: int = 2, rows: int = 512) -> list[Command]:
    cfg = load_config(None, ["run=paper", "rl.kl_coef=0.001", "rl.lr=1e-6", *overrides])
    data = [StageData(f"stage-{k}", tmp_path / "data dir" / f"stage-{k}.parquet", rows) for k in range(stages)]
    return build_stage_plan(cfg, data, model_path="Qwen/Qwen3-1.7B", out_dir=tmp_path / "rl", data_root=DATA_ROOT,
                            python="python")


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """The first stage's overrides composed with verl's ppo_trainer config and validated like main_ppo."""
    plan = plan_for(tmp_path_factory.mktemp("plan"))
    return plan, compose_train_config(plan[0].argv[3:])


def test_every_override_is_a_verl_key_with_the_intended_value(composed):
    plan, config = composed
    train = plan[0]
    assert train.argv[:3] == ("python", "-m", "verl.trainer.main_ppo")
    from omegaconf import OmegaConf

    for item in train.argv[3:]:
        key, value = item.split("=", 1)
        assert OmegaConf.select(config, key.lstrip("+"), throw_on_missing=True) is not None or value == "null", key
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.algorithm.adv_estimator == "grpo" and not config.algorithm.use_kl_in_reward
    assert (actor.optim.lr, actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (1e-6, True, 0.001, "low_var_kl")
    assert (actor.loss_agg_mode, actor.entropy_coeff, actor.ppo_mini_batch_size) == ("token-mean", 0, 256)
    assert (rollout.name, rollout.mode, rollout.n, rollout.prompt_length, rollout.response_length) == (
        "vllm", "async", 5, 4000, 8000)
    assert rollout.agent.default_agent_loop == AGENT_NAME
    assert rollout.agent.agent_loop_config_path.endswith("rl/agent_loop.yaml")
    assert config.data.train_files.endswith("data dir/stage-0.parquet") and config.data.train_batch_size == 256
    assert (config.trainer.n_gpus_per_node, config.trainer.nnodes, config.trainer.total_training_steps) == (4, 1, 60)
    assert config.trainer.save_freq == 60 and config.trainer.default_local_dir.endswith("stage-0/checkpoints")
    assert config.trainer.logger == ["console", "file"] and config.trainer.experiment_name == "paper-stage-0"
    reward = config.reward.custom_reward_function
    assert (reward.path, reward.name) == ("pkg://mtsql.integrations.verl.reward", "compute_score")
    assert reward.reward_kwargs.reward.family == "process" and reward.reward_kwargs.reward.clause_f1 == 0.8
    assert reward.reward_kwargs.sql.timeout_s == 5.0 and reward.reward_kwargs.data_root == str(DATA_ROOT)
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH.endswith("stage-0/verl_metrics.jsonl")


def test_a_misspelt_or_inconsistent_override_is_rejected_before_launch(composed):
    plan, _ = composed
    with pytest.raises(UsageError, match="adv_estimatr"):
        compose_train_config([*plan[0].argv[3:], "algorithm.adv_estimatr=grpo"])
    with pytest.raises(UsageError, match="verl rejects the training config"):
        compose_train_config([*plan[0].argv[3:], "actor_rollout_ref.actor.ppo_mini_batch_size=512"])


def test_the_reward_function_verl_loads_is_mtsql_compute_score(composed):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from mtsql.integrations.verl.reward import compute_score

    _, config = composed
    fn = get_custom_reward_fn(config)
    assert fn.args[0] is compute_score
    assert fn.args[1]["reward"]["family"] == "process" and fn.args[1]["data_root"] == str(DATA_ROOT)


def test_stages_chain_through_merged_checkpoints(tmp_path):
    plan = plan_for(tmp_path, stages=3)
    assert [c.name for c in plan] == ["stage-0 train", "stage-0 merge", "stage-1 train", "stage-1 merge",
                                      "stage-2 train", "stage-2 merge"]
    rl = tmp_path / "rl"
    for k in range(3):
        train, merge = plan[2 * k], plan[2 * k + 1]
        checkpoint = rl / f"stage-{k}" / "checkpoints" / "global_step_60" / "actor"
        assert train.produces == {"checkpoint": checkpoint}
        assert merge.argv == ("python", "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                              str(checkpoint), "--target_dir", str(rl / f"stage-{k}" / "merged"))
        model = dict(a.split("=", 1) for a in train.argv[3:])["actor_rollout_ref.model.path"]
        assert model == ("Qwen/Qwen3-1.7B" if k == 0 else str(rl / f"stage-{k - 1}" / "merged"))
        assert "actor_rollout_ref.model.lora_adapter_path" not in dict(a.split("=", 1) for a in train.argv[3:])


def test_merge_command_is_accepted_by_verls_model_merger(tmp_path, monkeypatch):
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    merge = plan_for(tmp_path)[1]
    monkeypatch.setattr(sys, "argv", ["model_merger", *merge.argv[3:]])
    config = generate_config_from_args(parse_args())
    assert (config.operation, config.backend, config.local_dir, config.target_dir) == (
        "merge", "fsdp", merge.argv[7], merge.argv[9])


def test_lora_stages_continue_the_previous_adapter(tmp_path):
    # sglang: verl checks a LoRA rank against the installed vllm, which a CPU machine does not have
    plan = plan_for(tmp_path, "rl.lora_rank=16", "rl.lora_alpha=32", "rl.rollout_name=sglang")
    first, second = (dict(a.split("=", 1) for a in plan[k].argv[3:]) for k in (0, 2))
    assert (first["actor_rollout_ref.model.lora_rank"], first["actor_rollout_ref.model.lora_alpha"]) == ("16", "32")
    assert "actor_rollout_ref.model.lora_adapter_path" not in first
    merged = tmp_path / "rl" / "stage-0" / "merged"
    assert second["actor_rollout_ref.model.path"] == str(merged)
    assert second["actor_rollout_ref.model.lora_adapter_path"] == str(merged / "lora_adapter")
    assert plan[1].produces["lora_adapter"] == merged / "lora_adapter"
    compose_train_config(plan[2].argv[3:])


def test_agent_loop_yaml_registers_the_loop_with_the_env_settings(tmp_path):
    plan = plan_for(tmp_path, "env.max_turns=6", "sql.timeout_s=2.5", "rl.max_turn_tokens=512")
    (path, text), = plan[0].files.items()
    assert path == tmp_path / "rl" / "agent_loop.yaml"
    (entry,) = yaml.safe_load(text)
    assert (entry["name"], entry["_target_"]) == (AGENT_NAME, AGENT_LOOP_TARGET)
    assert entry["env"]["max_turns"] == 6 and entry["sql"]["timeout_s"] == 2.5 and entry["max_turn_tokens"] == 512
    assert entry["data_root"] == str(DATA_ROOT)


def test_dry_run_script_holds_every_file_and_complete_command(tmp_path):
    plan = plan_for(tmp_path)
    script = render_plan(plan)
    assert script.count("-m verl.trainer.main_ppo") == 2 and script.count("-m verl.model_merger merge") == 2
    assert f"cat > {tmp_path / 'rl' / 'agent_loop.yaml'} <<'MTSQL_EOF'\n- name: {AGENT_NAME}" in script
    assert "HYDRA_FULL_ERROR=1 python -m verl.trainer.main_ppo" in script
    train_block = script.split("# stage-0 train")[1].split("# stage-0 merge")[0]
    command = train_block[train_block.index("HYDRA_FULL_ERROR"):].replace("\\\n", " ")
    assert shlex.split(command)[4:] == list(plan[0].argv[3:])  # the shell reads back the exact overrides


def test_multi_node_needs_a_ray_address_and_says_how_to_start_ray(tmp_path):
    with pytest.raises(UsageError, match="rl.ray_address"):
        plan_for(tmp_path, "rl.nnodes=2")
    plan = plan_for(tmp_path, "rl.nnodes=2", "rl.ray_address=10.0.0.1:6379")
    assert plan[0].env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert "ray start --head --port=6379" in plan[0].note and "ray start --address=10.0.0.1:6379" in plan[0].note
    assert "# Ray cluster at 10.0.0.1:6379" in render_plan(plan)


def test_bad_plans_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="fewer than rl.batch_size=256"):
        plan_for(tmp_path, rows=100)
    with pytest.raises(UsageError, match="'rl.rollout_name' must be one of vllm, sglang"):
        plan_for(tmp_path, "rl.rollout_name=hf")


@pytest.mark.parametrize("value, text", [
    (True, "true"), (None, "null"), (3, "3"), (1e-6, "1e-06"), (["console", "file"], "[console,file]"),
    ("/a/b-c.parquet", "/a/b-c.parquet"), ("pkg://x.y", "pkg://x.y"), ("null", "'null'"), ("1.5", "'1.5'"),
    ("a b,c", "'a b,c'"), ("it's", "'it\\'s'"),
])
def test_hydra_values(value, text):
    assert hydra_value(value) == text


def test_run_plan_writes_files_streams_output_and_quotes_the_error(tmp_path):
    ok = Command("ok", (sys.executable, "-c", "import os; print(open('in.txt').read(), os.environ['X'])"),
                 cwd=tmp_path / "work", env={"X": "42"}, files={tmp_path / "work" / "in.txt": "hello"})
    bad = Command("bad", (sys.executable, "-c", "print('loading'); raise ValueError('no GPU found')"), cwd=tmp_path)
    never = Command("never", (sys.executable, "-c", "open('ran', 'w')"), cwd=tmp_path)
    seen = []
    with pytest.raises(StageFailed, match=r"bad failed \(exit 1\): ValueError: no GPU found"):
        run_plan([ok, bad, never], tmp_path / "log.txt", echo=seen.append)
    log = (tmp_path / "log.txt").read_text()
    assert "hello 42" in log and "loading" in log and "Traceback" in log
    assert "hello 42\n" in seen and not (tmp_path / "ran").exists()


def test_error_line_finds_the_innermost_exception():
    ray = ["(TaskRunner pid=1) Traceback (most recent call last):",
           "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()",
           '  File "x.py", line 3, in run', "ValueError: train_batch_size (256) exceeds the dataset", "", "done"]
    assert error_line(ray) == "ValueError: train_batch_size (256) exceeds the dataset"
    assert error_line(["hydra.errors.ConfigCompositionException: Could not override 'x'."]).startswith("hydra.errors")
    assert error_line(["all fine", "killed"]) == "killed" and error_line([]) == "no output"
