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
from typing import Any, Literal

import yaml

from mtsql.errors import UsageError
from mtsql.files import read_text
from mtsql.provenance import cpu_has_fast_bf16
from mtsql.sql.hardness import HARDNESS_LEVELS
from mtsql.sql.metrics import TURN_BUCKETS

# Choice-valued settings: a value outside these is a config error when the config loads.
Dataset = Literal["sparc", "cosql", "spider"]
Split = Literal["dev", "train"]
Policy = Literal["model", "gold", "gold_with_correction"]
Logger = Literal["none", "tensorboard", "wandb"]
CURRICULUM_LABELS = {"hardness": HARDNESS_LEVELS, "turn": TURN_BUCKETS, "pass_rate": ("high", "low", "zero")}


@dataclass(frozen=True)
class DataConfig:
    """Which data a run uses. ``root: null`` means $MTSQL_DATA (else the packaged fixture)."""

    root: str | None = None
    train_dataset: Dataset = "cosql"
    train_split: Split = "train"
    train_limit: int | None = None  # first N interactions (a slice for small profiles)
    train_flatten: bool = False  # every training turn as a question of its own, without its dialogue
    eval_datasets: tuple[Dataset, ...] = ("cosql", "sparc")
    eval_split: Split = "dev"
    eval_limit: int | None = None  # N interactions, picked by eval_pick
    eval_pick: Literal["first", "spread"] = "first"  # spread: one database after another, those with a file


@dataclass(frozen=True)
class SqlConfig:
    """The SQL sandbox and the evaluator."""

    timeout_s: float = 5.0
    max_rows: int = 10_000
    semantics: Literal["official", "strict"] = "official"
    exec_semantics: Literal["testsuite", "sparc"] = "testsuite"


@dataclass(frozen=True)
class EnvConfig:
    """The agent environment (docs/protocol.md)."""

    mode: Literal["long", "short"] = "long"  # long: tools and verification; short: a direct SQL answer
    max_turns: int = 4  # assistant messages per question
    max_invalid: int | None = None  # end the episode after this many unparseable messages in a row
    memory: Literal["gold", "predicted"] = "gold"  # gold: the paper's oracle; predicted: the agent's own answers
    result_chars: int = 200  # rendered result preview in an observation
    sample_values: int = 3  # example values per column in the schema prompt
    thinking: bool = True


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights (``mtsql.rewards``): ``family`` picks the total a trajectory is trained on."""

    family: Literal["process", "outcome", "sqlr1"] = "process"
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
    template: Literal["qwen3_nothink", "qwen3"] = "qwen3_nothink"  # LLaMA-Factory template of this chat format
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # sampling: float32 on CPU, bfloat16 on
                                                                       # CUDA (hf), vLLM's auto; local RL trains in float32
    device: str = "cpu"  # hf backend: cpu | cuda | cuda:N


@dataclass(frozen=True)
class SampleConfig:
    """Trajectory sampling (rollout)."""

    policy: Policy = "model"
    backend: Literal["hf", "vllm", "openai"] = "hf"
    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    batch_size: int = 16
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_model: str | None = None  # the name the server serves the model under (default: its path or id)
    openai_concurrency: int = 8
    openai_timeout_s: float = 120.0


@dataclass(frozen=True)
class RejectConfig:
    """Difficulty-aware reject sampling (``mtsql.stages.reject``)."""

    require: tuple[Literal["ex", "em"], ...] = ("ex", "em")
    keep_easy: int = 2
    keep_hard: int = 3


@dataclass(frozen=True)
class SftConfig:
    """LLaMA-Factory SFT (``mtsql.integrations.llamafactory``)."""

    finetuning_type: Literal["lora", "full", "freeze"] = "lora"  # freeze: only the last freeze_layers train
    freeze_layers: int = 0  # freeze: how many of the model's last decoder layers train (the rest stay fixed)
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
    first_round_policy: Policy = "model"
    heldout: int = 32  # eval turns scored after each round
    nnodes: int = 1
    nproc_per_node: int = 1
    node_rank: int = 0  # this machine's rank when nnodes > 1 (override per node: sft.node_rank=1)
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    use_cpu: bool = True
    bf16: bool | Literal["auto"] = False  # bf16 autocast; auto: on GPUs, and on CPUs with AVX512-BF16 or AMX
                                          # (elsewhere bf16 is emulated and slower than float32)
    gradient_checkpointing: bool = True  # off: no activation recompute, more memory (fine for small models)
    deepspeed: Literal["none", "z2", "z3", "z3_offload"] = "none"  # DeepSpeed ZeRO stage (GPU, through torchrun)
    logger: Logger = "none"  # tensorboard logs go to the SFT artifact's tensorboard/
    extra: dict[str, Any] = field(default_factory=dict)  # more LLaMA-Factory YAML keys, merged into train.yaml
    extra_override: bool = False  # let sft.extra replace keys mtsql sets (else that is an error)


@dataclass(frozen=True)
class CurriculumConfig:
    """How the RL pool is cut into ordered stages."""

    by: Literal["hardness", "turn", "pass_rate"] = "hardness"
    stages: tuple[tuple[str, ...], ...] = (("easy", "medium"), ("hard",), ("extra",))
    drop_solved: bool = True


@dataclass(frozen=True)
class RlConfig:
    """GRPO (``mtsql.stages.rl``); ``engine: auto`` = verl when CUDA is visible, else local."""

    engine: Literal["auto", "verl", "local"] = "auto"
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
    freeze_layers: int = 0  # local engine: only the last freeze_layers decoder layers train (0: every weight)
    n_gpus_per_node: int = 4
    nnodes: int = 1
    ray_address: str | None = None
    rollout_name: Literal["vllm", "sglang"] = "vllm"
    lora_alpha: int = 32
    micro_batch_size_per_gpu: int = 1  # verl: actor update and log-prob micro-batches
    rollout_tp: int = 1  # tensor parallel size of the vllm/sglang rollout server
    gpu_memory_utilization: float = 0.5  # share of GPU memory the rollout server may take
    max_turn_tokens: int | None = None  # cap per assistant message (None: the remaining response budget)
    logger: Logger = "none"  # besides the metrics file (verl engine)
    extra: tuple[str, ...] = ()  # more Hydra overrides for verl's main_ppo, appended to the command
    extra_override: bool = False  # let rl.extra replace overrides mtsql sets (else that is an error)


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
    seed: int = 0  # every sampling, shuffling and training seed derives from it
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
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise UsageError(f"override {item!r}: value is not valid YAML ({exc.__class__.__name__})") from None
        _set_dotted(raw, key.strip().split("."), value)
        origins[key.strip()] = f"override {item!r}"
    where = _Origins(origins, str(path) if path is not None else "<defaults>")
    cfg = build(Config, raw, source=where, prefix="")
    _check_curriculum(cfg.curriculum, where)
    if cfg.sft.bf16 == "auto":  # resolved here, so config.yaml and the fingerprint show what runs
        cfg = replace(cfg, sft={"bf16": not cfg.sft.use_cpu or cpu_has_fast_bf16()})
    return cfg


class _Origins:
    """Where each dotted key's value came from (a file or an override), for error messages."""

    def __init__(self, origins: dict[str, str], default: str):
        self.origins, self.default = origins, default

    def of(self, key: str) -> str:
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found:
                return found
        return self.default


def _check_curriculum(cfg: CurriculumConfig, where: _Origins) -> None:
    labels = CURRICULUM_LABELS[cfg.by]
    stray = sorted({label for stage in cfg.stages for label in stage} - set(labels))
    if stray:
        raise UsageError(f"{where.of('curriculum.stages')}: 'curriculum.stages' has {stray}, which are not "
                         f"{cfg.by} labels; with curriculum.by={cfg.by} use {', '.join(labels)}")


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


def _read_yaml_chain(path: Path, seen: tuple[Path, ...], origins: dict[str, str]) -> dict:
    path = path.expanduser()
    if path.resolve() in seen:
        raise UsageError(f"{path}: 'base:' chain loops back to itself")
    try:
        text = read_text(path)
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
    parent = {} if base is None else _read_yaml_chain(path.parent / base, seen + (path.resolve(),), origins)
    origins.update(dict.fromkeys(_leaf_keys(data), str(path)))
    return _deep_merge(parent, data)


def _leaf_keys(tree: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        keys += _leaf_keys(value, f"{dotted}.") if isinstance(value, dict) and value else [dotted]
    return keys


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


def build(cls: type, raw: Any, *, source: str | _Origins, prefix: str) -> Any:
    """Validate a mapping into dataclass ``cls``; errors name the dotted key and where it came from."""
    where = source if isinstance(source, _Origins) else _Origins({}, source)
    name = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UsageError(f"{where.of(name)}: '{name}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            raise UsageError(f"{where.of(f'{prefix}{key}')}: unknown key '{prefix}{key}'{hint}")
        values[key] = _coerce(hints[key], value, where=where, key=f"{prefix}{key}")
    return cls(**values)


def _coerce(tp: Any, value: Any, *, where: _Origins, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return build(tp, value if value is not None else {}, source=where, prefix=f"{key}.")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"{where.of(key)}: '{key}' must be a mapping, got {value!r} ({type(value).__name__})")
        return dict(value)
    if origin is Literal:
        if value not in args:
            raise UsageError(f"{where.of(key)}: '{key}' must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where=where, key=key)
            except UsageError as exc:
                errors.append(exc)
        raise errors[-1]
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            value = [value]
        inner = args[0] if args else Any
        return tuple(_coerce(inner, v, where=where, key=key) for v in value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # PyYAML reads `1e-6` (no dot) as a string
        with contextlib.suppress(ValueError):  # not a number: the type error below names the key
            return float(value)
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise UsageError(f"{where.of(key)}: '{key}' must be {tp.__name__}, got {value!r} ({type(value).__name__})")
    return value


class UndeclaredSection(AttributeError):
    """A stage read a config section it did not declare: its fingerprint would miss that input."""


class ConfigView:
    """A stage's view of a config: only the sections the stage declares (``SECTIONS``) can be read.

    What a stage reads and what its fingerprint covers are the same thing by construction: the runner
    hashes ``view.hashed()``, and reading any other section raises ``UndeclaredSection``. ``run`` and
    ``runs_dir`` (where results are stored, not what they are) are always readable; ``data_root`` is
    the resolved data folder, always hashed.
    """

    STORAGE = ("run", "runs_dir")

    def __init__(self, cfg: Config, sections: typing.Iterable[str], *, owner: str, data_root: Path):
        unknown = set(sections) - {f.name for f in dataclasses.fields(Config)}
        if unknown:
            raise ValueError(f"{owner}: SECTIONS names unknown config sections {sorted(unknown)}")
        self._cfg, self._sections, self._owner = cfg, tuple(sections), owner
        self.data_root = Path(data_root)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._sections or name in self.STORAGE:
            return getattr(self._cfg, name)
        raise UndeclaredSection(f"{self._owner} reads config section '{name}' but its SECTIONS "
                                f"{self._sections} do not declare it, so its fingerprint would not cover it")

    def replace(self, **sections: dict) -> ConfigView:
        """A view of a config with some fields of declared sections changed: ``view.replace(sample={"n": 1})``."""
        for name in sections:
            getattr(self, name)  # only declared sections may change
        return ConfigView(replace(self._cfg, **sections), self._sections, owner=self._owner, data_root=self.data_root)

    def hashed(self) -> dict:
        """What a fingerprint covers: the declared sections and the data folder."""
        return {**{name: to_dict(getattr(self._cfg, name)) for name in self._sections},
                "data_root": str(self.data_root)}
