"""The whole configuration: every section, composed from the modules that own them, and ``load_config``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from mtsql.base.config import (
    _CONTEXT_READERS,
    Range,
    _Origins,
    _read_yaml_chain,
    _set_dotted,
    build,
    operational,
    replace,
    result,
)
from mtsql.base.errors import UsageError
from mtsql.base.paths import folder_name
from mtsql.base.provenance import cpu_has_fast_bf16
from mtsql.base.slices import CURRICULUM_LABELS
from mtsql.base.trackers import TrackersConfig
from mtsql.base.user_yaml import parse_yaml
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.data.settings import DataConfig
from mtsql.core.rewards import RewardConfig
from mtsql.engines.backends.settings import SampleConfig
from mtsql.engines.llamafactory.settings import SftConfig
from mtsql.engines.models.settings import ModelConfig
from mtsql.engines.rl_settings import RlConfig
from mtsql.stages.curriculum import CurriculumConfig
from mtsql.stages.evaluate import EvaluateConfig
from mtsql.stages.reject import RejectConfig


@dataclass(frozen=True)
class Config:
    """A whole resolved configuration (what a profile YAML describes)."""

    run: str = operational("default")  # where results are stored, not what they are
    runs_dir: str = operational("runs")
    seed: Annotated[int, Range(0, 2**32 - 1)] = result(0)  # every sampling, shuffling and training seed derives
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


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML profile (with ``base:`` inheritance), apply ``a.b=value`` overrides, validate.

    Every error names the key and where its value came from: the file that set it, or the override."""
    raw: dict = {}
    origins: dict[str, str] = {}
    if path is not None:
        raw = _read_yaml_chain(Path(path), (), origins)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"override {item!r}: expected key.sub=value")
        value = parse_yaml(text, f"override {item!r}") if text.strip() else None
        _set_dotted(raw, key.strip().split("."), value)
        origins[key.strip()] = f"override {item!r}"
    where = _Origins(origins, str(path) if path is not None else "<defaults>")
    cfg = build(Config, raw, source=where, prefix="")
    _check_curriculum(cfg.curriculum, where)
    _check_together(cfg, where)
    _check_context(cfg, where)
    if cfg.sft.bf16 == "auto":  # resolved here, so config.yaml and the fingerprint show what runs
        cfg = replace(cfg, sft={"bf16": not cfg.sft.use_cpu or cpu_has_fast_bf16()})
    return cfg


def _check_curriculum(cfg: CurriculumConfig, where: _Origins) -> None:
    if not cfg.stages or not all(cfg.stages):
        raise UsageError(f"{where.of('curriculum.stages')}: 'curriculum.stages' needs at least one stage and a "
                         f"label in each; got {[list(stage) for stage in cfg.stages]}")
    labels = CURRICULUM_LABELS[cfg.by]
    stray = sorted({label for stage in cfg.stages for label in stage} - set(labels))
    if stray:
        raise UsageError(f"{where.of('curriculum.stages')}: 'curriculum.stages' has {stray}, which are not "
                         f"{cfg.by} labels; with curriculum.by={cfg.by} use {', '.join(labels)}")


def _check_together(cfg: Config, where: _Origins) -> None:
    """Settings that are only valid together with others (single ranges are checked by ``build``)."""
    datasets = cfg.data.eval_datasets
    if not datasets or len(set(datasets)) != len(datasets):
        raise UsageError(f"{where.of('data.eval_datasets')}: 'data.eval_datasets' needs one or more distinct "
                         f"datasets; got {list(datasets)}")
    if not cfg.reject.require:
        raise UsageError(f"{where.of('reject.require')}: 'reject.require' needs ex, em or both: with none, every "
                         "answer that follows the protocol would count as correct")
    try:
        folder_name(cfg.run, "run")
    except UsageError as exc:
        raise UsageError(f"{where.of('run')}: {exc}") from None
    if cfg.evaluate.vote > 1 and cfg.sample.temperature == 0:
        raise UsageError(f"{where.of('evaluate.vote')}: 'evaluate.vote={cfg.evaluate.vote}' votes over samples, "
                         "which at sample.temperature=0 are all the greedy answer: set a temperature, or vote: 1")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", cfg.model.device):
        raise UsageError(f"{where.of('model.device')}: 'model.device' must be cpu, cuda or cuda:N; "
                         f"got {cfg.model.device!r}")
    if cfg.rl.val_pick == "best" and cfg.rl.val_every < 1:
        raise UsageError(f"{where.of('rl.val_pick')}: 'rl.val_pick' is best but nothing is validated; set "
                         "rl.val_every to N > 0 (validate every N steps) or rl.val_pick: last")
    if cfg.sft.node_rank >= cfg.sft.nnodes:
        raise UsageError(f"{where.of('sft.node_rank')}: 'sft.node_rank' must be below sft.nnodes={cfg.sft.nnodes} "
                         f"(ranks count from 0); got {cfg.sft.node_rank}")


def _check_context(cfg: Config, where: _Origins) -> None:
    """What one assistant message may generate fits in the model's context (when it is known)."""
    context = _CONTEXT_READERS[0](cfg.model.name) if _CONTEXT_READERS else None
    if context is None:
        return
    for key, value in (("sample.max_new_tokens", cfg.sample.max_new_tokens),
                       ("rl.max_message_tokens", cfg.rl.max_message_tokens)):
        if value is not None and value > context:
            raise UsageError(f"{where.of(key)}: '{key}' must be <= {context}, the context of model "
                             f"{cfg.model.name!r} (max_position_embeddings); got {value}")
