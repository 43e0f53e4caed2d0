"""What an evaluation, an RL step and an RL stage record, as typed records: what stages write and the report
reads.

    result = EvaluationResult.from_dict(artifact.metrics)   # an evaluate artifact's metrics.json
    block = result.datasets["cosql"]                        # a DatasetBlock: block.ex, block.revisions, ...
    metrics = result.to_dict()                              # what the evaluate stage returns as its metrics
    step = TrainingStep.from_dict(line)                     # one line of an RL stage's metrics.jsonl
    stage = RlStageResult.from_dict(artifact.metrics)       # an rl artifact's metrics.json, either engine's

``from_dict`` refuses a record of another shape (a field missing or unknown) with a ``ValueError`` that
names the field; callers turn it into one line saying which file and how to rerun. The measures inside a
block (``verdict_calibration``, ``revisions``, ...) keep the shapes of ``mtsql.core.measures``.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

HEADLINE = (
    "turns",
    "ex",
    "em",
    "interaction_ex",
    "interaction_em",
    "cost",
)  # a decoding's figures in ``decodings``


def _checked(cls, data: dict, what: str) -> dict:
    """``data`` when its keys are the fields of ``cls`` (those with defaults may be absent), else a
    ValueError."""
    names = {f.name for f in fields(cls)}
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    if missing := [name for name in required if name not in data]:
        raise ValueError(f"not {what}: no {', '.join(missing)}")
    if extra := sorted(set(data) - names):
        raise ValueError(f"not {what}: unknown {', '.join(extra)}")
    return data


@dataclass(frozen=True)
class DatasetBlock:
    """One evaluated dataset: the official headline (question and interaction EX / EM, None where the
    dataset has no interactions or nothing was scored), the breakdowns by hardness and turn (``{bucket:
    {"count", "ex", "em"}}``), the protocol abilities of the chosen samples, and the measures of
    ``mtsql.core.measures``. ``decodings`` (with voting): each decoding's ``HEADLINE`` figures;
    ``pass_at_k`` (with samples) and ``prompt_filter`` (with ``evaluate.prompt_filter_tokens``): None
    otherwise."""

    turns: int
    interactions: int | None
    ex: float | None
    em: float | None
    interaction_ex: float | None
    interaction_em: float | None
    scored_ex: int
    scored_em: int
    unscorable_ex: int
    by_hardness: dict[str, dict]
    by_turn: dict[str, dict]
    protocol: dict[str, float | None]
    generated_tokens: int
    verdict_calibration: dict
    ex_non_empty_gold: dict
    propagation: dict
    revisions: dict
    cost: dict
    decodings: dict[str, dict] | None = None
    pass_at_k: dict | None = None
    prompt_filter: dict | None = None
    by_difficulty: dict[str, dict] | None = None  # BIRD: {simple|moderate|challenging|total: {"count", "ex"}}

    def headline(self) -> dict:
        return {key: getattr(self, key) for key in HEADLINE}

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> DatasetBlock:
        return cls(**_checked(cls, data, "an evaluated dataset"))


@dataclass(frozen=True)
class Budgets:
    """The token and message budgets an evaluation ran under."""

    max_messages: int
    max_new_tokens: int
    max_response_tokens: int | None
    prompt_filter_tokens: int | None
    observation_chars: int


@dataclass(frozen=True)
class EvaluationResult:
    """An evaluate artifact's metrics: the model scored (its label and name), the protocol, memory, message
    limit, decoding (``greedy`` or ``vote@n``) and budgets the numbers depend on, one ``DatasetBlock``
    per eval dataset, and what a billed chat API counted (``usage``; None for other backends)."""

    model: str
    model_name: str
    mode: str
    protocol: str
    memory: str
    max_messages: int
    decoding: str
    budgets: Budgets
    datasets: dict[str, DatasetBlock]
    usage: dict | None = None  # a billed chat API's requests, prompt / completion tokens, prices and cost_usd

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return out | {
            "budgets": {f.name: getattr(self.budgets, f.name) for f in fields(Budgets)},
            "datasets": {name: block.to_dict() for name, block in self.datasets.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> EvaluationResult:
        data = _checked(cls, data, "an evaluation's metrics")
        budgets = Budgets(**_checked(Budgets, data["budgets"], "an evaluation's budgets"))
        blocks = {name: DatasetBlock.from_dict(block) for name, block in data["datasets"].items()}
        return cls(**data | {"budgets": budgets, "datasets": blocks})


@dataclass(frozen=True)
class TrainingStep:
    """One line of an RL stage's ``metrics.jsonl``: the curriculum stage and step; the reward over the
    step's samples; the policy update (``pg_loss``, ``kl``, ``grad_norm``, ``clipfrac``); the share of
    groups whose rewards differed; EX, EM and protocol validity of the samples; the agent's behaviour
    (``trajectories.step_behaviour``); the dev validation after the step (``val_*``, on validated steps).
    A figure the engine does not log is None; what else it logged (verl's own metrics, timings, lengths
    cut) is kept in ``extra``, by its name."""

    stage: int
    step: int
    reward_mean: float | None = None
    reward_std: float | None = None
    response_length: float | None = None
    pg_loss: float | None = None
    kl: float | None = None
    grad_norm: float | None = None
    clipfrac: float | None = None
    groups_with_signal: float | None = None
    ex: float | None = None
    em: float | None = None
    protocol_valid: float | None = None
    tool_calls_per_turn: float | None = None
    memory_calls_per_turn: float | None = None
    self_correction_rate: float | None = None
    invalid_message_rate: float | None = None
    messages_per_turn: float | None = None
    val_reward_mean: float | None = None
    val_ex: float | None = None
    val_em: float | None = None
    val_turns: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        known = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {key: value for key, value in known.items() if value is not None} | self.extra

    @classmethod
    def from_dict(cls, data: dict) -> TrainingStep:
        if missing := [name for name in ("stage", "step") if name not in data]:
            raise ValueError(f"not an RL step line: no {', '.join(missing)}")
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            **{key: value for key, value in data.items() if key in names},
            extra={key: value for key, value in data.items() if key not in names},
        )


@dataclass(frozen=True)
class RlStageResult:
    """What an rl stage returns (its artifact's metrics), whichever engine trained it, drawn from the stage's
    ``TrainingStep`` lines by ``of_steps``: the engine, the items it trained on, the steps logged, the step
    whose model it kept, the first and last mean reward, the last step's EX and response length, the steps
    whose groups all had equal rewards (no policy gradient; None when no step logged ``groups_with_signal``),
    and the dev reward of the kept step (None when it was not validated)."""

    engine: str
    items: int
    steps: int
    picked_step: int
    reward_first: float | None = None
    reward_last: float | None = None
    ex_last: float | None = None
    response_length_last: float | None = None
    steps_without_signal: int | None = None
    val_reward_picked: float | None = None

    @classmethod
    def of_steps(
        cls, steps: list[TrainingStep], *, engine: str, items: int, picked_step: int
    ) -> RlStageResult:
        """The result of a stage that logged ``steps`` and kept the model of step ``picked_step``."""
        first, last = (steps[0], steps[-1]) if steps else (TrainingStep(0, 0), TrainingStep(0, 0))
        signal = [step.groups_with_signal for step in steps if step.groups_with_signal is not None]
        picked = next((step for step in steps if step.step == picked_step), TrainingStep(0, 0))
        return cls(
            engine=engine,
            items=items,
            steps=len(steps),
            picked_step=picked_step,
            reward_first=first.reward_mean,
            reward_last=last.reward_mean,
            ex_last=last.ex,
            response_length_last=last.response_length,
            steps_without_signal=sum(share == 0 for share in signal) if signal else None,
            val_reward_picked=picked.val_reward_mean,
        )

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> RlStageResult:
        return cls(**_checked(cls, data, "an RL stage's metrics"))
