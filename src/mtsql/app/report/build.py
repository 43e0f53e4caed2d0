"""Assemble the report: the sections of ``sections.SECTIONS`` in reading order, plots next to the text that
discusses them; an experiment's sections only where the pipeline file it follows names them.

Writes ``<run>/report/report.md``, ``<run>/report/plots/*.png`` and, where experiment sections were
named, ``sections.json`` (them and their settings: a later ``mtsql report`` of the same folder keeps
them), or the same into ``--out``, replaced as a whole: built in a temporary folder of its own beside
it and swapped in, so a reader never sees half a report, and nothing the report did not write is
deleted (``destination``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mtsql.app.report.destination import building, destination
from mtsql.app.report.runs import evaluation_of, evaluations, headline, run_artifacts
from mtsql.app.report.sections import RunView, render, report_spec
from mtsql.base.config import to_dict
from mtsql.base.errors import UsageError

log = logging.getLogger(__name__)
SECTIONS_FILE = "sections.json"


def build_report(
    run: Path, out: Path | None = None, runs_dir: Path | None = None, sections: dict[str, Any] | None = None
) -> Path:
    """Build the report of ``run`` into ``out`` (default ``<run>/report``, replaced whole); returns the
    path of report.md. ``sections``: the experiment sections to add, with their settings, as a pipeline
    file's ``report`` key names them (``sections.report_spec``; None: those the report in ``out`` was last
    built with, from its ``sections.json``, else the core sections only). Only ``out``
    and a sibling temporary folder are written: a run on a read-only disk can be reported elsewhere.
    ``out`` that is a link, a file, in a run or under ``runs_dir``, or that holds files the report did not
    write, is refused (``destination``)."""
    run = Path(run)
    target, legacy = destination(run, out, runs_dir)
    damaged: list[str] = []
    arts = run_artifacts(run, damaged)
    for problem in damaged:
        log.warning("left out of the report: %s", problem)
    evals = evaluations(arts)
    if sections is None:
        sections = _previous_sections(target)
    with building(target, legacy=legacy) as tmp:
        _write(tmp, RunView(run, arts, evals, headline(evals), tmp / "plots"), damaged, sections or {})
    return target / "report.md"


def _write(tmp: Path, view: RunView, damaged: list[str], sections: dict[str, Any]) -> None:
    """Write report.md and its plots into ``tmp``."""
    view.plots.mkdir()
    model = next((evaluation_of(a).model_name for a in view.evals.values()), None)
    lines = [
        f"# mtsql report: {view.run.name}",
        "",
        f"Model {model or '(no evaluation)'}; {len(view.arts)} artifacts. Every rate is given in % with its "
        "95 % Wilson interval in brackets and its count (k/n). Two phases are compared by the 95 % interval "
        "of their difference (Newcombe's score interval, built from the two Wilson intervals): where it "
        "holds 0, the run does not show a difference.",
        "",
    ]
    if damaged:
        lines += [
            "Left out, as their manifest is damaged or their files do not verify:",
            "",
            *(f"* {problem}" for problem in damaged),
            "",
        ]
    lines += render(view, sections)
    (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    if sections:
        named = {
            "sections": list(sections),
            **{name: to_dict(settings) for name, settings in sections.items()},
        }
        (tmp / SECTIONS_FILE).write_text(json.dumps(named, indent=1) + "\n", encoding="utf-8")


def _previous_sections(target: Path) -> dict[str, Any]:
    """The experiment sections the report in ``target`` was built with (none where it names none, or where
    its record no longer reads as a ``report`` key, as after an mtsql that renamed a setting: then with a
    warning)."""
    path = target / SECTIONS_FILE
    if not path.is_file():
        return {}
    try:
        return report_spec(json.loads(path.read_text(encoding="utf-8")), str(path))
    except (ValueError, UsageError) as exc:
        log.warning("%s does not read (%s): the report has the core sections only", path, exc)
        return {}
