"""Configuration: YAML files plus dotted command-line overrides, validated into frozen dataclasses.

    cfg = load_config("configs/profiles/tiny.yaml", ["sample.n=8", "env.max_messages=6"])

Every knob of every stage lives in one section dataclass below, with its default. An unknown key, a
value of the wrong type or outside its bounds (every size has a ceiling: ``Range.most``) is a
``UsageError`` naming the key, the file and the closest valid key or the bound. A profile may start
with ``base: other.yaml`` (relative to itself) to inherit and override.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from mtsql.base.errors import UsageError
from mtsql.base.paths import bird_dir, folder_name
from mtsql.base.provenance import cpu_has_fast_bf16, data_digest
from mtsql.base.slices import CURRICULUM_LABELS
from mtsql.base.user_yaml import parse_yaml, read_yaml

# Choice-valued settings: a value outside these is a config error when the config loads.
Dataset = Literal["sparc", "cosql", "spider", "spider_dk", "spider_syn", "spider_realistic", "bird"]
Split = Literal["dev", "train"]
Policy = Literal["model", "gold", "gold_with_correction", "gold_grounded", "own_mistakes"]


@dataclass(frozen=True)
class Range:
    """The bounds of a numeric setting, checked when the config loads: ``low`` and ``high`` are
    inclusive unless ``low_open`` / ``high_open``; None is unbounded. ``most``: a ceiling that is no part of
    the setting's meaning, only far above any sensible value (a size with a few zeros too many)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    most: float | None = None

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below and (self.most is None or value <= self.most)

    def broken_by(self, value: float) -> str:
        """The bound ``value`` breaks, as the error says it: ``>= 1``, ``in (0, 1]``, ``<= 1024``."""
        return f"<= {self.most}" if self.most is not None and value > self.most else str(self)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


# Numeric settings with a range (a value outside it is a config error when the config loads).
AtLeast1 = Annotated[int, Range(1)]  # counts, sizes, lengths: 0 would be no work at all
AtLeast0 = Annotated[int, Range(0)]
Positive = Annotated[float, Range(0, low_open=True)]
NonNegative = Annotated[float, Range(0)]
Share = Annotated[float, Range(0, 1, low_open=True)]  # (0, 1]: a probability mass or a memory share
Port = Annotated[int, Range(1, 65535)]

# Sizes a user types, bounded above as well: a few zeros too many is refused in one line when the config
# loads, before anything is allocated or planned. Each ceiling is far above any run mtsql is meant for.
MAX_TOKENS = 2**20  # 1,048,576: above the context of any model (sample.max_new_tokens is also held to the
                    # model's own context: ``model_context``)
Tokens = Annotated[int, Range(1, most=MAX_TOKENS)]  # token lengths and budgets
Chars = Annotated[int, Range(1, most=10**7)]  # characters of an observation or a result preview
Samples = Annotated[int, Range(1, most=1024)]  # samples (or kept trajectories) per question
Messages = Annotated[int, Range(1, most=1024)]  # assistant messages of one question's episode
Rounds = Annotated[int, Range(1, most=100)]  # self-taught SFT rounds: each is three artifacts
Items = Annotated[int, Range(1, most=10**7)]  # interactions, turns or training steps: the datasets hold ~10**4
Items0 = Annotated[int, Range(0, most=10**7)]
Batch = Annotated[int, Range(1, most=2**16)]  # batch sizes, gradient accumulation, requests in flight
Devices = Annotated[int, Range(1, most=1024)]  # machines, GPUs or processes per machine
Layers = Annotated[int, Range(0, most=1024)]  # decoder layers
Rank = Annotated[int, Range(1, most=2**16)]  # LoRA rank and alpha
Seconds = Annotated[float, Range(0, low_open=True, most=7 * 24 * 3600)]  # timeouts: at most a week


# The fingerprint policy, field by field. A ``result`` setting can change what a stage produces: the
# fingerprint of every stage that reads its section covers it. An ``operational`` setting changes only
# how a stage runs (speed, memory, which machine or port, what it logs, where files are) and is left out,
# so changing it reruns nothing. Every field makes one of the two calls (tests/test_config.py checks).
HASHED = "hashed"


def result(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A setting that can change a stage's output: fingerprints cover it."""
    return field(default=default, metadata={HASHED: True}, **kwargs)


def operational(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A setting that changes how a stage runs, never what it produces: fingerprints leave it out."""
    return field(default=default, metadata={HASHED: False}, **kwargs)


# How many tokens a model's context holds, by ``model.name``, where that is known without building or
# fetching anything (None: not known yet). ``mtsql.engines`` registers the model registry's reader, which
# reads ``max_position_embeddings`` from the model folder's config.json.
_CONTEXT_READERS: list[typing.Callable[[str], int | None]] = []


def context_reader(read: typing.Callable[[str], int | None]) -> typing.Callable[[str], int | None]:
    """Register how the config learns a model's context (``sample.max_new_tokens`` is held to it)."""
    _CONTEXT_READERS[:] = [read]
    return read


# Engine-owned sub-sections. A section with a ``SELECTOR`` (``sample.backend``, ``rl.engine``) holds one
# sub-section per engine registered for it (``sample.vllm``, ``rl.verl``): each engine declares its own
# settings dataclass next to its code (``engines/*/settings.py``) with ``@owned_by(Section, "name")``,
# and the selector's valid values are the registered names. A fingerprint covers the selected engine's
# sub-section only, so a setting of an engine the stage does not run never reruns it.
_ENGINES: dict[type, dict[str, type]] = {}


def owned_by(section: type, name: str) -> typing.Callable[[type], type]:
    """Register a dataclass as the settings of engine ``name`` of ``section`` (read as
    ``cfg.<section>.<name>``)."""
    def register(settings: type) -> type:
        _ENGINES.setdefault(section, {})[name] = settings
        return settings
    return register


def engines_of(section: type) -> dict[str, type]:
    """The engines registered for a section, in registration order (``mtsql.engines`` registers them)."""
    if section not in _ENGINES:
        raise RuntimeError(f"no engine registered its settings for {section.__name__}: import mtsql.engines "
                           "before building a config")
    return _ENGINES[section]


@dataclass(frozen=True)
class EngineOwned:
    """A section whose ``SELECTOR`` field names one of its registered engines; ``cfg.<section>.<engine>``
    is that engine's settings (its defaults where the config sets none)."""

    SELECTOR: typing.ClassVar[str]
    SELECTOR_EXTRA: typing.ClassVar[tuple[str, ...]] = ()  # values resolved before a stage runs (auto)
    owned: dict[str, Any] = field(default_factory=dict, metadata={HASHED: True}, repr=False)

    def __post_init__(self) -> None:
        given = dict(self.owned)
        object.__setattr__(self, "owned", {name: given.get(name) or settings()
                                           for name, settings in engines_of(type(self)).items()})

    def __getattr__(self, name: str) -> Any:
        owned = self.__dict__.get("owned", {})
        if name in owned:
            return owned[name]
        raise AttributeError(f"{type(self).__name__} has no setting or engine {name!r}")

    def choices(self) -> tuple[str, ...]:
        return (*self.SELECTOR_EXTRA, *engines_of(type(self)))

    def selected(self) -> str | None:
        """The engine the selector names (None while it is still ``auto``)."""
        name = getattr(self, self.SELECTOR)
        return name if name in self.owned else None

    def with_engine(self, name: str, **settings: Any) -> EngineOwned:
        """A copy with some of engine ``name``'s settings changed."""
        return dataclasses.replace(self, owned={**self.owned, name: dataclasses.replace(self.owned[name], **settings)})


@dataclass(frozen=True)
class DataConfig:
    """Which data a run uses. ``root: null`` means $MTSQL_DATA (else the packaged fixture)."""

    root: str | None = operational(None)  # where the data is: fingerprints hash what it holds (data_digest)
    require_full: bool = operational(False)  # refuse the packaged fixture subset (profiles whose numbers need the
                                             # full data); a check, and the data digest tells the two apart
    train_dataset: Dataset = result("cosql")
    train_split: Split = result("train")
    train_limit: Items | None = result(None)  # first N interactions (a slice for small profiles)
    train_flatten: bool = result(False)  # every training turn as a question of its own, without its dialogue
    per_dataset: bool = operational(False)  # `mtsql run`: one model per eval dataset that has a train split (run
                                            # <run>-<dataset>, scored on that dataset), as MTSQL-R1's release trains;
                                            # eval datasets without one are scored by train_dataset's model. Only the
                                            # pipeline reads it: each run's stages see its datasets in the fields above
    eval_datasets: tuple[Dataset, ...] = result(("cosql", "sparc"))
    eval_if_present: tuple[Dataset, ...] = result(())  # also scored when the data folder holds their eval split
    eval_split: Split = result("dev")
    eval_limit: Items | None = result(None)  # N interactions, picked by eval_pick
    eval_pick: Literal["first", "spread"] = result("first")  # spread: one database after another, those with a file


@dataclass(frozen=True)
class SqlConfig:
    """The SQL sandbox and the evaluator."""

    timeout_s: Seconds = result(5.0)  # a query that runs longer fails: it decides observations and scores
    max_rows: Items = result(10_000)
    semantics: Literal["official", "strict"] = result("official")
    exec_semantics: Literal["testsuite", "sparc"] = result("testsuite")


@dataclass(frozen=True)
class EnvConfig:
    """The agent environment (docs/protocol.md)."""

    mode: Literal["long", "short"] = result("long")  # long: tools and verification; short: a direct SQL answer
    max_messages: Messages = result(4)  # assistant messages per question (a dialogue turn's episode)
    max_invalid: Messages | None = result(None)  # end the episode after this many unparseable messages in a row
    memory: Literal["gold", "predicted"] = result("gold")  # gold: the paper's oracle; predicted: the agent's own
                                                           # answers
    result_chars: Chars = result(200)  # rendered result preview in an observation
    sample_values: Annotated[int, Range(0, most=1000)] = result(3)  # example values per column in the schema prompt
    thinking: bool = result(True)
    protocol: Literal["mtsql", "release"] = result("mtsql")  # release: the released MTSQL-R1 checkpoints' tool
                                                             # calls (exec_sql(code), memory_retrieve(code)) and
                                                             # observation shape, first call of a message run
                                                             # (docs/paper.md)
    # cap on a whole observation, cut in the middle (release RL: 8000); at least
    # agent.env.MIN_OBSERVATION_CHARS
    observation_chars: Annotated[int, Range(100, most=10**7)] | None = result(None)
    error_hint: bool = result(False)  # an exec_sql error for a missing table / column also names the tables /
                                      # columns that exist, as a database client would; default off until the
                                      # warm-start ablation measures it (configs/experiments/warmstart-ablation.yaml)


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights (``mtsql.core.rewards``): ``family`` picks the total a trajectory is trained on."""

    family: Literal["process", "outcome", "sqlr1"] = result("process")
    ex: float = result(1.0)
    em: float = result(1.0)
    exec_verify: float = result(0.1)
    coherence: float = result(0.1)
    clause_f1: float = result(0.8)  # weight of the clause score (clause_score picks which)
    format: float = result(0.0)
    clause_score: Literal["f1", "release"] = result("f1")  # f1: micro F1 of clause items over every proposed
                                                          # query, the answer included; release: MTSQL-R1's
                                                          # per-clause 0/1 average of the Spider parse over the
                                                          # tool calls' SQL
    empty_match_credit: bool = result(True)  # false: a prediction matching a gold with an empty (or all-NULL)
                                             # result earns no EX / result credit (sql.vacuous)


@dataclass(frozen=True)
class ModelConfig:
    """A model: an alias known to ``mtsql models`` (smollm2-135m, tiny-qwen3, tiny-qwen25, tiny-llama3), an HF
    id or a folder."""

    name: str = result("smollm2-135m")
    # the chat family (mtsql.core.chat_format), by the name of LLaMA-Factory's template SFT uses:
    # qwen3_nothink / qwen3 (Qwen3 without / with thinking), qwen (Qwen2.5, Qwen2.5-Coder, OmniSQL), llama3;
    # auto: the model's own tokenizer.chat_template (LLaMA-Factory parses it)
    template: Literal["qwen3_nothink", "qwen3", "qwen", "llama3", "auto"] = result("qwen3_nothink")
    # sampling with auto: float32 on CPU and bfloat16 on CUDA (hf), vLLM's own choice (vllm); the local RL
    # engine trains in this dtype, and in float32 for auto
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = result("auto")
    device: str = result("cpu")  # hf backend: cpu | cuda | cuda:N (the device picks dtype auto's dtype and kernels)


@dataclass(frozen=True)
class SampleConfig(EngineOwned):
    """Trajectory sampling (rollout); ``sample.<backend>`` holds the backend's own settings."""

    SELECTOR = "backend"

    policy: Policy = result("model")
    correction_share: Share = result(1.0)  # gold_with_correction: the share of trajectories that first run a wrong
                                           # variant; the others run the gold at once
    failure_share: Share = result(0.586)  # gold_grounded: the share of trajectories whose first query fails in a
                                          # way the result shows, then is corrected (policies.MEASURED_FAILURE_SHARE:
                                          # the share of failed exec_sql turns the SFT model meets)
    backend: str = result("hf")  # a registered generation backend (engines/backends/settings.py: hf, vllm, openai);
                                 # its settings are sample.<backend>
    n: Samples = result(1)
    temperature: NonNegative = result(0.7)  # 0: greedy
    top_p: Share = result(1.0)
    max_new_tokens: Tokens = result(512)
    batch_size: Batch = operational(16)  # conversations per backend call: each record's seed derives from its
                                         # turn, sample and message, so records do not depend on batching


@dataclass(frozen=True)
class RejectConfig:
    """Difficulty-aware reject sampling (``mtsql.stages.reject``)."""

    require: tuple[Literal["ex", "em"], ...] = result(("ex", "em"))
    keep_easy: Samples = result(2)
    keep_hard: Samples = result(3)
    keep_recoveries: bool = result(True)  # a model-written recovery (a failed exec_sql, then a query that ran and
                                          # a right answer) of an item is kept even where the shortest or the
                                          # most diverse choice left it out (measures.revisions.is_recovery)


@dataclass(frozen=True)
class SftConfig:
    """LLaMA-Factory SFT (``mtsql.engines.llamafactory``)."""

    finetuning_type: Literal["lora", "full", "freeze"] = result("lora")  # freeze: only the last trainable_layers
                                                                        # train
    trainable_layers: Layers = result(0)  # freeze: how many of the model's last decoder layers train (the rest
                                          # stay fixed)
    lora_rank: Rank = result(8)
    lora_alpha: Rank = result(16)
    lora_target: str = result("all")  # LLaMA-Factory: all linear layers, or comma-separated module names
    cutoff_len: Tokens = result(4096)
    learning_rate: Positive = result(1e-4)
    lr_scheduler_type: str = result("cosine")
    warmup_ratio: Annotated[float, Range(0, 1, high_open=True)] = result(0.0)
    epochs: Annotated[float, Range(0, low_open=True, most=10_000)] = result(1.0)
    max_steps: Items | None = result(None)
    batch_size: Batch = result(1)  # per device: with grad_accum and the world size, the examples of one step
    grad_accum: Batch = result(4)
    rounds: Rounds = operational(3)  # how many rounds `sft-iterate` runs, not what one round produces
    first_round_policy: Policy = operational("model")  # the pipeline passes it to round 1's sample stage as
                                                       # sample.policy, which that stage's fingerprint covers
    heldout: Items0 = result(32)  # eval turns scored after each round
    nnodes: Devices = result(1)  # the world size (nnodes x nproc_per_node) multiplies the examples of a step
    nproc_per_node: Devices = result(1)
    # this machine's rank when nnodes > 1 (override per node: sft.node_rank=1); every rank must compute the
    # same fingerprint, hence the same folder
    node_rank: Annotated[int, Range(0, most=1023)] = operational(0)
    master_addr: str = operational("127.0.0.1")
    master_port: Port = operational(29500)
    use_cpu: bool = result(True)
    bf16: bool | Literal["auto"] = result(False)  # bf16 autocast; auto: on GPUs, and on CPUs with AVX512-BF16 or
                                                  # AMX (elsewhere bf16 is emulated and slower than float32)
    gradient_checkpointing: bool = operational(True)  # off: no activation recompute, more memory (fine for small
                                                      # models); the same forward and backward math either way
    deepspeed: Literal["none", "z2", "z3", "z3_offload"] = result("none")  # DeepSpeed ZeRO stage (GPU, through
                                                                           # torchrun); its optimizer differs
                                                                           # from torch's
    extra: dict[str, Any] = result(default_factory=dict)  # more LLaMA-Factory YAML keys, merged into train.yaml
    extra_override: bool = operational(False)  # let sft.extra replace keys mtsql sets (else that is an error);
                                               # sft.extra, hashed, holds the values that win


@dataclass(frozen=True)
class CurriculumConfig:
    """How the RL pool is cut into ordered stages."""

    by: Literal["hardness", "turn", "pass_rate"] = result("hardness")
    stages: tuple[tuple[str, ...], ...] = result((("easy", "medium"), ("hard",), ("extra",)))
    drop_solved: bool = result(True)


@dataclass(frozen=True)
class RlConfig(EngineOwned):
    """GRPO (``mtsql.stages.rl``); ``rl.<engine>`` holds the engine's own settings."""

    SELECTOR = "engine"
    SELECTOR_EXTRA = ("auto",)

    engine: str = result("auto")  # a registered RL engine (verl, local: engines/*/settings.py); auto: verl where
                                  # CUDA is visible, else local (resolved before a stage runs)
    n: Samples = result(5)
    lr: Positive = result(1e-6)
    kl_coef: NonNegative = result(0.0)
    clip_ratio: Positive = result(0.2)
    steps_per_stage: Items = result(60)
    # curriculum by epochs: passes over a stage's items, each of items // batch_size steps, at least 1 (None:
    # steps_per_stage)
    epochs_per_stage: Annotated[int, Range(1, most=10_000)] | None = result(None)
    val_every: Items0 = result(0)  # validate on the dev sets (greedy, eval_datasets' eval split) every N steps and
                                   # at the last step of a stage (0: never; mtsql evaluate scores the models
                                   # afterwards); the validations are part of the stage's metrics
    val_limit: Items | None = result(None)  # dialogues per eval dataset in a validation (None: all)
    val_pick: Literal["last", "best"] = result("last")  # a stage's model: its last step's, or the best validated
                                                        # one (highest mean reward; needs val_every)
    batch_size: Batch = result(256)  # questions per GRPO step (unlike sample.batch_size, this is the math)
    mini_batch_size: Batch = result(256)
    max_prompt_len: Tokens = result(4000)
    max_response_len: Tokens = result(8000)
    temperature: Positive = result(1.0)  # GRPO learns from the spread of a group's samples: greedy would have none
    lora_rank: Annotated[int, Range(0, most=2**16)] = result(0)  # 0 = full parameters
    lora_alpha: Rank = result(32)
    micro_batch_size_per_gpu: Batch = operational(1)  # actor update and log-prob micro-batches,
                                                      # accumulated into the same step
    gpu_memory_utilization: Share = operational(0.5)  # share of GPU memory a rollout server may take (verl's, or
                                                      # the local engine's vLLM rollouts)
    max_message_tokens: Tokens | None = result(None)  # cap per assistant message (None: the remaining response
                                                      # budget)


@dataclass(frozen=True)
class TrackersConfig:
    """The dashboards every stage logs to (``base/trackers.py``, docs/trackers.md), each off until turned on;
    readable by every stage (like ``run``), they change what is shown, never what is produced."""

    tensorboard: bool = operational(False)
    wandb: bool = operational(False)  # offline only (WANDB_MODE=offline): `wandb sync` uploads a run by hand
    mlflow: bool = operational(False)
    dir: str | None = operational(None)  # event files, W&B runs, the MLflow store (None: the run folder's trackers/)
    mlflow_uri: str | None = operational(None)  # a file: URI, no server (None: file:<dir>/mlruns)
    project: str = operational("mtsql")  # the W&B project and MLflow experiment


@dataclass(frozen=True)
class EvaluateConfig:
    """Scoring a model on the eval sets."""

    vote: Samples = result(1)  # >1: self-consistency voting over this many samples by execution result
    max_response_tokens: Tokens | None = result(None)  # tokens one turn may generate over all its messages
                                                       # (release: 8000)
    prompt_filter_tokens: Tokens | None = result(None)  # also report the metrics without the items whose prompt
                                                        # is longer, as verl's filter_overlong_prompts drops them
                                                        # (release: 4000)
    samples: Samples = result(1)  # >1: pass@k (k = 1, 2, 4, ..., samples) from this many samples per turn (shared
                                  # with vote)


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


class _Origins:
    """Where each dotted key's value came from (a file or an override), for error messages."""

    def __init__(self, origins: dict[str, str], default: str):
        self.origins, self.default = origins, default

    def of(self, key: str) -> str:
        """The origin of ``key``, of the nearest section above it, else of the last key set below it
        (an unknown section such as ``samp`` comes from wherever ``samp.n`` was set)."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found:
                return found
        below = [origin for dotted, origin in self.origins.items() if dotted.startswith(f"{key}.")]
        return below[-1] if below else self.default


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


def hashed_settings(value: Any) -> Any:
    """What fingerprints cover of a section: its ``result`` fields and, where engines own sub-sections,
    the ``result`` fields of the selected engine's only (a top-level setting: its value)."""
    if not dataclasses.is_dataclass(value):
        return to_dict(value)
    covered = {f.name: to_dict(getattr(value, f.name)) for f in _fields(value) if f.metadata[HASHED]}
    if isinstance(value, EngineOwned) and value.selected():
        covered[value.selected()] = hashed_settings(value.owned[value.selected()])
    return covered


def to_dict(cfg: Any) -> Any:
    """A config (or section) as plain YAML-able data: tuples become lists; each engine's sub-section is a
    key of its section (``sample: {backend: vllm, vllm: {...}, ...}``)."""
    if dataclasses.is_dataclass(cfg):
        out = {f.name: to_dict(getattr(cfg, f.name)) for f in _fields(cfg)}
        if isinstance(cfg, EngineOwned):
            out.update((name, to_dict(settings)) for name, settings in cfg.owned.items())
        return out
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    return cfg


def _fields(section: Any) -> tuple[dataclasses.Field, ...]:
    """A section's own settings (an engine-owned section's ``owned`` is its engines' sub-sections)."""
    return tuple(f for f in dataclasses.fields(section) if f.name != "owned")


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
        data = read_yaml(path) or {}
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is not None and not isinstance(base, str):
        raise UsageError(f"{path}: 'base' names one profile to inherit from (a path relative to this file); "
                         f"got {base!r} ({type(base).__name__})")
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


REMOVED = {  # keys mtsql no longer reads: the error says what to use instead
    "evaluate.limit": "evaluate.limit was never read: data.eval_limit sets how many interactions are scored",
    **{old: f"renamed: use '{new}' ({why})" for old, new, why in (
        ("sft.freeze_layers", "sft.trainable_layers", "it counts the last decoder layers that train"),
        ("rl.freeze_layers", "rl.local.trainable_layers", "it counts the last decoder layers that train"),
        ("env.max_turns", "env.max_messages", "it counts assistant messages; a turn is a dialogue turn"),
        ("rl.max_turn_tokens", "rl.max_message_tokens", "the cap is per assistant message"),
    )},
    **{old: "moved: trackers.tensorboard / trackers.wandb / trackers.mlflow turn each dashboard on, "
            "for every stage"
       for old in ("sft.logger", "rl.logger", "rl.verl.logger")},
    # settings that moved into the sub-section of the engine that reads them
    **{f"{section}.{old}": f"moved: use '{section}.{engine}.{new}' (a setting of the {engine} engine only)"
       for section, engine, names in (
           ("sample", "vllm", ("base_url", "model", "python", "kv_cache_gib", "eager", "args", "start_timeout_s")),
           ("sample", "openai", ("base_url", "model", "concurrency", "timeout_s")),
           ("rl", "verl", ("n_gpus_per_node", "nnodes", "ray_address", "rollout_name", "rollout_tp", "extra",
                           "extra_override")),
           ("rl", "local", ("trainable_layers", "rollout_backend")))
       for new in names for old in ((f"{engine}_{new}",) if section == "sample" else (new,))},
}


def build(cls: type, raw: Any, *, source: str | _Origins, prefix: str) -> Any:
    """Validate a mapping into dataclass ``cls``; errors name the dotted key and where it came from."""
    where = source if isinstance(source, _Origins) else _Origins({}, source)
    name = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UsageError(f"{where.of(name)}: '{name}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in _fields(cls)]
    engines = engines_of(cls) if issubclass(cls, EngineOwned) else {}
    values, owned = {}, {}
    for key, value in raw.items():
        if key in engines:
            owned[key] = build(engines[key], value if value is not None else {}, source=where,
                               prefix=f"{prefix}{key}.")
            continue
        if key not in names:
            names = [*names, *engines]
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            hint = f"; {REMOVED[f'{prefix}{key}']}" if f"{prefix}{key}" in REMOVED else hint
            raise UsageError(f"{where.of(f'{prefix}{key}')}: unknown key '{prefix}{key}'{hint}")
        values[key] = _coerce(hints[key], value, where=where, key=f"{prefix}{key}")
    if not engines:
        return cls(**values)
    section = cls(**values, owned=owned)
    selector = f"{prefix}{cls.SELECTOR}"
    if getattr(section, cls.SELECTOR) not in section.choices():
        raise UsageError(f"{where.of(selector)}: '{selector}' must be one of {', '.join(section.choices())}; "
                         f"got {getattr(section, cls.SELECTOR)!r}")
    return section


def _coerce(tp: Any, value: Any, *, where: _Origins, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return build(tp, value if value is not None else {}, source=where, prefix=f"{key}.")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        value = _coerce(args[0], value, where=where, key=key)
        for bounds in (a for a in tp.__metadata__ if isinstance(a, Range)):
            if not bounds.holds(value):
                raise UsageError(f"{where.of(key)}: '{key}' must be {bounds.broken_by(value)}; got {value!r}")
        return value
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
            value = float(value)
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{where.of(key)}: '{key}' must be a finite number; got {value!r}")
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise UsageError(f"{where.of(key)}: '{key}' must be {tp.__name__}, got {value!r} ({type(value).__name__})")
    return value


class UndeclaredSection(AttributeError):
    """A stage read a config section it did not declare: its fingerprint would miss that input."""


class ConfigView:
    """A stage's view of a config: only the sections the stage declares (``SECTIONS``) can be read.

    What a stage reads and what its fingerprint covers are the same thing by construction: the runner
    hashes ``view.hashed()`` (the ``result`` settings of those sections), and reading any other section
    raises ``UndeclaredSection``. ``run``, ``runs_dir`` (where results are stored, not what they are) and
    ``trackers`` (where they are shown) are always readable. ``data_root``, the resolved data folder, is
    readable with section ``data``, whose fingerprint covers what the folder holds (``data_digest``), not
    where it is.
    """

    STORAGE = ("run", "runs_dir", "trackers")

    def __init__(self, cfg: Config, sections: typing.Iterable[str], *, owner: str, data_root: Path):
        unknown = set(sections) - {f.name for f in dataclasses.fields(Config)}
        if unknown:
            raise ValueError(f"{owner}: SECTIONS names unknown config sections {sorted(unknown)}")
        self._cfg, self._sections, self._owner = cfg, tuple(sections), owner
        self._data_root = Path(data_root)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        section = "data" if name == "data_root" else name  # the data folder is read through section data
        if section in self._sections or name in self.STORAGE:
            return self._data_root if name == "data_root" else getattr(self._cfg, name)
        raise UndeclaredSection(f"{self._owner} reads config section '{section}' but its SECTIONS "
                                f"{self._sections} do not declare it, so its fingerprint would not cover it")

    def replace(self, **sections: dict) -> ConfigView:
        """A view of a config with some fields of declared sections changed:
        ``view.replace(sample={"n": 1})``."""
        for name in sections:
            getattr(self, name)  # only declared sections may change
        return ConfigView(replace(self._cfg, **sections), self._sections, owner=self._owner, data_root=self._data_root)

    def hashed(self, sections: typing.Iterable[str] | None = None, *, without: typing.Iterable[str] = ()) -> dict:
        """What a fingerprint covers: the ``result`` settings of the declared sections (or of some of them,
        ``sections``) but the dotted settings ``without`` (that the stage overrides), and, with section
        ``data``, the digest of the data folder's content."""
        names = self._sections if sections is None else tuple(sections)
        covered = {name: hashed_settings(getattr(self, name)) for name in names}
        for dotted in without:
            section, _, key = dotted.partition(".")
            del covered[section][key]
        if "data" in names:
            covered["data_digest"] = data_digest(self._data_root)
            bird = bird_dir(Path(self._data_root))
            if bird.is_dir() and not bird.resolve().is_relative_to(Path(self._data_root).resolve()):
                covered["bird_digest"] = data_digest(bird)  # BIRD kept elsewhere ($MTSQL_BIRD) counts too
        return covered

    def unhashed(self) -> dict:
        """What the fingerprint leaves out but an artifact should still record: the ``operational``
        settings of the declared sections and, with section ``data``, the data folder's path."""
        kept = {name: _operational(getattr(self, name))
                for name in self._sections if dataclasses.is_dataclass(getattr(self, name))}
        kept = {name: fields for name, fields in kept.items() if fields}
        if "data" in self._sections:
            kept["data_root"] = str(self._data_root)
        return kept


def _operational(section: Any) -> dict:
    """A section's ``operational`` settings, with those of its selected engine."""
    kept = {f.name: to_dict(getattr(section, f.name)) for f in _fields(section) if not f.metadata[HASHED]}
    if isinstance(section, EngineOwned) and section.selected():
        engine = _operational(section.owned[section.selected()])
        kept.update({section.selected(): engine} if engine else {})
    return kept
