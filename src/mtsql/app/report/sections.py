"""The report's sections, in reading order: what each needs from the run, and which a pipeline file names.

A *core* section is shown whenever the run holds what it ``needs`` (an evaluation, an RL chain, ...). An
*experiment* section (``EXPERIMENT``: ``findings``, ``warmstart``, ``self_taught``, ``sqlr1``) is shown only
when the pipeline file the report follows names it, in its ``report`` key, with the settings that belong to
that experiment (the models whose evaluations a finding compares, the whole dev sets' sizes, ...):

    report:
      sections: [self_taught, findings]
      findings:
        models: {base: base, sft_r1: sft-r1, sft: sft, short: sft-short, rl: rl, outcome: rl-outcome}
        dev_turns: {cosql: 1007, sparc: 1203, spider: 1034}

``report_spec`` reads that key (one line for a wrong name or setting); ``render`` writes the sections.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtsql.app.report import evaluation, measures, plots, training
from mtsql.app.report.findings import FindingsSettings, findings_section
from mtsql.app.report.provenance import provenance_section
from mtsql.app.report.published import published_section
from mtsql.app.report.runs import datasets, evaluation_of, variants
from mtsql.app.report.self_correction import self_correction_section
from mtsql.app.report.self_taught import kept_section
from mtsql.app.report.sqlr1_tables import sqlr1_section
from mtsql.app.report.warmstart import WarmstartSettings, warmstart_section
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.base.config import build
from mtsql.base.errors import UsageError
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import TURN_BUCKETS

MODEL_REF = re.compile(
    r"base|sft|rl|sft-r[1-9][0-9]*|(sft|rl)-[a-z][a-z0-9]*"
)  # a pipeline's model reference


@dataclass(frozen=True)
class RunView:
    """What the sections read: the run's artifacts, its evaluations and each phase's headline evaluation,
    and the folder the plots go to."""

    run: Path
    arts: dict[str, Artifact]
    evals: dict[str, Artifact]
    heads: dict[str, Artifact]
    plots: Path


@dataclass(frozen=True)
class Need:
    """What a section needs from the run, in words and as a test of the run."""

    what: str
    held: Callable[[RunView], bool]


NOTHING = Need("nothing (always shown)", lambda view: True)
EVALUATIONS = Need("an evaluation", lambda view: bool(view.evals))
HEADLINES = Need("a headline evaluation of a phase", lambda view: bool(view.heads))


def _stage(stage: str, what: str) -> Need:
    return Need(what, lambda view: any(art.key.stage == stage for art in view.arts.values()))


@dataclass(frozen=True)
class Section:
    """One section: ``render(view, settings)`` gives its lines ([] when the run holds too little to say
    anything). ``settings``: the class of an experiment section's settings in a pipeline file (None: a
    core section, always considered)."""

    name: str
    needs: Need
    render: Callable[[RunView, Any], list[str]]
    settings: type | None = None

    @property
    def experiment(self) -> bool:
        return self.settings is not None


@dataclass(frozen=True)
class NoSettings:
    """An experiment section that takes no settings."""

    def check(self, model_ref: re.Pattern) -> str | None:
        return None


def _breakdowns(view: RunView, _settings) -> list[str]:
    """EX by hardness and by turn position of each phase's headline evaluation, as plots."""
    lines = [
        "EX by hardness and by turn position, for the headline evaluation of each phase "
        f"({', '.join(a.label for a in view.heads.values())}):",
        "",
    ]
    for key, buckets, what in (
        ("by_hardness", HARDNESS_LEVELS, "hardness"),
        ("by_turn", TURN_BUCKETS, "turn"),
    ):
        rates = evaluation.breakdown_rates(view.heads, key)
        if not rates:  # single-turn datasets have no turn buckets
            continue
        path = plots.save(plots.breakdown_figure(rates, buckets, what), view.plots / f"ex_{key}.png")
        lines += [f"![EX by {what}](plots/{path.name})", ""]
    return lines


def _cost(view: RunView, _settings) -> list[str]:
    curves = [
        plots.save(plots.curve_figure(rates, what), view.plots / f"ex_by_{name}.png").name
        for name, what, rates in (
            ("max_messages", "env.max_messages", measures.max_messages_rates(view.evals)),
            ("vote_n", "vote n (1: greedy)", measures.vote_rates(view.evals)),
        )
        if rates
    ]
    return measures.cost_section(view.evals, curves)


def _rl(view: RunView, _settings) -> list[str]:
    return training.rl_section(
        view.arts,
        {variant: _rl_plots(view.arts, variant, view.plots) for variant in variants(view.arts, "rl")},
    )


def _rl_plots(arts: dict[str, Artifact], variant: str | None, folder: Path) -> tuple[str | None, str | None]:
    """The GRPO curves and (where the engine logged it) the behaviour plot of one RL chain: file names
    under ``folder`` (``rl_curves.png``, ``rl-outcome_curves.png``), None where there is nothing to draw."""
    stages = training.rl_stages(arts, variant)
    if not stages:
        return None, None
    name = ArtifactKey("rl", variant=variant).label
    curve = plots.save(plots.rl_figure(stages, training.CURVES), folder / f"{name}_curves.png").name
    logged = any(
        getattr(row, key) is not None
        for rows in stages.values()
        for row in rows
        for key in training.BEHAVIOUR
    )
    behaviour = (
        plots.save(plots.rl_figure(stages, training.BEHAVIOUR), folder / f"{name}_behaviour.png").name
        if logged
        else None
    )
    return curve, behaviour


def _published(view: RunView, _settings) -> list[str]:
    return published_section(
        {name for a in view.evals.values() for name in datasets(a)},
        {label: evaluation_of(a) for label, a in view.evals.items()},
    )


SECTIONS = (
    Section("summary", NOTHING, lambda view, _: evaluation.summary_section(view.heads)),
    Section("evaluations", EVALUATIONS, lambda view, _: evaluation.evaluation_table(view.evals)),
    Section("breakdowns", HEADLINES, _breakdowns),
    Section(
        "findings",
        EVALUATIONS,
        lambda view, settings: findings_section(view.arts, settings),
        FindingsSettings,
    ),
    Section(
        "warmstart",
        EVALUATIONS,
        lambda view, settings: warmstart_section(view.evals, settings),
        WarmstartSettings,
    ),
    Section("behaviour", EVALUATIONS, lambda view, _: evaluation.behaviour_section(view.evals)),
    Section("self_correction", EVALUATIONS, lambda view, _: self_correction_section(view.evals)),
    Section("pass_at_k", EVALUATIONS, lambda view, _: measures.pass_at_k_section(view.evals)),
    Section("calibration", EVALUATIONS, lambda view, _: measures.calibration_section(view.evals)),
    Section("vacuous", EVALUATIONS, lambda view, _: measures.vacuous_section(view.evals)),
    Section("memory", HEADLINES, lambda view, _: measures.memory_section(view.evals, view.heads)),
    Section("cost", EVALUATIONS, _cost),
    Section("examples", EVALUATIONS, lambda view, _: evaluation.example_section(view.evals, view.run.name)),
    Section(
        "sft_rounds",
        Need(
            "a self-taught round (sample, reject or sft)",
            lambda view: any(
                art.key.stage in ("sample", "reject", "sft") and art.key.round for art in view.arts.values()
            ),
        ),
        lambda view, _: training.sft_rounds_section(view.arts),
    ),
    Section(
        "self_taught",
        _stage("reject", "a reject artifact"),
        lambda view, _: kept_section(view.arts),
        NoSettings,
    ),
    Section(
        "curriculum",
        _stage("curriculum", "a curriculum artifact"),
        lambda view, _: training.curriculum_section(view.arts),
    ),
    Section("rl", _stage("rl", "an rl chain"), _rl),
    Section("provenance", NOTHING, lambda view, _: provenance_section(view.arts)),
    Section("sqlr1", EVALUATIONS, lambda view, _: sqlr1_section(view.evals), NoSettings),
    Section("published", EVALUATIONS, _published),
)
EXPERIMENT = {section.name: section for section in SECTIONS if section.experiment}


def render(view: RunView, spec: dict[str, Any]) -> list[str]:
    """The lines of every core section the run holds what it needs for, and of every experiment section
    ``spec`` names (name -> its settings, from ``report_spec``) that the run holds what it needs for."""
    lines: list[str] = []
    for section in SECTIONS:
        if (not section.experiment or section.name in spec) and section.needs.held(view):
            lines += section.render(view, spec.get(section.name))
    return lines


def report_spec(raw: Any, where: str) -> dict[str, Any]:
    """The experiment sections a pipeline file's ``report`` key names, with their settings, in the order
    named: ``{sections: [name, ...], <name>: {settings}}``. An unknown section, a setting of a section not
    named, an unknown setting or a model reference that is not one is refused in one line."""
    if raw is None:
        return {}
    known = ", ".join(EXPERIMENT)
    if not isinstance(raw, dict) or not isinstance(raw.get("sections"), list):
        raise UsageError(f"{where}: 'report' is a mapping with a 'sections' list naming sections of {known}")
    named = raw["sections"]
    for name in named:
        if not isinstance(name, str) or name not in EXPERIMENT:
            raise UsageError(
                f"{where}: report.sections names '{name}', not a report section of an experiment: "
                f"one of {known}"
            )
    if len(set(named)) < len(named):
        raise UsageError(f"{where}: report.sections names a section twice")
    extra = [key for key in raw if key != "sections" and key not in named]
    if extra:
        raise UsageError(
            f"{where}: report.{extra[0]} gives settings of a section report.sections does not name "
            f"(it names {', '.join(named) or 'none'})"
        )
    spec = {}
    for name in named:
        settings = build(
            EXPERIMENT[name].settings, raw.get(name) or {}, source=where, prefix=f"report.{name}."
        )
        problem = settings.check(MODEL_REF)
        if problem:
            raise UsageError(f"{where}: report.{name}.{problem}")
        spec[name] = settings
    return spec
