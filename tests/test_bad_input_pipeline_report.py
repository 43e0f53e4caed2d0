"""Bad input in a pipeline file's ``report`` key (the experiment sections its report adds): refused in one
line, before any step runs or any report is built, by `mtsql run` and by `mtsql report --pipeline`."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_bad_input import SMALL, Case, assert_refused, empty_sample

FINDINGS = (
    "  findings:\n    models: {base: base, sft_r1: sft-r1, sft: sft, short: sft-short, rl: rl, "
    "outcome: rl-outcome}\n"
)


def pipeline(report: str):
    """``p.yaml``: a report step, then ``report`` as the file's report key."""

    def setup(tmp: Path) -> None:
        (tmp / "p.yaml").write_text("steps:\n  - stage: report\nreport:\n" + report)

    return setup


def run_case(name: str, report: str, *words: str) -> Case:
    return Case(
        f"run-{name}", ("run", "p.yaml", "-c", "{tiny}", *SMALL), ("p.yaml", *words), setup=pipeline(report)
    )


CASES = [
    run_case("not-a-mapping", "  - findings\n", "'sections' list"),
    run_case("sections-not-a-list", "  sections: findings\n" + FINDINGS, "'sections' list"),
    run_case(
        "unknown-section",
        "  sections: [findings, plots]\n" + FINDINGS,
        "names 'plots'",
        "findings, warmstart, self_taught, sqlr1",
    ),
    run_case("section-not-a-name", "  sections: [{findings: x}]\n", "not a report section of an experiment"),
    run_case(
        "core-section-named",
        "  sections: [summary]\n",
        "names 'summary'",
        "not a report section of an experiment",
    ),
    run_case("named-twice", "  sections: [sqlr1, sqlr1]\n", "names a section twice"),
    run_case(
        "settings-of-a-section-not-named",
        "  sections: [sqlr1]\n" + FINDINGS,
        "report.findings",
        "does not name",
        "it names sqlr1",
    ),
    run_case(
        "unknown-setting",
        "  sections: [warmstart]\n  warmstart: {basline: sft-short}\n",
        "unknown key 'report.warmstart.basline'",
        "did you mean 'report.warmstart.baseline'",
    ),
    run_case(
        "unknown-role",
        "  sections: [findings]\n  findings:\n    models: {shrt: sft-short}\n",
        "unknown key 'report.findings.models.shrt'",
        "did you mean 'report.findings.models.short'",
    ),
    run_case(
        "missing-role",
        "  sections: [findings]\n  findings:\n    models: {base: base, sft: sft}\n",
        "report.findings.models needs the model of every role",
        "missing: sft_r1, short, rl, outcome",
    ),
    run_case(
        "not-a-model",
        "  sections: [findings]\n" + FINDINGS.replace("rl-outcome", "eval-rl-outcome"),
        "report.findings.models.outcome 'eval-rl-outcome' is not a model reference",
    ),
    run_case(
        "dev-turns-not-a-count",
        "  sections: [findings]\n" + FINDINGS + "    dev_turns: {cosql: -3}\n",
        "report.findings.dev_turns.cosql must be a whole number of turns",
    ),
    run_case(
        "baseline-not-an-sft-variant",
        "  sections: [warmstart]\n  warmstart: {baseline: rl-outcome}\n",
        "report.warmstart.baseline 'rl-outcome' is not an SFT variant's model",
    ),
    Case(
        "report-pipeline-unknown-section",
        ("report", "tiny", "runs_dir={runs}", "--pipeline", "p.yaml"),
        ("p.yaml", "names 'plots'"),
        setup=lambda tmp: [empty_sample(tmp), pipeline("  sections: [plots]\n")(tmp)],
    ),
    Case(
        "report-pipeline-missing",
        ("report", "tiny", "runs_dir={runs}", "--pipeline", "nothing.yaml"),
        ("cannot read pipeline nothing.yaml",),
        setup=empty_sample,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_a_bad_report_key_is_refused_in_one_line_and_nothing_is_built(case, tmp_path):
    assert_refused(case, tmp_path)
