"""`mtsql status`: pipeline order, one row per artifact, no spurious rows, 100 columns."""

import pytest
from rich.console import Console

from mtsql.app.status import pipeline_order, status_rows, status_table
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.base.errors import StageFailed


def test_keys_sort_in_pipeline_order():
    keys = [
        ArtifactKey("evaluate", variant="rl"),
        ArtifactKey("rl", 2),
        ArtifactKey("evaluate", variant="base", name="eval-base-short"),
        ArtifactKey("sft", 2),
        ArtifactKey("curriculum"),
        ArtifactKey("sample", 10),
        ArtifactKey("evaluate", 1, "sft", name="eval-sft"),
        ArtifactKey("rl", 10),
        ArtifactKey("reject", 1),
        ArtifactKey("sample", variant="pool"),
        ArtifactKey("sample", 2),
        ArtifactKey("sft", 1),
        ArtifactKey("evaluate", variant="base"),
        ArtifactKey("sample", 1),
        ArtifactKey("rl", 1),
        ArtifactKey("notes"),
        ArtifactKey("sample"),
    ]
    assert [key.label for key in sorted(keys, key=pipeline_order)] == [
        "eval-base",
        "eval-base-short",
        "sample",
        "sample-r1",
        "reject-r1",
        "sft-r1",
        "sample-r2",
        "sft-r2",
        "sample-r10",
        "eval-sft",
        "sample-pool",
        "curriculum",
        "rl-c1",
        "rl-c2",
        "rl-c10",
        "eval-rl",
        "notes",
    ]


def _fails(ctx):
    raise StageFailed("stopped")


def test_rows_in_pipeline_order_without_spurious_ones(run_folder):
    (run_folder / "report" / "plots").mkdir(parents=True)  # the report folder is not a stage
    (run_folder / "report" / "report.md").write_text("# report\n")
    store = Store(run_folder)
    store.run(
        ArtifactKey("reject", 1),
        {"older": False},
        {},
        lambda ctx: {"items": 12, "solved": 10, "sampled": 12, "kept": 10},
    )
    with pytest.raises(StageFailed):  # a partial folder sorts by the key its attempts.json records
        store.run(ArtifactKey("rl", 3), {}, {}, _fails)
    rows = status_rows(run_folder)
    assert [(r[0], r[1]) for r in rows] == [  # as pipelines/reproduce.yaml runs them
        ("eval-base", "latest"),
        ("eval-base-short", "latest"),
        ("sample-r1", "latest"),
        ("reject-r1", "latest"),
        ("reject-r1", "older"),
        ("sft-r1", "latest"),
        ("eval-sft", "latest"),
        ("eval-sft-messages1", "latest"),
        ("eval-sft-messages2", "latest"),
        ("eval-sft-vote4", "latest"),
        ("curriculum", "latest"),
        ("rl-c1", "latest"),
        ("rl-c2", "latest"),
        ("rl-c3", "partial"),
        ("eval-rl", "latest"),
        ("eval-rl-predicted-memory", "latest"),
    ]
    by_label = {r[0]: r for r in rows if r[1] != "older"}
    assert (
        by_label["eval-sft"][5]
        == "long, gold memory\ncosql EX 40.0% EM 20.0% n=40\nsparc EX 33.3% EM 0.0% n=3"
    )
    assert by_label["eval-base-short"][5].startswith("short, gold memory")
    assert by_label["reject-r1"][5] == "solved 10/12 items, kept 10/12"
    assert by_label["curriculum"][5] == "pool 12 → stages of 5, 4, 3 turns"
    assert by_label["rl-c2"][5] == "2 steps, reward 1.1 → 1.2"
    assert by_label["sft-r1"][5] == "9 examples, train loss 0.812"
    assert by_label["sample-r1"][5] == "gold_with_correction policy\n12 trajectories, 12 items, EX 100.0%"


def test_table_fits_100_columns(run_folder):
    console = Console(width=100, record=True, color_system=None)
    console.print(status_table(run_folder))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    starts = [line.split(" ")[0] for line in text.splitlines()]
    for label in ("sample-r1", "eval-rl", "rl-c2", "curriculum"):
        assert label in starts  # labels are never wrapped


def test_cli_status_lists_the_run(run_folder):
    from typer.testing import CliRunner

    from mtsql.app.cli import app

    result = CliRunner().invoke(app, ["status", str(run_folder)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(f"{label} "))
        for label in ("eval-base", "sample-r1", "sft-r1", "curriculum", "rl-c1", "eval-rl")
    ]
    assert order == sorted(order)
    assert "\x1b[" not in result.output


def test_a_single_rl_step_reads_as_one():
    from mtsql.app.status import summary

    stage = {"engine": "local", "items": 4, "picked_step": 1}
    one = {"stage": "rl", "metrics": {**stage, "steps": 1, "reward_first": 0.5, "reward_last": 0.5}}
    assert summary(one) == "1 step, reward 0.5"
    many = {
        "stage": "rl",
        "metrics": {**stage, "steps": 3, "reward_first": 0.5, "reward_last": 0.7, "steps_without_signal": 1},
    }
    assert summary(many) == "3 steps, reward 0.5 → 0.7, 1 without signal"
    assert (
        summary({"stage": "rl", "metrics": {"steps": 3, "reward_last": 0.7}})
        == "not an RL stage's metrics: no engine, items, picked_step (written by another mtsql): "
        "rerun its stage"
    )


def _row(folder, label):
    return next(row for row in status_rows(folder) if row[0] == label)


def test_partial_says_running_or_how_it_stopped(run_folder):
    import fcntl

    import pytest

    from mtsql.base.errors import StageFailed
    from mtsql.base.files import write_json

    store = Store(run_folder)

    def fails(ctx):
        (ctx.out / "shard-0.jsonl").write_text("{}\n")
        raise StageFailed("LLaMA-Factory exited with code 1")

    with pytest.raises(StageFailed):
        store.run(ArtifactKey("sft", 2), {"r": 2}, {}, fails)
    state, what = _row(run_folder, "sft-r2")[1::4]
    assert state == "partial" and what == (
        "1 attempt, failed: StageFailed: LLaMA-Factory exited with code 1; rerun to resume"
    )
    partial = next(run_folder.glob("sft-r2/*.partial"))
    with (partial.parent / partial.name.replace(".partial", ".lock")).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as Store.run holds it while the stage runs
        assert _row(run_folder, "sft-r2")[1::4] == ("running", "another mtsql process is running this stage")
    write_json(
        partial / "attempts.json",
        [{"started_at": "2026-11-25T10:00:00+00:00", "duration_s": None, "outcome": "running"}],
    )  # kill -9: no end recorded
    assert (
        _row(run_folder, "sft-r2")[5] == "1 attempt, killed before it could record its end; rerun to resume"
    )


def test_a_damaged_manifest_is_named_and_the_rest_shown(run_folder):
    from mtsql.app.report import build_report

    damaged = run_folder / "curriculum" / "latest" / "manifest.json"
    damaged.write_text('{"stage": "curriculum", ')
    rows = status_rows(run_folder)
    assert ("curriculum", "damaged") in {(r[0], r[1]) for r in rows}
    assert str(damaged.resolve()) in _row(run_folder, "curriculum")[5]
    assert {"eval-base", "sft-r1", "rl-c2", "eval-rl"} <= {r[0] for r in rows}
    text = build_report(run_folder).read_text()
    assert (
        "Left out, as their manifest is damaged or their files do not verify:" in text
        and str(damaged.resolve()) in text
    )
    assert "## " in text  # the rest of the report is there
    from typer.testing import CliRunner

    from mtsql.app.cli import app

    verified = CliRunner().invoke(app, ["data", "verify", str(run_folder)])
    assert type(verified.exception).__name__ == "UsageError"  # exit 2 through main()
    assert f"{damaged.resolve()}: damaged manifest" in verified.stderr
