"""What the report reads from a run folder: the newest artifact of each label and their files.

Evaluations are the artifacts of the evaluate stage whose key names what they scored: the phase (base,
sft, rl), round and variant of the model (``ArtifactKey``); no label is read. The *headline* evaluation
of a phase is its long-horizon evaluation with gold memory (the paper's protocol) that ``preferred``
ranks first: the main chain's model, greedy decoding, the last round, the most messages, the newest;
the others (short mode, predicted memory, fewer messages, voting) are variants.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mtsql.app.report.stats import Rate
from mtsql.base.artifacts import PHASES, Artifact, Store, verify
from mtsql.base.errors import UsageError
from mtsql.base.files import read_json, read_jsonl
from mtsql.core.results import EvaluationResult, TrainingStep

PHASE_NAMES = {"base": "base", "sft": "SFT", "rl": "RL"}


def latest_artifacts(run: Path, damaged: list[str] | None = None) -> dict[str, Artifact]:
    """The newest complete artifact of each label whose files verify against its manifest (what the
    report and the notebook may publish). An artifact whose manifest is damaged, or whose files do not
    verify, is an error naming the first problem, or, given a ``damaged`` list, left out and named there."""
    found: dict[str, Artifact] = {}
    for artifact in Store(run).artifacts(damaged):
        found[artifact.label] = artifact  # artifacts() is oldest first
    for label, artifact in list(found.items()):
        problems = verify(artifact, cached=True)
        if problems:
            line = f"{problems[0]} (see `mtsql data verify {Path(run)}`)"
            if damaged is None:
                raise UsageError(f"{line}; the report reads only files that verify")
            damaged.append(line)
            del found[label]
    return found


def run_artifacts(run: Path, damaged: list[str] | None = None) -> dict[str, Artifact]:
    """``latest_artifacts`` of a run folder that must exist and hold a complete artifact: anything else
    is a ``UsageError`` naming the folder (and the first artifact left out, if any), rather than empty
    tables."""
    if not Path(run).is_dir():
        raise UsageError(f"no run folder {Path(run).resolve()}")
    arts = latest_artifacts(run, damaged)
    if not arts:
        why = (
            f"; {len(damaged)} left out, as they are damaged or do not verify: {damaged[0]}"
            if damaged
            else ""
        )
        raise UsageError(f"{Path(run).resolve()}: no complete artifacts to report on{why}")
    return arts


def evaluation_of(art: Artifact) -> EvaluationResult:
    """The typed metrics of an evaluation artifact; one written in another shape is refused in one line."""
    try:
        return EvaluationResult.from_dict(art.metrics)
    except ValueError as exc:
        raise UsageError(
            f"{art.path}: {exc} (written by another mtsql); delete that folder and rerun its evaluation"
        ) from None


def phase_of(art: Artifact) -> str | None:
    """The kind of model (base, sft, rl) an evaluation scored; None for other artifacts."""
    return art.key.phase


def eval_order(art: Artifact) -> tuple[int, str]:
    phase = phase_of(art)
    return (PHASES.index(phase) if phase else len(PHASES), art.label)


def evaluations(arts: dict[str, Artifact]) -> dict[str, Artifact]:
    """The evaluation artifacts, base → sft → rl, then by label."""
    found = sorted(
        (art for art in arts.values() if art.key.stage == "evaluate" and art.key.variant), key=eval_order
    )
    return {art.label: art for art in found}


def is_long_horizon(art: Artifact) -> bool:
    return evaluation_of(art).mode == "long"


def preferred(art: Artifact) -> tuple:
    """Sort key of the evaluations of one kind of model, the one to show first last: the main chain's
    model (not a pipeline variant's), greedy decoding, the last round, the most messages, the newest."""
    result = evaluation_of(art)
    return (
        art.key.model_variant is None,
        result.decoding == "greedy",
        art.key.round or 0,
        result.max_messages,
        art.manifest.get("created_at", ""),
    )


def headline(evals: dict[str, Artifact]) -> dict[str, Artifact]:
    """One evaluation per phase: of its long-horizon ones with gold memory, the ``preferred`` (a run with no
    long-horizon evaluation, such as a single-turn one, compares its short-mode evaluations)."""
    long_run = any(is_long_horizon(art) for art in evals.values())
    chosen: dict[str, Artifact] = {}
    for art in evals.values():
        phase = phase_of(art)
        if phase and is_long_horizon(art) == long_run and evaluation_of(art).memory == "gold":
            if phase not in chosen or preferred(art) > preferred(chosen[phase]):
                chosen[phase] = art
    return {phase: chosen[phase] for phase in PHASES if phase in chosen}


def datasets(art: Artifact) -> list[str]:
    return list(evaluation_of(art).datasets)


def official_summary(art: Artifact, dataset: str) -> dict:
    """The official scorer's summary of one evaluated dataset (``<dataset>/summary.json``)."""
    path = art.path / dataset / "summary.json"
    if not path.exists():
        raise UsageError(f"{path}: missing; the evaluation artifact is incomplete (rerun it with --force)")
    return read_json(path)


def decodings(art: Artifact, dataset: str) -> list[tuple[str, dict]]:
    """(decoding, official summary) of one evaluated dataset: with voting, greedy decoding first
    (``<dataset>/greedy/summary.json``), then the vote."""
    voted = evaluation_of(art).decoding
    greedy = art.path / dataset / "greedy" / "summary.json"
    return ([("greedy", read_json(greedy))] if greedy.exists() else []) + [
        (voted, official_summary(art, dataset))
    ]


def tally_rate(tally: dict) -> Rate:
    """A rate from one cell of the official summary: correct of the scored turns."""
    return Rate(tally["correct"], tally["scored"])


def stage_config(art: Artifact) -> dict:
    """The config a stage ran with (``config.yaml`` in its folder)."""
    path = art.path / "config.yaml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def numbered(arts: dict[str, Artifact], stage: str, variant: str | None = None) -> dict[int, Artifact]:
    """The rounds of ``stage`` (SFT rounds of sample, reject, sft; curriculum stages of rl), by round, of
    one variant (None: the main chain; ``outcome``: the ``rl-outcome-c*`` stages)."""
    found = {
        art.key.round: art
        for art in arts.values()
        if art.key.stage == stage and art.key.round is not None and art.key.variant == variant
    }
    return dict(sorted(found.items()))


def variants(arts: dict[str, Artifact], stage: str) -> list[str | None]:
    """The variants that have rounds of ``stage``, the main chain (None) first, then by name."""
    found = {art.key.variant for art in arts.values() if art.key.stage == stage and art.key.round is not None}
    return sorted(found, key=lambda variant: (variant is not None, variant or ""))


def rl_steps(art: Artifact) -> list[TrainingStep]:
    """The per-step metrics an RL stage logged (``metrics.jsonl``), empty when it logged none; a line of
    another shape is refused in one line."""
    path = art.path / "metrics.jsonl"
    try:
        return [TrainingStep.from_dict(line) for line in read_jsonl(path)] if path.exists() else []
    except ValueError as exc:
        raise UsageError(
            f"{path}: {exc} (written by another mtsql); delete that folder and rerun its stage"
        ) from None
