"""Configuration: YAML files plus dotted command-line overrides, validated into frozen dataclasses.

    cfg = load_config("configs/profiles/tiny.yaml", ["sample.n=8", "env.max_turns=6"])

Every knob of every stage lives in one section dataclass below, with its default. An unknown key or
a value of the wrong type is a ``UsageError`` naming the key, the file and the closest valid key.
A profile may start with ``base: other.yaml`` (relative to itself) to inherit and override.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mtsql.errors import UsageError


@dataclass(frozen=True)
class DataConfig:
    """Which data a run uses. ``root: null`` means $MTSQL_DATA (else the packaged fixture)."""

    root: str | None = None
    train_dataset: str = "cosql"
    train_split: str = "train"
    train_limit: int | None = None  # first N interactions (a slice for small profiles)
    eval_datasets: tuple[str, ...] = ("cosql", "sparc")
    eval_split: str = "dev"
    eval_limit: int | None = None


@dataclass(frozen=True)
class SqlConfig:
    """The SQL sandbox and the evaluator."""

    timeout_s: float = 5.0
    max_rows: int = 10_000
    semantics: str = "official"  # official | strict
    exec_semantics: str = "testsuite"  # testsuite | sparc


@dataclass(frozen=True)
class EnvConfig:
    """The agent environment (FACTS §6)."""

    mode: str = "long"  # long (tools, verification) | short (direct SQL answer)
    max_turns: int = 4  # assistant messages per question
    memory: str = "gold"  # gold (the paper's oracle) | predicted (the agent's own answers)
    result_chars: int = 200  # rendered result preview in an observation
    sample_values: int = 3  # example values per column in the schema prompt
    thinking: bool = True


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights (FACTS §6-7). ``family``: process | outcome | sqlr1."""

    family: str = "process"
    ex: float = 1.0
    em: float = 1.0
    exec_verify: float = 0.1
    coherence: float = 0.1
    clause_f1: float = 0.8
    format: float = 0.0


@dataclass(frozen=True)
class ModelConfig:
    """A model: an alias known to ``mtsql models`` (smollm2-135m, tiny-qwen3), an HF id or a folder."""

    name: str = "smollm2-135m"
    template: str = "qwen3_nothink"  # LLaMA-Factory template of this chat format
    dtype: str = "auto"  # sampling: float32 on CPU, bfloat16 on CUDA (hf), vLLM's auto; local RL trains in float32
    device: str = "cpu"  # hf backend: cpu | cuda | cuda:N


@dataclass(frozen=True)
class SampleConfig:
    """Trajectory sampling (rollout)."""

    policy: str = "model"  # model | gold | gold_with_correction
    backend: str = "hf"  # hf | vllm | openai
    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    batch_size: int = 16
    seed: int = 0
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_model: str | None = None  # the name the server serves the model under (default: its path or id)
    openai_concurrency: int = 8
    openai_timeout_s: float = 120.0


@dataclass(frozen=True)
class RejectConfig:
    """Difficulty-aware reject sampling (FACTS §6)."""

    require: tuple[str, ...] = ("ex", "em")
    keep_easy: int = 2
    keep_hard: int = 3


@dataclass(frozen=True)
class SftConfig:
    """LLaMA-Factory SFT (FACTS §4)."""

    finetuning_type: str = "lora"  # lora | full
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_target: str = "all"  # LLaMA-Factory: all linear layers, or comma-separated module names
    cutoff_len: int = 4096
    learning_rate: float = 1e-4
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.0
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 1
    grad_accum: int = 4
    rounds: int = 3
    first_round_policy: str = "model"  # model | gold | gold_with_correction
    heldout: int = 32  # eval turns scored after each round
    nnodes: int = 1
    nproc_per_node: int = 1
    node_rank: int = 0  # this machine's rank when nnodes > 1 (override per node: sft.node_rank=1)
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    use_cpu: bool = True
    bf16: bool = False  # bf16 autocast; on CPU it needs AVX512-BF16/AMX to be faster than float32
    gradient_checkpointing: bool = True  # off: no activation recompute, more memory (fine for small models)


@dataclass(frozen=True)
class CurriculumConfig:
    """How the RL pool is cut into ordered stages."""

    by: str = "hardness"  # hardness | turn | pass_rate
    stages: tuple[tuple[str, ...], ...] = (("easy", "medium"), ("hard",), ("extra",))
    drop_solved: bool = True


@dataclass(frozen=True)
class RlConfig:
    """GRPO (FACTS §5-6); ``engine: auto`` = verl when CUDA is visible, else local."""

    engine: str = "auto"  # auto | verl | local
    n: int = 5
    lr: float = 1e-6
    kl_coef: float = 0.0
    clip_ratio: float = 0.2
    steps_per_stage: int = 60
    batch_size: int = 256
    mini_batch_size: int = 256
    max_prompt_len: int = 4000
    max_response_len: int = 8000
    temperature: float = 1.0
    lora_rank: int = 0  # 0 = full parameters
    n_gpus_per_node: int = 4
    nnodes: int = 1
    ray_address: str | None = None
    rollout_name: str = "vllm"
    lora_alpha: int = 32
    micro_batch_size_per_gpu: int = 1  # verl: actor update and log-prob micro-batches
    rollout_tp: int = 1  # tensor parallel size of the vllm/sglang rollout server
    gpu_memory_utilization: float = 0.5  # share of GPU memory the rollout server may take
    max_turn_tokens: int | None = None  # cap per assistant message (None: the remaining response budget)


@dataclass(frozen=True)
class EvaluateConfig:
    """Scoring a model on the eval sets."""

    limit: int | None = None
    vote: int = 1  # >1: self-consistency voting over this many samples by execution result


@dataclass(frozen=True)
class Config:
    """A whole resolved configuration (what a profile YAML describes)."""

    run: str = "default"
    runs_dir: str = "runs"
    seed: int = 0
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


# ---------------------------------------------------------------------------------------------
# Loading and validation


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML profile (with ``base:`` inheritance), apply ``a.b=value`` overrides, validate."""
    raw: dict = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = _read_yaml_chain(Path(path), seen=())
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"override {item!r}: expected key.sub=value")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise UsageError(f"override {item!r}: value is not valid YAML ({exc.__class__.__name__})") from None
        _set_dotted(raw, key.strip().split("."), value)
    return build(Config, raw, source=source, prefix="")


def to_dict(cfg: Any) -> Any:
    """A config (or section) as plain YAML-able data: tuples become lists."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    return cfg


def replace(cfg: Config, **sections: dict) -> Config:
    """A copy of ``cfg`` with some fields of some sections changed: replace(cfg, sample={"n": 4})."""
    changed = {}
    for name, values in sections.items():
        current = getattr(cfg, name)
        changed[name] = dataclasses.replace(current, **values) if dataclasses.is_dataclass(current) else values
    return dataclasses.replace(cfg, **changed)


def _read_yaml_chain(path: Path, seen: tuple[Path, ...]) -> dict:
    path = path.expanduser()
    if path.resolve() in seen:
        raise UsageError(f"{path}: 'base:' chain loops back to itself")
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    parent = _read_yaml_chain(path.parent / base, seen + (path.resolve(),))
    return _deep_merge(parent, data)


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _set_dotted(tree: dict, keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        node = tree.get(key)
        if not isinstance(node, dict):
            node = tree[key] = {}
        tree = node
    tree[keys[-1]] = value


def build(cls: type, raw: Any, *, source: str, prefix: str) -> Any:
    """Validate a mapping into dataclass ``cls``; errors name the dotted key and the source file."""
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UsageError(f"{source}: '{where}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            raise UsageError(f"{source}: unknown key '{prefix}{key}'{hint}")
        values[key] = _coerce(hints[key], value, source=source, key=f"{prefix}{key}")
    return cls(**values)


def _coerce(tp: Any, value: Any, *, source: str, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return build(tp, value if value is not None else {}, source=source, prefix=f"{key}.")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, source=source, key=key)
            except UsageError as exc:
                errors.append(exc)
        raise errors[-1]
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            value = [value]
        inner = args[0] if args else Any
        return tuple(_coerce(inner, v, source=source, key=key) for v in value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # PyYAML reads `1e-6` (no dot) as a string
        with contextlib.suppress(ValueError):  # not a number: the type error below names the key
            return float(value)
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise UsageError(f"{source}: '{key}' must be {tp.__name__}, got {value!r} ({type(value).__name__})")
    return value
