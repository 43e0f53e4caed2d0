"""The whole configuration: every section, composed from the modules that own them, and ``load_config``.

    cfg = load_config("configs/profiles/tiny.yaml", ["sample.n=8", "env.max_messages=6"])

Each section is declared beside the code that reads it; this module composes them (so it sits above
every owner), says which keys mtsql no longer reads (``REMOVED``) and checks the settings that are only
valid together. A profile may start with ``base: other.yaml`` (relative to itself) to inherit and
override (``base.config_files.read_raw``)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from mtsql.base.config import Range, build, operational, result
from mtsql.base.config_files import Origins, read_raw
from mtsql.base.errors import UsageError
from mtsql.base.paths import folder_name
from mtsql.base.slices import CURRICULUM_LABELS
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.data.settings import DataConfig
from mtsql.core.rewards import RewardConfig
from mtsql.engines.backends.settings import SampleConfig
from mtsql.engines.llamafactory.settings import SftConfig, with_bf16_resolved
from mtsql.engines.models.registry import model_context
from mtsql.engines.models.settings import ModelConfig
from mtsql.engines.rl_settings import RlConfig
from mtsql.stages.curriculum import CurriculumConfig
from mtsql.stages.evaluate import EvaluateConfig
from mtsql.stages.reject import RejectConfig


@dataclass(frozen=True)
class TrackersConfig:
    """The dashboards every stage logs to (``base/trackers.py``, docs/trackers.md), each off until turned on;
    readable by every stage (like ``run``), they change what is shown, never what is produced."""

    tensorboard: bool = operational(False)
    wandb: bool = operational(False)  # offline only (WANDB_MODE=offline): `wandb sync` uploads a run by hand
    mlflow: bool = operational(False)
    dir: str | None = operational(
        None
    )  # event files, W&B runs, the MLflow store (None: the run folder's trackers/)
    mlflow_uri: str | None = operational(None)  # a file: URI, no server (None: file:<dir>/mlruns)
    project: str = operational("mtsql")  # the W&B project and MLflow experiment


@dataclass(frozen=True)
class Config:
    """A whole resolved configuration (what a profile YAML describes)."""

    run: str = operational("default")  # where results are stored, not what they are
    runs_dir: str = operational("runs")
    seed: Annotated[int, Range(0, 2**32 - 1)] = result(
        0
    )  # every sampling, shuffling and training seed derives
    # from it
    data: DataConfig = field(default_factory=DataConfig)
    sql: SqlConfig = field(default_factory=SqlConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    reject: RejectConfig = field(default_factory=RejectConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    rl: RlConfig = field(default_factory=RlConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    trackers: TrackersConfig = field(default_factory=TrackersConfig)


REMOVED = {  # keys mtsql no longer reads: the error says what to use instead
    "evaluate.limit": "evaluate.limit was never read: data.eval_limit sets how many interactions are scored",
    **{
        old: f"renamed: use '{new}' ({why})"
        for old, new, why in (
            ("sft.freeze_layers", "sft.trainable_layers", "it counts the last decoder layers that train"),
            ("rl.freeze_layers", "rl.local.trainable_layers", "it counts the last decoder layers that train"),
            ("env.max_turns", "env.max_messages", "it counts assistant messages; a turn is a dialogue turn"),
            ("rl.max_turn_tokens", "rl.max_message_tokens", "the cap is per assistant message"),
        )
    },
    **{
        old: "moved: trackers.tensorboard / trackers.wandb / trackers.mlflow turn each dashboard on, "
        "for every stage"
        for old in ("sft.logger", "rl.logger", "rl.verl.logger")
    },
    # settings that moved into the sub-section of the engine that reads them
    **{
        f"{section}.{old}": f"moved: use '{section}.{engine}.{new}' (a setting of the {engine} engine only)"
        for section, engine, names in (
            (
                "sample",
                "vllm",
                ("base_url", "model", "python", "kv_cache_gib", "eager", "args", "start_timeout_s"),
            ),
            ("sample", "openai", ("base_url", "model", "concurrency", "timeout_s")),
            (
                "rl",
                "verl",
                (
                    "n_gpus_per_node",
                    "nnodes",
                    "ray_address",
                    "rollout_name",
                    "rollout_tp",
                    "extra",
                    "extra_override",
                ),
            ),
            ("rl", "local", ("trainable_layers", "rollout_backend")),
        )
        for new in names
        for old in ((f"{engine}_{new}",) if section == "sample" else (new,))
    },
}


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML profile (with ``base:`` inheritance), apply ``a.b=value`` overrides, validate.

    Every error names the key and where its value came from: the file that set it, or the override."""
    raw, where = read_raw(path, overrides)
    cfg = build(Config, raw, source=where, prefix="", removed=REMOVED)
    _check_curriculum(cfg.curriculum, where)
    _check_together(cfg, where)
    _check_context(cfg, where)
    # resolved here, so config.yaml and the fingerprint show what runs
    return dataclasses.replace(cfg, sft=with_bf16_resolved(cfg.sft))


def _check_curriculum(cfg: CurriculumConfig, where: Origins) -> None:
    if not cfg.stages or not all(cfg.stages):
        raise UsageError(
            f"{where.of('curriculum.stages')}: 'curriculum.stages' needs at least one stage and a "
            f"label in each; got {[list(stage) for stage in cfg.stages]}"
        )
    labels = CURRICULUM_LABELS[cfg.by]
    stray = sorted({label for stage in cfg.stages for label in stage} - set(labels))
    if stray:
        raise UsageError(
            f"{where.of('curriculum.stages')}: 'curriculum.stages' has {stray}, which are not "
            f"{cfg.by} labels; with curriculum.by={cfg.by} use {', '.join(labels)}"
        )


def _check_together(cfg: Config, where: Origins) -> None:
    """Settings that are only valid together with others (single ranges are checked by ``build``)."""
    datasets = cfg.data.eval_datasets
    if not datasets or len(set(datasets)) != len(datasets):
        raise UsageError(
            f"{where.of('data.eval_datasets')}: 'data.eval_datasets' needs one or more distinct "
            f"datasets; got {list(datasets)}"
        )
    if not cfg.reject.require:
        raise UsageError(
            f"{where.of('reject.require')}: 'reject.require' needs ex, em or both: with none, every "
            "answer that follows the protocol would count as correct"
        )
    try:
        folder_name(cfg.run, "run")
    except UsageError as exc:
        raise UsageError(f"{where.of('run')}: {exc}") from None
    if cfg.evaluate.vote > 1 and cfg.sample.temperature == 0:
        raise UsageError(
            f"{where.of('evaluate.vote')}: 'evaluate.vote={cfg.evaluate.vote}' votes over samples, "
            "which at sample.temperature=0 are all the greedy answer: set a temperature, or vote: 1"
        )
    if not re.fullmatch(r"cpu|cuda(:\d+)?", cfg.model.device):
        raise UsageError(
            f"{where.of('model.device')}: 'model.device' must be cpu, cuda or cuda:N; "
            f"got {cfg.model.device!r}"
        )
    if cfg.rl.val_pick == "best" and cfg.rl.val_every < 1:
        raise UsageError(
            f"{where.of('rl.val_pick')}: 'rl.val_pick' is best but nothing is validated; set "
            "rl.val_every to N > 0 (validate every N steps) or rl.val_pick: last"
        )
    if cfg.sft.node_rank >= cfg.sft.nnodes:
        raise UsageError(
            f"{where.of('sft.node_rank')}: 'sft.node_rank' must be below sft.nnodes={cfg.sft.nnodes} "
            f"(ranks count from 0); got {cfg.sft.node_rank}"
        )


def _check_context(cfg: Config, where: Origins) -> None:
    """What one assistant message may generate fits in the model's context (when it is known)."""
    context = model_context(cfg.model.name)
    if context is None:
        return
    for key, value in (
        ("sample.max_new_tokens", cfg.sample.max_new_tokens),
        ("rl.max_message_tokens", cfg.rl.max_message_tokens),
    ):
        if value is not None and value > context:
            raise UsageError(
                f"{where.of(key)}: '{key}' must be <= {context}, the context of model "
                f"{cfg.model.name!r} (max_position_embeddings); got {value}"
            )
