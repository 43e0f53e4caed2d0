"""The report and the analysis notebook, on the synthetic run of conftest.py."""

import os
import re
from pathlib import Path

import pytest

from mtsql.app.report import build_report
from mtsql.base.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
PLOTS = ("ex_by_hardness", "ex_by_turn", "rl_curves", "rl_behaviour", "ex_by_max_messages", "ex_by_vote_n")


@pytest.fixture(scope="module")
def report(shared_run) -> tuple[Path, str]:
    path = build_report(shared_run)
    return path, path.read_text()


def section(text: str, title: str) -> str:
    """The text of one ``## title`` section."""
    start = text.index(f"## {title}")
    following = text.find("\n## ", start + 1)
    return text[start:] if following == -1 else text[start:following]


def test_rates_carry_n_and_wilson_intervals(report):
    _, text = report
    table = section(text, "Evaluations")
    # 16/40 and 0/40 (EX), 8/40 (EM), 4/10 interactions: each with its 95 % Wilson interval
    assert (
        "| eval-sft | long | gold | greedy | cosql | 40 | 40.0 [26.3, 55.4] (16/40) | "
        "20.0 [10.5, 34.8] (8/40) | 40.0 [16.8, 68.7] (4/10) |" in table
    )
    assert "| eval-base | long | gold | greedy | cosql | 40 | 0.0 [0.0, 8.8] (0/40) |" in table
    assert "| eval-base-short | short |" in table


def test_summary_says_what_the_intervals_allow(report):
    _, text = report
    summary = section(text, "Summary")
    cosql, sparc = summary.split("**sparc**")
    assert (
        "base 0.0 [0.0, 8.8] (0/40) → SFT 40.0 [26.3, 55.4] (16/40) → RL 45.0 [30.7, 60.2] (18/40)" in cosql
    )
    assert (
        "SFT − base = +40.0 points [+23.8, +55.4]: SFT is above base beyond the 95 % interval of the "
        "difference" in cosql
    )
    assert (
        "RL − SFT = +5.0 points [-16.0, +25.4]: the interval holds 0, so this run shows no difference "
        "between SFT and RL" in cosql
    )
    assert "cannot show" not in cosql  # 40 turns: no blanket warning
    assert "the interval holds 0, so this run shows no difference between base and SFT" in sparc  # 0/3 vs 1/3
    assert "With as few as 3 scored turns" in sparc and "cannot show differences" in sparc


def test_behaviour_counts_only_long_horizon_runs(report):
    _, text = report
    behaviour = section(text, "Agent behaviour (long-horizon evaluations)")
    assert "eval-base-short" not in behaviour
    assert "memory_retrieve" in behaviour and "self-correction" in behaviour  # the definitions are stated
    row = next(line for line in behaviour.splitlines() if line.startswith("| eval-sft | cosql |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:] == [
        "3",
        "100.0 [43.9, 100.0] (3/3)",
        "66.7 [20.8, 93.9] (2/3)",
        "50.0 [9.5, 90.5] (1/2)",
        "100.0 [20.7, 100.0] (1/1)",
        "0.0 [0.0, 56.1] (0/3)",
    ]


def test_examples_are_decoded_text(report, token_id):
    _, text = report
    examples = section(text, "Example trajectories")
    assert examples.count("```text") == 3
    assert "### cosql-dev-0001/1 (cosql): changed its query after a no_pass verdict" in examples
    assert "a miss" in examples
    assert "<exec_verify>no_pass</exec_verify>" in examples and "── tool · exec_sql" in examples
    assert examples.count("SYSTEM PROMPT") == 1  # shown once
    assert str(token_id) not in text


def test_training_sections(report):
    _, text = report
    rounds = section(text, "Self-taught SFT rounds")
    assert (
        "| 1 | gold_with_correction | 12 | 75.0 [46.8, 91.1] (9/12) | 9 | 9 | 1 | 0.8123 | 3 | "
        "30.0 [10.8, 60.3] (3/10) |" in rounds
    )
    curriculum = section(text, "Curriculum")
    assert "| stage 3 | hard, extra | 0 | 0 | 2 | 1 | 3 |" in curriculum
    grpo = section(text, "Curriculum GRPO")
    steps = [line for line in grpo.splitlines() if line.startswith("| rl-c")]
    assert [line.split("|")[1:4] for line in steps] == [
        [" rl-c1 ", " local ", " 1 "],
        [" rl-c1 ", " local ", " 2 "],
        [" rl-c1 ", " local ", " 3 "],
        [" rl-c2 ", " verl ", " 1 "],
        [" rl-c2 ", " verl ", " 2 "],
    ]  # each stage names the engine that trained it
    assert (
        "| rl-c1 | local | 1 | 0.6 | 0.2 | -0.01 | 0.001 | 1.5 | 61 | 50.0 [9.5, 90.5] (1/2) | "
        "25.0 [7.1, 59.1] (2/8) |" in grpo
    )


def test_provenance_and_paper_are_separate(report):
    from mtsql.base.artifacts import code_version, hardware

    _, text = report
    provenance = section(text, "Provenance")
    commit = code_version()["git_commit"]
    if commit:
        assert f"git {commit[:12]}" in provenance
    assert "transformers 5.5.4" in provenance and f"{hardware()['cores']} cores" in provenance
    assert "sample.seed = 7" in provenance
    assert "train: cosql train (first 3); eval: cosql, sparc dev (all)" in provenance
    assert re.search(r"\| eval-rl \| evaluate \| [\d-]+ [\d:]+ \| [\d.]+s \| 200 \|", provenance)
    paper = section(text, "Published numbers from the MTSQL-R1 paper (not this run)")
    assert "| Qwen3-4B | + curriculum RL (outcome+process) | cosql | 79.9 | 65.2 |" in paper
    assert "| eval-" not in paper  # this run's rows are not repeated there, only the settings it ran under
    assert "* eval-rl: mtsql protocol; long mode; gold memory; greedy;" in paper
    assert "79.9" not in text.replace(paper, "")


def test_plots_exist_are_pngs_and_are_linked(report):
    from PIL import Image

    path, text = report
    for name in PLOTS:
        png = path.parent / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.size[0] > 600 and image.size[1] > 250
            assert len(image.convert("RGB").getcolors(1 << 20)) > 20  # drawn, not blank
        assert f"](plots/{name}.png)" in text


def test_breakdown_tells_zero_from_no_items():
    from mtsql.app.report.plots import breakdown_figure
    from mtsql.app.report.stats import Rate

    fig = breakdown_figure(
        {"cosql": {"base": {"easy": Rate(0, 5), "medium": Rate(2, 4)}}},
        ("easy", "medium", "hard"),
        "hardness",
    )
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["0/5", "2/4", "n=0"]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1  # only the bucket without turns
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base", "no turns (n=0)"]


def test_rebuild_replaces_what_it_wrote_and_nothing_else(run_folder):
    """A report replaces the one before whole; a file it did not write is never deleted (the report is
    refused instead) and no temporary folder stays."""
    run = run_folder
    build_report(run)
    (run / "report" / "report.md").write_text("# an older report\n")
    (run / "report" / ".mtsql-report.json").unlink()  # as written before the report listed its files
    build_report(run)
    assert "an older report" not in (run / "report" / "report.md").read_text()
    (run / "report" / "stale.txt").write_text("mine")
    with pytest.raises(UsageError, match="stale.txt .not written by mtsql report"):
        build_report(run)
    assert (run / "report" / "stale.txt").read_text() == "mine"
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []


def test_report_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match="no run folder"):
        build_report(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no complete artifacts"):
        build_report(tmp_path / "empty")


@pytest.mark.notebook
def test_notebook_runs_on_the_run(shared_run):
    import nbformat
    from nbclient import NotebookClient

    run = shared_run
    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    os.environ["MTSQL_RUN"] = str(run)
    try:
        NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    finally:
        del os.environ["MTSQL_RUN"]
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 6, "hardness, turn, max_messages, vote n, RL curves and behaviour plots are drawn"
    tables = " ".join(
        o.get("data", {}).get("text/html", "")
        for o in outputs
        if isinstance(o.get("data", {}).get("text/html"), str)
    )
    for column in (
        "pass@4",
        "exec_verify_precision_pass",
        "memory_verify_followed_after_no_pass",
        "ex_non_empty_gold",
        "ex_after_wrong",
        "prompt_tokens_per_turn",
        "memory_calls_per_turn",
    ):
        assert column in tables, column


def test_rounds_without_held_out_check_or_training(run_folder):
    from mtsql.app.report.runs import latest_artifacts
    from mtsql.app.report.training import sft_rounds_section
    from mtsql.base.artifacts import ArtifactKey, Store

    store = Store(run_folder)
    store.run(ArtifactKey("sample", 2), {"r": 2}, {}, lambda ctx: {"policy": "model", "count": 3, "items": 3})
    store.run(ArtifactKey("reject", 2), {"r": 2}, {}, lambda ctx: {"items": 3, "solved": 0, "kept": 0})
    store.run(
        ArtifactKey("sft", 3), {"r": 3}, {}, lambda ctx: {"examples": 2, "heldout": {"count": 0, "ex": 0.0}}
    )
    lines = sft_rounds_section(latest_artifacts(run_folder))
    assert "| 2 | model | 3 | 0.0 [0.0, 56.1] (0/3) | 0 | – | – | – | – | – |" in lines
    assert "| 3 | – | – | – | – | 2 | – | – | – | – |" in lines


def test_every_rl_chain_has_its_curves_and_step_rows(run_folder):
    """The method experiment trains two chains from one start (process and outcome reward): the GRPO
    section shows both, each under its own heading with its own plots, and their steps in one table."""
    import json

    from mtsql.base.artifacts import ArtifactKey, Store

    def outcome(ctx):
        (ctx.out / "metrics.jsonl").write_text(
            json.dumps(
                {"stage": 1, "step": 1, "reward_mean": 0.125, "reward_std": 0.1, "response_length": 70}
            )
            + "\n"
        )
        return {"steps": 1}

    Store(run_folder).run(
        ArtifactKey("rl", 1, "outcome"),
        {"rl": {"batch_size": 2, "n": 4}, "reward": {"family": "outcome"}},
        {},
        outcome,
    )
    path = build_report(run_folder)
    grpo = section(path.read_text(), "Curriculum GRPO")
    assert "### rl\n" in grpo and "### rl-outcome (outcome reward)" in grpo
    assert "![GRPO curves, rl-outcome](plots/rl-outcome_curves.png)" in grpo
    assert (path.parent / "plots" / "rl-outcome_curves.png").stat().st_size > 0
    assert not (path.parent / "plots" / "rl-outcome_behaviour.png").exists()  # this chain logged no behaviour
    assert [line.split("|")[1] for line in grpo.splitlines() if line.startswith("| rl-")] == [
        " rl-c1 "
    ] * 3 + [" rl-c2 "] * 2 + [" rl-outcome-c1 "]


def test_rl_figure_with_what_verl_logs():
    from mtsql.app.report.plots import rl_figure
    from mtsql.app.report.training import CURVES
    from mtsql.core.results import TrainingStep

    rows = [TrainingStep(stage=1, step=s, reward_mean=0.1 * s, response_length=50.0) for s in (1, 2)]
    fig = rl_figure({"stage 1 (easy)": rows, "stage 2 (medium)": rows[:1]}, CURVES)
    reward, signal, length = fig.axes
    assert [list(line.get_xdata()) for line in reward.get_lines()] == [[1, 2], [3]]  # integer steps run on
    assert [t.get_text() for t in signal.texts] == ["not logged by this engine"]
    assert [t.get_text() for t in length.get_legend().get_texts()] == ["stage 1 (easy)", "stage 2 (medium)"]


def test_examples_prefer_telling_cases():
    from dataclasses import replace

    from mtsql.app.report.evaluation import pick_examples
    from mtsql.core.agent.env import Step
    from mtsql.core.trajectories import read_rows

    real = read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0]

    def row(uid, execution, valid, steps=()):
        return replace(
            real,
            uid=uid,
            execution=execution,
            trajectory=replace(real.trajectory, protocol_valid=valid, steps=list(steps)),
        )

    corrected = [
        Step(index=0, text="", action="tool_call", tool="exec_sql", sql="SELECT 1", verdict="no_pass"),
        Step(index=1, text="", action="answer", sql="SELECT 2"),
    ]
    rows = [
        row("a", 0, False),
        row("b", 0, True),
        row("c", 1, True),
        row("d", 0, True, corrected),
        row("e", 0, True),
    ]
    assert [(why.split(" (")[0], r.uid) for why, r in pick_examples(rows)] == [
        ("changed its query after a no_pass verdict", "d"),
        ("answered correctly", "c"),
        ("a miss", "a"),
    ]
    misses = [row("a", 0, False), row("b", 0, False), row("c", 0, True)]
    assert [(why, r.uid) for why, r in pick_examples(misses)] == [
        ("a miss (EX 0 or no answer)", "a"),
        ("another item (a miss, protocol-valid)", "c"),
        ("another item (a miss, off protocol)", "b"),
    ]


def test_headline_is_the_plain_label_not_a_newer_variant(shared_run):
    from mtsql.app.report.runs import evaluations, headline, latest_artifacts

    heads = headline(evaluations(latest_artifacts(shared_run)))
    assert {phase: art.label for phase, art in heads.items()} == {
        "base": "eval-base",
        "sft": "eval-sft",
        "rl": "eval-rl",
    }


def test_pass_at_k_next_to_greedy_and_vote(report):
    _, text = report
    table = section(text, "pass@k")
    # every turn has one right sample of 4: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2, pass@4 = 1
    assert (
        "| eval-sft-vote4 | cosql | all | 40 | 40.0 [26.3, 55.4] (16/40) | 50.0 [35.2, 64.8] (20/40) | "
        "0.25 | 0.5 | 1 |" in table
    )
    assert (
        "| eval-sft-vote4 | cosql | hard | 13 |  |  | 0.25 | 0.5 | 1 |" in table and "| extra |" not in table
    )


def test_calibration_table_per_phase(report):
    _, text = report
    table = section(text, "Verdict calibration")
    # the synthetic trajectories: a no_pass on a wrong query then two passes on right ones, one memory pass
    assert "| eval-sft | cosql | exec_verify | 2 | 0 | 0 | 1 | 0 | 100.0 [34.2, 100.0] (2/2) |" in table
    assert "| eval-rl | sparc | memory_verify | 1 | 0 | 0 | 0 | 0 |" in table
    assert "eval-base-short" not in table, "short mode gives no verdicts"


def test_vacuous_memory_propagation_and_cost_sections(report):
    _, text = report
    assert "| eval-sft | cosql | 40.0 [26.3, 55.4] (16/40) | 38.5 [24.9, 54.1] (15/39) | 1 |" in section(
        text, "Vacuous matches"
    )
    assert (
        "| RL | cosql | 45.0 [30.7, 60.2] (18/40) | 30.0 [18.1, 45.4] (12/40) | -15.0 [-34.3, +6.0] |"
        in section(text, "Gold against predicted memory")
    )
    # eval-sft: dialogues 0-3 (16 turns) right, 4-9 wrong: 12 later turns after a right one, 18 after a
    # wrong one
    assert (
        "| eval-sft | gold | cosql | 100.0 [75.8, 100.0] (12/12) | 0.0 [0.0, 17.6] (0/18) | "
        "+100.0 [+70.0, +100.0] |" in section(text, "Error propagation")
    )
    cost = section(text, "Cost against accuracy")
    assert (
        "| eval-sft-vote4 | cosql | greedy | 40.0 [26.3, 55.4] (16/40) | 40 | 400 | 1.5 | 3 | 0.5 |" in cost
    )
    assert (
        "| eval-sft-vote4 | cosql | vote@4 | 50.0 [35.2, 64.8] (20/40) | 160 | 1,600 | 1.5 | 3 | 0.5 |"
        in cost
    )


def test_curves_against_max_messages_and_vote_n(shared_run):
    from mtsql.app.report.measures import max_messages_rates, vote_rates
    from mtsql.app.report.runs import evaluations, latest_artifacts
    from mtsql.app.report.stats import Rate

    evals = evaluations(latest_artifacts(shared_run))
    assert max_messages_rates(evals)["cosql"] == {
        "SFT, gold memory": {1: Rate(4, 40), 2: Rate(10, 40), 4: Rate(16, 40)}
    }
    assert vote_rates(evals)["cosql"] == {"SFT, gold memory, 4 messages": {1: Rate(16, 40), 4: Rate(20, 40)}}


def run_notebook(cwd: Path, run: str | None) -> list[dict]:
    """The outputs of the analysis notebook executed with its kernel in ``cwd``."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    saved = os.environ.pop("MTSQL_RUN", None)
    if run is not None:
        os.environ["MTSQL_RUN"] = run
    try:
        NotebookClient(
            notebook,
            timeout=120,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(cwd)}},
        ).execute()
    finally:
        os.environ.pop("MTSQL_RUN", None)
        if saved is not None:
            os.environ["MTSQL_RUN"] = saved
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


@pytest.mark.notebook
def test_notebook_default_run_resolves_from_notebooks_and_fails_loudly(shared_run, tmp_path):
    """The kernel runs in notebooks/: the default runs/tiny is the repository's, and a missing run is an
    error in the first cell rather than empty tables."""
    (tmp_path / "notebooks").mkdir()
    errors = [o for o in run_notebook(tmp_path / "notebooks", None) if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "UsageError"
    assert f"no run folder {tmp_path / 'runs' / 'tiny'}" in errors[0]["evalue"]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "tiny").symlink_to(shared_run)
    outputs = run_notebook(tmp_path / "notebooks", None)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 3


def test_the_kept_step_is_read_from_the_typed_rl_result():
    from types import SimpleNamespace

    from mtsql.app.report.training import _kept_step
    from mtsql.core.results import RlStageResult, TrainingStep

    steps = [TrainingStep(1, 1, reward_mean=0.1), TrainingStep(1, 2, reward_mean=0.3)]
    result = RlStageResult.of_steps(steps, engine="verl", items=4, picked_step=1)
    assert _kept_step(SimpleNamespace(metrics=result.to_dict())) == "step 1"
    other = {**result.to_dict(), "written_by": "another mtsql"}
    assert _kept_step(SimpleNamespace(metrics=other)) == "not recorded (metrics in another shape)"
