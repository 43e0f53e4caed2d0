"""Launching verl 0.9.1 GRPO, one training per curriculum stage.

    plan = build_stage_plan(cfg, stages, model_path="/models/sft", out_dir=stage_dir, data_root=root)
    print(render_plan(plan))          # --dry-run: every file and command, runnable by hand
    run_stage_plan(plan, stage_dir / "log.txt", steps=cfg.rl.steps_per_stage)
    read_metrics(stage_dir / "stage-1")   # verl's per-step metrics, over every attempt

verl 0.9.1 has no curriculum sampler, so each stage is its own ``python -m verl.trainer.main_ppo``
run that starts from the previous stage's checkpoint merged to a Hugging Face folder by
``python -m verl.model_merger merge``. Per stage the plan has two commands: train (which writes
the agent-loop YAML first) and merge. Every Hydra key below exists in verl 0.9.1's
``ppo_trainer`` config (a test composes them); the ``+`` keys are ones verl reads but does not
declare. ``PINNED`` fixes the switches whose defaults would pick another trainer, worker or reward
manager than the ones mtsql is built and tested against. ``rl.verl.extra`` appends more overrides.
On several nodes, start Ray by hand first and set ``rl.verl.ray_address`` (the plan says how).

Without CUDA (``has_cuda``), the plan runs verl on the CPUs: with the Python of ``.venv-verl`` (make setup
builds it), the CPU platform of ``cpu_platform`` loaded through verl's plugin hook (``CPU_ENV``), a
private one-node Ray cluster told it has a GPU per worker (``rl.verl.n_gpus_per_node`` worker processes),
and ``cpu_overrides`` (eager float32 vLLM, no sleep mode, sdpa attention, one agent-loop and one reward
worker). Where CUDA is visible the plan is the one verl was always run with (tests/test_verl_gpu_plan.py).

Metrics: verl's file logger truncates the file it opens and writes it from the Ray actor that runs
the trainer, possibly on another node. Each run of a stage therefore logs to a new
``verl_metrics.<attempt>.jsonl`` in the stage folder (so the run folder must be storage every node
shares), and ``read_metrics`` merges the attempts by step, a resumed attempt's step replacing the
earlier one. verl also dumps each step's samples into ``rollouts/<step>.jsonl`` with the keys the
reward function returned, from which ``step_samples_of`` reads the agent's behaviour per step (the
dump holds every sample's decoded text too, tens of MB a step at the paper's batch sizes: the rl
stage removes it once its curve is written).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import statistics
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from mtsql.base.config import to_dict
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.files import read_jsonl
from mtsql.base.trackers import Trackers
from mtsql.core.trajectories import BEHAVIOUR, step_behaviour
from mtsql.engines.commands import Command, OutputLines, run_logged
from mtsql.engines.passthrough import check_extra, clashes
from mtsql.engines.rl_engines import RolloutBounds, groups_with_signal
from mtsql.engines.rl_schedule import stage_steps
from mtsql.engines.verl.cleanup import stop_tagged, tagged_env
from mtsql.engines.verl.dataset import AGENT_NAME
from mtsql.engines.verl.reward import OK_KEY
from mtsql.engines.views import RlView

AGENT_LOOP_TARGET = "mtsql.engines.verl.agent_loop.SqlAgentLoop"
REWARD_MODULE = "pkg://mtsql.engines.verl.reward"
REWARD_FUNCTION = "compute_score"
METRICS_PREFIX = "verl_metrics"
ROLLOUTS_DIR = "rollouts"  # verl's dump of each step's samples, <step>.jsonl, with compute_score's keys
RUNTIME_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"  # environment of every Ray worker, on every node

# verl switches whose defaults would pick a code path mtsql does not run (main_ppo checks none of them)
PINNED: tuple[tuple[str, object], ...] = (
    ("trainer.use_v1", False),  # true starts the v1 trainer, which needs transfer_queue (an optional extra)
    ("model_engine", "dp"),  # FSDP workers: the merge command reads FSDP checkpoints
    ("actor_rollout_ref.actor.strategy", "fsdp"),
    ("actor_rollout_ref.ref.strategy", "fsdp"),
    ("reward.reward_manager.source", "register"),
    ("reward.reward_manager.name", "naive"),  # merges the agent loop's fields into compute_score's extra_info
    ("actor_rollout_ref.actor.use_dynamic_bsz", False),  # micro-batches of rl.micro_batch_size_per_gpu rows
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", False),
    ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False),
)

VERL_VENV = ".venv-verl"  # beside the virtualenv mtsql runs in (make setup builds it on CPU machines)
CPU_PLATFORM_MODULE = "mtsql.engines.verl.cpu_platform"
# the environment of verl's processes on a machine without CUDA (docs/engines.md, "verl on CPU")
CPU_ENV = {
    "VERL_USE_EXTERNAL_MODULES": CPU_PLATFORM_MODULE,  # verl imports it in every process: the CPU platform
    "VERL_PLATFORM": "cpu",
    # verl registers its FSDP engine for cuda/npu; the platform makes it the CPU
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache for the rollout engine
    "TOKENIZERS_PARALLELISM": "false",
}
# the strategy of verl's FSDP engine on CPU (docs/engines.md, "Pins")
CPU_STRATEGY = "fsdp2"

log = logging.getLogger(__name__)


def has_cuda() -> bool:
    """Whether this machine trains on CUDA (else verl runs on the CPUs)."""
    import torch

    return torch.cuda.is_available()


def verl_python() -> str:
    """The Python that runs verl on a machine without CUDA: ``.venv-verl`` beside this virtualenv (the
    runner checks that it exists)."""
    return str(Path(sys.prefix).parent / VERL_VENV / "bin" / "python")


def cpu_env() -> dict[str, str]:
    """``CPU_ENV`` with vLLM's and torch's threads on every core this process may use."""
    cores = len(os.sched_getaffinity(0))
    return {**CPU_ENV, "OMP_NUM_THREADS": str(cores), "VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}"}


def cpu_overrides(workers: int = 1) -> list[tuple[str, object]]:
    """What verl needs besides the platform to train on the CPUs: one Ray node that says it has a GPU per
    worker process (``workers``: each an FSDP rank over gloo with a vLLM engine of its own), float32 and
    eager execution everywhere, no CUDA-only feature (sleep mode, flash attention)."""
    actor, ref, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout"
    return [
        ("+ray_kwargs.ray_init.address", "local"),  # a private cluster, never one already up on this machine
        ("+ray_kwargs.ray_init.num_gpus", workers),
        ("+ray_kwargs.ray_init.num_cpus", 8),  # Ray's bookkeeping slots, not cores
        ("+ray_kwargs.ray_init.object_store_memory", 1 << 30),
        ("+ray_kwargs.ray_init.include_dashboard", False),
        ("trainer.device", "cpu"),
        ("trainer.n_gpus_per_node", workers),
        ("trainer.nnodes", 1),
        (f"{actor}.strategy", CPU_STRATEGY),
        (f"{ref}.strategy", CPU_STRATEGY),
        (f"{actor}.fsdp_config.dtype", "float32"),
        (f"{ref}.fsdp_config.dtype", "float32"),
        # the dtype above is the weights'; FSDP computes in its mixed-precision param_dtype, bf16 unless set
        (f"+{actor}.fsdp_config.mixed_precision.param_dtype", "fp32"),
        (f"+{ref}.fsdp_config.mixed_precision.param_dtype", "fp32"),
        (f"{actor}.use_torch_compile", False),
        (f"{actor}.fsdp_config.use_torch_compile", False),
        (f"{ref}.fsdp_config.use_torch_compile", False),
        ("actor_rollout_ref.model.use_remove_padding", False),
        ("+actor_rollout_ref.model.override_config.attn_implementation", "sdpa"),
        (f"{rollout}.dtype", "float32"),
        (f"{rollout}.enforce_eager", True),
        (f"{rollout}.enable_chunked_prefill", False),
        (f"{rollout}.free_cache_engine", False),
        (f"+{rollout}.enable_sleep_mode", False),
        (f"{rollout}.agent.num_workers", 1),
        ("reward.num_workers", 1),
        ("data.dataloader_num_workers", 0),
    ]


@dataclass(frozen=True)
class CurriculumParquet:
    """The training rows of one curriculum stage (an RL parquet and how many rows it has, None when
    not known yet, as in a dry run before the curriculum exists)."""

    name: str
    train_file: Path
    rows: int | None
    val_file: Path | None = None  # the dev rows validated every rl.val_every steps (None: no validation)


def build_stage_plan(
    cfg: RlView,
    stages: Sequence[CurriculumParquet],
    *,
    model_path: str,
    out_dir: Path,
    data_root: Path,
    cpu: bool = False,
    python: str | None = None,
    trackers: Trackers | None = None,
) -> list[Command]:
    """Train + merge commands for every stage, each stage starting from the previous merged model.

    ``model_path``: the first stage's model, an absolute folder or an HF id. Each stage works in
    ``out_dir/<stage name>``: ``checkpoints/``, ``merged/`` (with ``lora_adapter/`` under LoRA) and
    this attempt's ``verl_metrics.<k>.jsonl``; ``data_root`` is where the agent loop and the reward
    find the databases; ``cpu``: train on the CPUs (the CPU platform; ``python`` defaults to ``.venv-verl``'s
    there, this interpreter elsewhere); ``trackers``: the stage's dashboards (``train_overrides``).
    """
    _check(cfg, stages)
    python = python or (verl_python() if cpu else sys.executable)
    out_dir, data_root = Path(out_dir).resolve(), Path(data_root).resolve()
    agent_loop_file = out_dir / "agent_loop.yaml"
    plan: list[Command] = []
    current, adapter = model_path, None
    for index, stage in enumerate(stages):
        stage_dir = out_dir / stage.name
        steps = stage_steps(cfg.rl, stage.rows)
        checkpoint = checkpoint_dir(stage_dir, "<steps>" if steps is None else steps)
        merged = stage_dir / "merged"
        metrics = next_metrics_file(stage_dir)
        overrides = train_overrides(
            cfg,
            stage,
            model_path=current,
            lora_adapter=adapter,
            stage_dir=stage_dir,
            agent_loop_file=agent_loop_file,
            data_root=data_root,
            metrics_file=metrics,
            cpu=cpu,
            trackers=trackers,
        )
        plan.append(
            Command(
                name=f"{stage.name} train",
                argv=(python, "-m", "verl.trainer.main_ppo", *overrides),
                cwd=stage_dir,
                env=_train_env(cfg, cpu),
                files={agent_loop_file: agent_loop_yaml(cfg, data_root)},
                produces={"checkpoint": checkpoint, "metrics": metrics},
                note=_ray_note(cfg) if index == 0 else "",
            )
        )
        produces = {"merged_model": merged}
        if cfg.rl.lora_rank:
            produces["lora_adapter"] = merged / "lora_adapter"  # the merger keeps LoRA weights apart
        plan.append(
            merge_command(
                checkpoint,
                merged,
                name=f"{stage.name} merge",
                cwd=stage_dir,
                python=python,
                produces=produces,
            )
        )
        current, adapter = str(merged), (str(produces["lora_adapter"]) if cfg.rl.lora_rank else None)
    return plan


def checkpoint_dir(stage_dir: Path, step: int | str) -> Path:
    """Where verl leaves the actor checkpoint of ``step`` (what the merger reads)."""
    return Path(stage_dir) / "checkpoints" / f"global_step_{step}" / "actor"


def merge_command(
    checkpoint: Path,
    target: Path,
    *,
    name: str,
    cwd: Path,
    python: str = sys.executable,
    produces: dict[str, Path] | None = None,
) -> Command:
    """verl's model merger: an FSDP actor checkpoint into a Hugging Face folder."""
    return Command(
        name=name,
        cwd=cwd,
        produces=produces or {"merged_model": target},
        argv=(
            python,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(checkpoint),
            "--target_dir",
            str(target),
        ),
    )


def agent_loop_yaml(cfg: RlView, data_root: Path) -> str:
    """verl's agent-loop registry file: ``SqlAgentLoop`` under ``AGENT_NAME`` with mtsql's settings."""
    entry = {
        "name": AGENT_NAME,
        "_target_": AGENT_LOOP_TARGET,
        "max_message_tokens": RolloutBounds.of(cfg.rl).message_tokens,
        "template": cfg.model.template,
        "data_root": str(Path(data_root).resolve()),
        "env": to_dict(cfg.env),
        "sql": to_dict(cfg.sql),
    }
    return yaml.safe_dump([entry], sort_keys=False)


def train_overrides(
    cfg: RlView,
    stage: CurriculumParquet,
    *,
    model_path: str,
    lora_adapter: str | None,
    stage_dir: Path,
    agent_loop_file: Path,
    data_root: Path,
    metrics_file: Path,
    cpu: bool = False,
    trackers: Trackers | None = None,
) -> list[str]:
    """The Hydra overrides of one stage's ``main_ppo`` run (GRPO as MTSQL-R1 ran it), then ``rl.verl.extra``;
    ``cpu``: ``cpu_overrides`` replace the ones they name; ``trackers``: the dashboards verl's own loggers
    write to (none: console and the metrics file only)."""
    rl, trackers = cfg.rl, trackers or Trackers.off()
    steps = stage_steps(rl, stage.rows)  # None: epochs over a stage whose size is not known yet (dry run)
    actor, rollout, model = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.model"
    reward_kwargs = "+reward.custom_reward_function.reward_kwargs"
    pairs: list[tuple[str, object]] = [
        *PINNED,
        ("algorithm.adv_estimator", "grpo"),
        ("algorithm.use_kl_in_reward", False),
        ("data.train_files", str(Path(stage.train_file).resolve())),
        # verl always builds a validation set; without rl.val_every it is never used (mtsql evaluate scores
        # the models)
        ("data.val_files", str(Path(stage.val_file or stage.train_file).resolve())),
        ("data.train_batch_size", rl.batch_size),
        ("data.max_prompt_length", rl.max_prompt_len),
        ("data.max_response_length", RolloutBounds.of(rl).response_tokens),
        ("data.return_raw_chat", True),
        (f"{model}.path", model_path),
        (f"{model}.lora_rank", rl.lora_rank),
        (f"{model}.lora_alpha", rl.lora_alpha),
        (f"{model}.target_modules", "all-linear"),
        (f"{actor}.optim.lr", rl.lr),
        (f"{actor}.ppo_mini_batch_size", rl.mini_batch_size),
        (f"{actor}.ppo_micro_batch_size_per_gpu", rl.micro_batch_size_per_gpu),
        (f"{actor}.use_kl_loss", rl.kl_coef > 0),
        (f"{actor}.kl_loss_coef", rl.kl_coef),
        (f"{actor}.kl_loss_type", "low_var_kl"),
        (f"{actor}.entropy_coeff", 0),
        (f"{actor}.loss_agg_mode", "token-mean"),
        (f"{actor}.clip_ratio", rl.clip_ratio),
        (f"{actor}.clip_ratio_low", rl.clip_ratio),
        (f"{actor}.clip_ratio_high", rl.clip_ratio),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", rl.micro_batch_size_per_gpu),
        (f"{rollout}.name", rl.verl.rollout_name),
        (f"{rollout}.mode", "async"),
        (f"{rollout}.n", rl.n),
        (f"{rollout}.temperature", rl.temperature),
        (f"{rollout}.tensor_model_parallel_size", rl.verl.rollout_tp),
        (f"{rollout}.gpu_memory_utilization", rl.gpu_memory_utilization),
        (f"{rollout}.max_model_len", rl.max_prompt_len + rl.max_response_len),
        (f"{rollout}.log_prob_micro_batch_size_per_gpu", rl.micro_batch_size_per_gpu),
        (f"{rollout}.agent.agent_loop_config_path", str(agent_loop_file)),
        (f"{rollout}.agent.default_agent_loop", AGENT_NAME),
        ("reward.custom_reward_function.path", REWARD_MODULE),
        ("reward.custom_reward_function.name", REWARD_FUNCTION),
        *((f"{reward_kwargs}.reward.{k}", v) for k, v in to_dict(cfg.reward).items()),
        *((f"{reward_kwargs}.sql.{k}", v) for k, v in to_dict(cfg.sql).items()),
        (f"{reward_kwargs}.data_root", str(data_root)),
        ("trainer.project_name", cfg.trackers.project),
        ("trainer.experiment_name", f"{cfg.run}-{stage.name}"),
        # the trackers that are on (trackers.*), where the stage's own log: the same TensorBoard folder and
        # MLflow run
        ("trainer.logger", ["console", "file", *trackers.names]),
        (f"{RUNTIME_ENV}.VERL_FILE_LOGGER_PATH", str(metrics_file)),
        *((f"{RUNTIME_ENV}.{key}", value) for key, value in trackers.env().items()),
        ("trainer.default_local_dir", str(stage_dir / "checkpoints")),
        (
            "trainer.rollout_data_dir",
            str(stage_dir / ROLLOUTS_DIR),
        ),  # per-step samples: the agent's behaviour
        ("trainer.resume_mode", "auto"),
        ("trainer.total_training_steps", steps),
        # steps: enough epochs for total_training_steps whatever the stage size (an epoch has >= 1 step)
        ("trainer.total_epochs", rl.epochs_per_stage or rl.steps_per_stage),
        # verl saves at the last step whenever save_freq > 0; rl.val_pick: best keeps every validated step
        ("trainer.save_freq", rl.val_every if rl.val_pick == "best" else steps or 1),
        ("trainer.test_freq", rl.val_every or -1),
        ("trainer.val_before_train", False),
        (f"{rollout}.val_kwargs.do_sample", False),  # validation is greedy, as the release's
        (f"{rollout}.val_kwargs.n", 1),
        ("trainer.n_gpus_per_node", rl.verl.n_gpus_per_node),
        ("trainer.nnodes", rl.verl.nnodes),
    ]
    if lora_adapter:
        pairs.append((f"{model}.lora_adapter_path", lora_adapter))
    if cpu:
        on_cpu = dict(cpu_overrides(rl.verl.n_gpus_per_node))
        pairs = [(key, on_cpu.pop(key, value)) for key, value in pairs] + list(on_cpu.items())
    own, extra = [key.lstrip("+") for key, _ in pairs], [override_key(item) for item in rl.verl.extra]
    check_extra(extra, own, setting="rl.verl.extra", allowed=rl.verl.extra_override)
    replaced = set(clashes(own, extra))
    return [f"{key}={hydra_value(value)}" for key, value in pairs if key.lstrip("+") not in replaced] + list(
        rl.verl.extra
    )


def override_key(item: str) -> str:
    """The config key of a Hydra override: ``+a.b=1``, ``++a.b=1``, ``~a.b`` and ``a.b`` all give ``a.b``."""
    key, sep, _ = item.partition("=")
    if not (sep or key.startswith("~")) or not key.lstrip("+~").strip():
        raise UsageError(
            f"rl.verl.extra: {item!r} is not a Hydra override: write key=value (or +key=value, ~key)"
        )
    return key.lstrip("+~").strip()


def next_metrics_file(stage_dir: Path) -> Path:
    """The metrics file of the next run of a stage: one past the attempts already in ``stage_dir``."""
    return Path(stage_dir) / f"{METRICS_PREFIX}.{len(metrics_files(stage_dir)) + 1}.jsonl"


def metrics_files(stage_dir: Path) -> list[Path]:
    """The attempts' metrics files of a stage, oldest first."""
    pattern = re.compile(rf"{METRICS_PREFIX}\.(\d+)\.jsonl")
    found = [
        (int(m.group(1)), p)
        for p in Path(stage_dir).glob(f"{METRICS_PREFIX}.*.jsonl")
        if (m := pattern.fullmatch(p.name))
    ]
    return [p for _, p in sorted(found)]


def read_metrics(stage_dir: Path) -> list[dict]:
    """Every step verl logged for a stage, ``{"step": n, **metrics}`` by step, over all attempts: a
    step logged again by a later attempt (resumed from an earlier checkpoint) replaces the earlier."""
    by_step: dict[int, dict] = {}
    for path in metrics_files(stage_dir):
        rows, broken = _metrics_rows(path)
        if broken:
            log.warning("%s: skipped %d unreadable line(s) (a run cut while writing)", path, broken)
        by_step.update((row["step"], row) for row in rows)
    return [by_step[step] for step in sorted(by_step)]


def step_samples_of(stage_dir: Path, step: int) -> dict[str, float]:
    """What one step's samples show, from verl's dump of them: the spread of the rewards verl trained on
    (``reward_std``, over every sample, as the local engine logs it), the share of groups whose rewards
    differ (``groups_with_signal``; a group: the samples of one prompt, by its decoded text ``input``) and
    the agent's behaviour (``trajectories.step_behaviour``, over the episodes the reward function could
    read); empty when the step left no dump."""
    path = Path(stage_dir) / ROLLOUTS_DIR / f"{step}.jsonl"
    samples = read_jsonl(path) if path.exists() else []
    if not samples:
        return {}
    spread = {
        "reward_std": statistics.pstdev(float(row["score"]) for row in samples),
        "groups_with_signal": groups_with_signal((row["input"], float(row["score"])) for row in samples),
    }
    episodes = [row for row in samples if row.get(OK_KEY)]
    if not episodes:
        return spread
    return {
        **spread,
        **step_behaviour(
            [{key: row[key] for key in BEHAVIOUR} for row in episodes],
            [row["response_tokens"] for row in episodes],
        ),
    }


def _metrics_rows(path: Path) -> tuple[list[dict], int]:
    """The rows of one metrics file (verl writes ``{"step": n, "data": {...}}`` per line) and the
    number of lines that could not be read."""
    rows, broken = [], 0
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            rows.append({"step": int(record["step"]), **record["data"]})
        except (ValueError, KeyError, TypeError):
            broken += 1
    return rows, broken


def compose_train_config(overrides: Sequence[str]):
    """verl's ``main_ppo`` config with ``overrides`` applied and checked as ``main_ppo`` checks it.

    Runs on CPU in seconds, so an unknown key, a bad value or inconsistent batch sizes fail here
    (``UsageError``) rather than on the GPU cluster. Returns the composed ``DictConfig``.
    """
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with initialize_config_module("verl.trainer.config", version_base=None):
            config = compose("ppo_trainer", overrides=list(overrides))
    except HydraException as exc:
        raise UsageError(f"verl rejects the training overrides: {str(exc).splitlines()[0]}") from None
    try:
        with warnings.catch_warnings():  # "Disabled critic as adv_estimator != gae": intended for GRPO
            warnings.filterwarnings("ignore", message="Disabled critic")
            use_critic = need_critic(config)
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=use_critic)
    except (AssertionError, ValueError) as exc:
        raise UsageError(f"verl rejects the training config: {exc}") from None
    return config


_PLAIN = re.compile(r"[A-Za-z_/~][A-Za-z0-9_./:@+\-~]*")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}


def hydra_value(value: object) -> str:
    """``value`` in Hydra's override grammar: strings that could be misread are quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot pass {value} to Hydra")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _HYDRA_WORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_plan(plan: Sequence[Command]) -> str:
    """The plan as a shell script: each file as a heredoc, then each command with its env and cwd."""
    lines = [
        "#!/usr/bin/env bash",
        "# mtsql RL on verl 0.9.1: generated plan, runnable by hand",
        "set -euo pipefail",
    ]
    for command in plan:
        lines.append("")
        lines.extend(f"# {line}" if line else "#" for line in command.note.splitlines())
        lines.append(f"# {command.name}")
        for path, text in command.files.items():
            lines.append(f"mkdir -p {shlex.quote(str(path.parent))}")
            lines.append(f"cat > {shlex.quote(str(path))} <<'MTSQL_EOF'\n{text.rstrip()}\nMTSQL_EOF")
        lines.append(f"mkdir -p {shlex.quote(str(command.cwd))} && cd {shlex.quote(str(command.cwd))}")
        lines.append(command.shell(one_per_line=True))
    return "\n".join(lines) + "\n"


def run_stage_plan(plan: Sequence[Command], log_path: Path, *, steps: int) -> None:
    """Run a stage plan as ``mtsql rl`` does: every train command's overrides checked against verl's
    config first (seconds, before Ray starts), then each command with a progress bar (step k of
    ``steps``, mean reward). A train command that reported steps but left an empty metrics file
    fails the stage: its metrics were written where this machine cannot read them.

    Every command is tagged (``cleanup``): processes an earlier, killed attempt of the same command left
    are stopped first, and whatever a command leaves (Ray, vLLM), failed or interrupted, after it; the
    log and the console say so in one line."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from mtsql.base.progress import progress_bar

    for command in plan:
        python = Path(command.argv[0])
        if python.is_absolute() and not python.is_file():
            raise UsageError(
                f"verl's Python {python} does not exist: run `make setup` (it builds {VERL_VENV} on "
                "machines without CUDA), or set rl.engine=local"
            )
        if "metrics" in command.produces:
            compose_train_config(command.argv[3:])
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}"),
        TimeElapsedColumn(),
    )
    with progress_bar(*columns) as progress:
        for command in plan:
            total = steps if "metrics" in command.produces else 1
            task = progress.add_task(f"verl {command.name}", total=total, reward="-")
            watcher = StepWatcher()

            def show(line: str, watcher=watcher, task=task) -> None:
                if watcher.line(line):
                    progress.update(task, completed=watcher.step, reward=f"{watcher.reward:.3f}")

            _run_tagged(command, log_path, on_output=OutputLines(show).feed)
            progress.update(task, completed=total)
            metrics = command.produces.get("metrics")
            if metrics is not None and watcher.steps and not (metrics.exists() and _metrics_rows(metrics)[0]):
                raise StageFailed(
                    f"{command.name}: verl reported {watcher.steps} step(s) but its metrics file {metrics} "
                    "is empty or missing: on a cluster the run folder must be on storage every node shares"
                )


def _run_tagged(command: Command, log_path: Path, *, on_output) -> None:
    """``run_logged`` with the command's processes marked, and none of them left afterwards."""
    run = f"{command.cwd or log_path.parent}:{command.name}"
    earlier = stop_tagged(run)
    if earlier:
        _say(
            log_path,
            f"{command.name}: stopped {earlier} process(es) an earlier, killed attempt left (Ray, vLLM)",
        )
    try:
        run_logged(replace(command, env={**command.env, **tagged_env(run)}), log_path, on_output=on_output)
    except BaseException as exc:
        left = stop_tagged(run)
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        _say(
            log_path,
            f"verl {command.name} {what}: no Ray or vLLM process of it is left"
            f"{f' ({left} stopped)' if left else ''}",
        )
        raise
    stop_tagged(run)


def _say(log_path: Path, line: str) -> None:
    """One line on the console and in the stage log."""
    print(line, file=sys.stderr, flush=True)
    with Path(log_path).open("a") as log:
        log.write(line + "\n")


_STEP = re.compile(r"(?:^|\s)step:(\d+) - ")
_REWARD = re.compile(r"critic/score/mean:(?:np\.float\d+\()?([-+0-9.eE]+|nan)")


class StepWatcher:
    """Follows main_ppo's console logger (``step:3 - critic/score/mean:0.25 - ...``, one line per step)."""

    def __init__(self) -> None:
        self.steps = 0  # step lines seen
        self.step = 0  # the last step number (a resumed run starts past 1)
        self.reward = float("nan")

    def line(self, line: str) -> bool:
        """Read one output line; True when it was a step line."""
        found = _STEP.search(line)
        if not found:
            return False
        self.steps += 1
        self.step = int(found.group(1))
        reward = _REWARD.search(line)
        self.reward = float(reward.group(1)) if reward else float("nan")
        return True


def _check(cfg: RlView, stages: Sequence[CurriculumParquet]) -> None:
    if not stages:
        raise UsageError("no curriculum stage to train")
    if cfg.rl.verl.nnodes > 1 and not cfg.rl.verl.ray_address:
        raise UsageError(
            f"rl.verl.nnodes={cfg.rl.verl.nnodes} needs a Ray cluster: start it (ray start) "
            "and set rl.verl.ray_address"
        )
    for stage in stages:
        if stage.rows is not None and stage.rows < cfg.rl.batch_size:
            raise UsageError(
                f"{stage.name}: {stage.rows} rows, fewer than rl.batch_size={cfg.rl.batch_size} "
                "(verl drops incomplete batches, so it would train nothing); lower rl.batch_size"
            )


def _train_env(cfg: RlView, cpu: bool) -> dict[str, str]:
    env = {"HYDRA_FULL_ERROR": "1", **(cpu_env() if cpu else {})}
    if cfg.rl.verl.ray_address:
        env["RAY_ADDRESS"] = cfg.rl.verl.ray_address
    return env


def _ray_note(cfg: RlView) -> str:
    if not cfg.rl.verl.ray_address:
        return ""
    port = cfg.rl.verl.ray_address.rsplit(":", 1)[-1] if ":" in cfg.rl.verl.ray_address else "6379"
    return (
        f"Ray cluster at {cfg.rl.verl.ray_address} "
        f"({cfg.rl.verl.nnodes} node(s) x {cfg.rl.verl.n_gpus_per_node} GPUs), "
        "started before this plan runs:\n"
        f"  head node:    ray start --head --port={port} --num-gpus={cfg.rl.verl.n_gpus_per_node}\n"
        f"  other nodes:  ray start --address={cfg.rl.verl.ray_address} "
        f"--num-gpus={cfg.rl.verl.n_gpus_per_node}\n"
        "Every node needs this Python environment (mtsql, verl, vllm) and the data folder at the same path."
    )
