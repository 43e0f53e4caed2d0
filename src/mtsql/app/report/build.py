"""Assemble the report: sections in reading order, plots next to the text that discusses them.

Writes ``<run>/report/report.md`` and ``<run>/report/plots/*.png`` (or into ``--out``), replaced as a
whole: built in a temporary folder of its own beside it and swapped in, so a reader never sees half a
report, and nothing the report did not write is deleted (``destination``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from mtsql.app.report import evaluation, measures, plots, training
from mtsql.app.report.destination import building, destination
from mtsql.app.report.findings import findings_section
from mtsql.app.report.provenance import provenance_section
from mtsql.app.report.published import published_section
from mtsql.app.report.runs import datasets, evaluation_of, evaluations, headline, run_artifacts, variants
from mtsql.app.report.self_correction import self_correction_section
from mtsql.app.report.self_taught import kept_section
from mtsql.app.report.sqlr1_tables import sqlr1_section
from mtsql.app.report.warmstart import warmstart_section
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import TURN_BUCKETS

log = logging.getLogger(__name__)


def build_report(run: Path, out: Path | None = None, runs_dir: Path | None = None) -> Path:
    """Build the report of ``run`` into ``out`` (default ``<run>/report``, replaced whole); returns the
    path of report.md. Only ``out`` and a sibling temporary folder are written: a run on a read-only
    disk can be reported elsewhere. ``out`` that is a link, a file, in a run or under ``runs_dir``,
    or that holds files the report did not write, is refused (``destination``)."""
    run = Path(run)
    target, legacy = destination(run, out, runs_dir)
    damaged: list[str] = []
    arts = run_artifacts(run, damaged)
    for problem in damaged:
        log.warning("left out of the report: %s", problem)
    evals = evaluations(arts)
    heads = headline(evals)
    with building(target, legacy=legacy) as tmp:
        _write(tmp, run, arts, damaged, evals, heads)
    return target / "report.md"


def _write(tmp: Path, run: Path, arts: dict[str, Artifact], damaged: list[str], evals: dict[str, Artifact],
           heads: dict[str, Artifact]) -> None:
    """Write report.md and its plots into ``tmp``."""
    (tmp / "plots").mkdir()
    model = next((evaluation_of(a).model_name for a in evals.values()), None)
    lines = [f"# mtsql report: {run.name}", "",
             f"Model {model or '(no evaluation)'}; {len(arts)} artifacts. Every rate is given in % with its 95 % "
             "Wilson interval in brackets and its count (k/n). Two phases are compared by the 95 % interval of "
             "their difference (Newcombe's score interval, built from the two Wilson intervals): where it holds "
             "0, the run does not show a difference.", ""]
    if damaged:
        lines += ["Left out, as their manifest is damaged or their files do not verify:", "", *(f"* {problem}" for problem in damaged), ""]
    lines += evaluation.summary_section(heads)
    lines += evaluation.evaluation_table(evals)
    if heads:
        lines += ["EX by hardness and by turn position, for the headline evaluation of each phase "
                  f"({', '.join(a.label for a in heads.values())}):", ""]
        for key, buckets, what in (("by_hardness", HARDNESS_LEVELS, "hardness"), ("by_turn", TURN_BUCKETS, "turn")):
            rates = evaluation.breakdown_rates(heads, key)
            if not rates:  # single-turn datasets have no turn buckets
                continue
            figure = plots.breakdown_figure(rates, buckets, what)
            path = plots.save(figure, tmp / "plots" / f"ex_{key}.png")
            lines += [f"![EX by {what}](plots/{path.name})", ""]
    lines += findings_section(arts)
    lines += warmstart_section(arts, evals)
    lines += evaluation.behaviour_section(evals)
    lines += self_correction_section(evals)
    lines += measures.pass_at_k_section(evals)
    lines += measures.calibration_section(evals)
    lines += measures.vacuous_section(evals)
    lines += measures.memory_section(evals, heads)
    cost_plots = [plots.save(plots.curve_figure(rates, what), tmp / "plots" / f"ex_by_{name}.png").name
                  for name, what, rates in (("max_messages", "env.max_messages", measures.max_messages_rates(evals)),
                                            ("vote_n", "vote n (1: greedy)", measures.vote_rates(evals))) if rates]
    lines += measures.cost_section(evals, cost_plots)
    lines += evaluation.example_section(evals, run.name)
    lines += training.sft_rounds_section(arts)
    lines += kept_section(arts)
    lines += training.curriculum_section(arts)
    lines += training.rl_section(arts, {variant: _rl_plots(arts, variant, tmp / "plots")
                                        for variant in variants(arts, "rl")})
    lines += provenance_section(arts)
    lines += sqlr1_section(evals)
    lines += published_section({name for a in evals.values() for name in datasets(a)},
                               {label: evaluation_of(a) for label, a in evals.items()})
    (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")


def _rl_plots(arts: dict[str, Artifact], variant: str | None, folder: Path) -> tuple[str | None, str | None]:
    """The GRPO curves and (where the engine logged it) the behaviour plot of one RL chain: file names
    under ``folder`` (``rl_curves.png``, ``rl-outcome_curves.png``), None where there is nothing to draw."""
    stages = training.rl_stages(arts, variant)
    if not stages:
        return None, None
    name = ArtifactKey("rl", variant=variant).label
    curve = plots.save(plots.rl_figure(stages, training.CURVES), folder / f"{name}_curves.png").name
    logged = any(getattr(row, key) is not None for rows in stages.values() for row in rows for key in training.BEHAVIOUR)
    behaviour = plots.save(plots.rl_figure(stages, training.BEHAVIOUR), folder / f"{name}_behaviour.png").name \
        if logged else None
    return curve, behaviour
