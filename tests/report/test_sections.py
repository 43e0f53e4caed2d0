"""The report knows no experiment: core sections show when the run holds what they need, an experiment's
sections (findings, warm start, kept trajectories, SQL-R1's tables) only when the pipeline file names them,
with the models and dev-set sizes that file gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from mtsql.app import pipeline
from mtsql.app.pipeline import load_pipeline
from mtsql.app.report import build_report
from mtsql.app.report.findings import findings, findings_section
from mtsql.app.report.runs import latest_artifacts
from mtsql.app.report.sections import EXPERIMENT, SECTIONS, RunView, render
from mtsql.base.artifacts import ArtifactKey, Store

from ..test_bad_input import mtsql
from .test_findings import METHOD, PIPELINES, SETTINGS, build, evaluation

REPO = Path(__file__).resolve().parents[2]


def titles(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_experiment_sections_show_only_where_the_pipeline_names_them(tmp_path):
    run = build(tmp_path / "method")
    plain = titles(build_report(run, tmp_path / "plain").read_text())
    named = titles(build_report(run, tmp_path / "named", sections=METHOD).read_text())
    assert "## Paper findings" not in plain and "## Summary" in plain
    assert [t for t in named if t not in plain] == ["## Paper findings"]


def test_a_rebuilt_report_keeps_the_sections_it_was_built_with(tmp_path):
    """`mtsql report RUN` after the pipeline's report step keeps the experiment's sections (their record is
    one of the report's own files: edited, the folder is refused like any other changed file)."""
    run = build(tmp_path / "method")
    first = titles(build_report(run, tmp_path / "out", sections=METHOD).read_text())
    assert "## Paper findings" in first and (tmp_path / "out" / "sections.json").is_file()
    assert titles(build_report(run, tmp_path / "out").read_text()) == first
    assert "## Paper findings" not in titles(build_report(run, tmp_path / "plain").read_text())
    assert not (tmp_path / "plain" / "sections.json").exists()


def test_sections_whose_needs_the_run_lacks_are_left_out(tmp_path):
    """A run with no evaluation, no round and no RL chain: the summary says so, provenance lists what it
    holds, and no section renders an empty table, whichever experiment sections are named."""
    named = {name: section.settings() for name, section in EXPERIMENT.items()}
    view = RunView(tmp_path, {}, {}, {}, tmp_path / "plots")
    text = "\n".join(render(view, named))
    assert titles(text) == ["## Summary", "## Provenance"]
    assert all(section.needs.what for section in SECTIONS)


def test_the_rows_name_and_find_the_models_the_pipeline_gives(tmp_path):
    """Another pipeline's short-horizon baseline (the sft variant ``terse``) is the one compared and named."""
    run = build(tmp_path / "method")
    evaluation(Store(run), "whatever", ArtifactKey("sft", 1, "terse"), lambda i, t: False, mode="short")
    terse = dataclasses.replace(SETTINGS, models=dataclasses.replace(SETTINGS.models, short="sft-terse"))
    rows = {(row.claim, row.slice): row for row in findings(latest_artifacts(run), terse)}
    row = rows[("Long horizon beats short horizon on EX", "cosql")]
    assert row.measured.startswith("eval-sft-r1 20.0 ") and " vs eval-sft-terse 0.0 [" in row.measured
    shipped = {(row.claim, row.slice): row for row in findings(latest_artifacts(run), SETTINGS)}
    assert (
        " vs eval-sft-short 20.0 [" in shipped[("Long horizon beats short horizon on EX", "cosql")].measured
    )


def test_the_closing_note_compares_with_the_dev_set_sizes_the_pipeline_gives(tmp_path):
    arts = latest_artifacts(build(tmp_path / "method"))
    small = "\n".join(findings_section(arts, dataclasses.replace(SETTINGS, dev_turns={"cosql": 100})))
    none = "\n".join(findings_section(arts, dataclasses.replace(SETTINGS, dev_turns={})))
    assert "more than the 100 turns of cosql dev: only a larger difference" in small
    assert "turns of cosql dev" not in none and "would clear 0 with about" in none


def test_method_rows_are_named_as_its_pipeline_labels_its_evaluations():
    """``eval-<model>`` for each role's model is the label pipelines/method.yaml gives that evaluation."""
    steps = yaml.safe_load((PIPELINES / "method.yaml").read_text())["steps"]
    labels = {step["model"]: step["label"] for step in steps if step["stage"] == "evaluate"}
    assert {f"eval-{ref}" for ref in dataclasses.asdict(SETTINGS.models).values()} == {
        labels[ref] for ref in dataclasses.asdict(SETTINGS.models).values()
    }


def test_a_pipelines_report_step_builds_the_sections_it_names(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(pipeline, "build_report", lambda root, **kw: built.append(kw) or root / "report.md")
    steps = tmp_path / "p.yaml"
    steps.write_text("steps:\n  - stage: report\nreport:\n  sections: [sqlr1, self_taught]\n")
    pipeline.run_pipeline(
        steps, REPO / "configs" / "profiles" / "tiny.yaml", [f"runs_dir={tmp_path / 'runs'}"]
    )
    assert built == [{"sections": load_pipeline(steps).report}] and list(built[0]["sections"]) == [
        "sqlr1",
        "self_taught",
    ]


def test_report_command_takes_the_sections_from_pipeline(tmp_path):
    build(tmp_path / "runs" / "method")
    args = ["report", "method", f"runs_dir={tmp_path / 'runs'}"]
    assert mtsql([*args, "--out", "plain"], tmp_path).returncode == 0
    done = mtsql([*args, "--out", "named", "--pipeline", str(PIPELINES / "method.yaml")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "## Paper findings" not in (tmp_path / "plain" / "report.md").read_text()
    assert "## Paper findings" in (tmp_path / "named" / "report.md").read_text()
