"""What the report reads from a run folder: the newest artifact of each label and their files.

Evaluations are the artifacts labelled ``eval-*``; the phase of one (base, sft, rl) is the word
after ``eval-``. The *headline* evaluation of a phase is its long-horizon evaluation with gold memory
(the paper's protocol) labelled ``eval-<phase>``, else the newest such one; the others (short mode,
predicted memory, fewer messages, voting) are variants.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mtsql.artifacts import Artifact, Store
from mtsql.errors import UsageError
from mtsql.files import read_json, read_jsonl
from mtsql.report.stats import Rate

PHASES = ("base", "sft", "rl")
PHASE_NAMES = {"base": "base", "sft": "SFT", "rl": "RL"}


def latest_artifacts(run: Path, damaged: list[str] | None = None) -> dict[str, Artifact]:
    """The newest complete artifact of each label (what ``latest`` points to); with a ``damaged``
    list, artifacts whose manifest is damaged are left out and named there."""
    found: dict[str, Artifact] = {}
    for artifact in Store(run).artifacts(damaged):
        found[artifact.label] = artifact  # artifacts() is oldest first
    return found


def run_artifacts(run: Path, damaged: list[str] | None = None) -> dict[str, Artifact]:
    """``latest_artifacts`` of a run folder that must exist and hold a complete artifact: anything else
    is a ``UsageError`` naming the folder, rather than empty tables."""
    if not Path(run).is_dir():
        raise UsageError(f"no run folder {Path(run).resolve()}")
    arts = latest_artifacts(run, damaged)
    if not arts:
        raise UsageError(f"{Path(run).resolve()}: no complete artifacts to report on")
    return arts


def phase_of(label: str) -> str | None:
    phase = label.removeprefix("eval-").split("-")[0]
    return phase if phase in PHASES else None


def eval_order(label: str) -> tuple[int, str]:
    phase = phase_of(label)
    return (PHASES.index(phase) if phase else len(PHASES), label)


def evaluations(arts: dict[str, Artifact]) -> dict[str, Artifact]:
    """The evaluation artifacts, base → sft → rl, then by label."""
    return {label: arts[label] for label in sorted((k for k in arts if k.startswith("eval-")), key=eval_order)}


def is_long_horizon(art: Artifact) -> bool:
    return art.metrics.get("mode") == "long"


def headline(evals: dict[str, Artifact]) -> dict[str, Artifact]:
    """One evaluation per phase: the long-horizon one with gold memory labelled ``eval-<phase>``, else the
    newest (a run with no long-horizon evaluation, such as a single-turn one, compares its short-mode
    evaluations)."""
    chosen: dict[str, tuple[tuple[bool, str], Artifact]] = {}
    long_run = any(is_long_horizon(art) for art in evals.values())
    for label, art in evals.items():
        phase = phase_of(label)
        if phase and is_long_horizon(art) == long_run and art.metrics.get("memory") == "gold":
            rank = (label == f"eval-{phase}", art.manifest.get("created_at", ""))
            if phase not in chosen or rank > chosen[phase][0]:
                chosen[phase] = (rank, art)
    return {phase: chosen[phase][1] for phase in PHASES if phase in chosen}


def datasets(art: Artifact) -> list[str]:
    return list(art.metrics.get("datasets", {}))


def official_summary(art: Artifact, dataset: str) -> dict:
    """The official scorer's summary of one evaluated dataset (``<dataset>/summary.json``)."""
    path = art.path / dataset / "summary.json"
    if not path.exists():
        raise UsageError(f"{path}: missing; the evaluation artifact is incomplete (rerun it with --force)")
    return read_json(path)


def decodings(art: Artifact, dataset: str) -> list[tuple[str, dict]]:
    """(decoding, official summary) of one evaluated dataset: with voting, greedy decoding first
    (``<dataset>/greedy/summary.json``), then the vote."""
    voted = art.metrics.get("decoding", "greedy")
    greedy = art.path / dataset / "greedy" / "summary.json"
    return ([("greedy", read_json(greedy))] if greedy.exists() else []) + [(voted, official_summary(art, dataset))]


def tally_rate(tally: dict) -> Rate:
    """A rate from one cell of the official summary: correct of the scored turns."""
    return Rate(tally["correct"], tally["scored"])


def stage_config(art: Artifact) -> dict:
    """The config a stage ran with (``config.yaml`` in its folder)."""
    path = art.path / "config.yaml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def numbered(arts: dict[str, Artifact], prefix: str) -> dict[int, Artifact]:
    """Artifacts labelled ``<prefix><k>`` (``sft-r``, ``rl-c``), by k."""
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found = {int(m.group(1)): art for label, art in arts.items() if (m := pattern.match(label))}
    return dict(sorted(found.items()))


def rl_steps(art: Artifact) -> list[dict]:
    """The per-step metrics an RL stage logged (``metrics.jsonl``), empty when it logged none."""
    path = art.path / "metrics.jsonl"
    return read_jsonl(path) if path.exists() else []
