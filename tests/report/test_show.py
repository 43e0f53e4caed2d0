"""`mtsql show`: one trajectory as decoded text, found by stage, dataset and item."""

import pytest
from typer.testing import CliRunner

from mtsql.app.cli import app
from mtsql.app.trajectory_text import find_trajectory, render_trajectory
from mtsql.base.errors import UsageError


def test_default_is_the_first_item_of_the_first_dataset(shared_run):
    row, where = find_trajectory(shared_run, "eval-sft")
    assert row.uid == "cosql-dev-0001/1"
    assert "/eval-sft/" in where and where.endswith("/cosql/trajectories.jsonl")
    row, _ = find_trajectory(shared_run, "eval-sft", dataset="sparc", item="sparc-dev-0003/2")
    assert row.turn.dataset == "sparc" and row.uid == "sparc-dev-0003/2"
    row, where = find_trajectory(shared_run, "sample-r1", item="cosql-dev-0002/0")
    assert where.endswith("trajectories.jsonl") and row.uid == "cosql-dev-0002/0"


def test_rendering_shows_messages_actions_verdicts_and_rewards(shared_run, token_id):
    row, _ = find_trajectory(shared_run, "eval-rl", item="cosql-dev-0001/1")
    text = render_trajectory(row)
    for expected in (
        "── system ",
        "SYSTEM PROMPT",
        "── user ",
        "Current question: question 1 of dialogue 1",
        "── assistant · message 1 ",
        "calls exec_sql: SELECT name FROM singer  → ok, 1 row; judged next: no_pass",
        "── tool · exec_sql ",
        "Result of SELECT name FROM singer",
        "states <exec_verify> no_pass",
        "calls memory_retrieve on: SELECT count(*) FROM singer; judged next: pass",
        "states <memory_verify> pass",
        "answers: SELECT count(*) FROM singer",
        "finished by: answer (protocol-valid) after 4 messages",
        "EX 1 · EM 1",
        "reward: score 1.5",
    ):
        assert expected in text, expected
    assert str(token_id) not in text and "prompt_ids" not in text
    clipped = render_trajectory(row, limit=10, system=False)
    assert "SYSTEM PROMPT" not in clipped and "more characters; `mtsql show` prints them" in clipped


def test_unknown_stage_dataset_or_item_lists_what_exists(shared_run):
    with pytest.raises(
        UsageError,
        match=r"no complete artifact 'eval-nope'; artifacts with trajectories: eval-base, "
        r"eval-base-short, eval-rl, eval-rl-predicted-memory, eval-sft, "
        r"eval-sft-messages1, eval-sft-messages2, eval-sft-vote4, sample-r1",
    ):
        find_trajectory(shared_run, "eval-nope")
    with pytest.raises(UsageError, match="no trajectories in artifact 'rl-c1'"):
        find_trajectory(shared_run, "rl-c1")
    with pytest.raises(UsageError, match="eval-sft has no dataset 'atis'; it has: cosql, sparc"):
        find_trajectory(shared_run, "eval-sft", dataset="atis")
    with pytest.raises(UsageError, match="no trajectory of dataset 'sparc'; it has: cosql"):
        find_trajectory(shared_run, "sample-r1", dataset="sparc")
    with pytest.raises(
        UsageError,
        match=r"no trajectory of item 'x/0'; items there: cosql-dev-0001/1, "
        r"cosql-dev-0002/0, cosql-dev-0003/2$",
    ):
        find_trajectory(shared_run, "eval-sft", item="x/0")
    with pytest.raises(UsageError, match="with sample 3"):
        find_trajectory(shared_run, "eval-sft", item="cosql-dev-0001/1", sample=3)


def test_cli_show_prints_text_and_exits_2_on_bad_input(shared_run):
    runner = CliRunner()
    result = runner.invoke(
        app, ["show", str(shared_run), "eval-rl", "--dataset", "sparc", "--item", "sparc-dev-0002/0"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("sparc-dev-0002/0 · sample 0 · sparc dev")
    assert "answers: SELECT count(*) FROM singer;" in result.stdout
    bad = runner.invoke(app, ["show", str(shared_run), "eval-rl", "--item", "nope"])
    assert bad.exit_code != 0 and isinstance(bad.exception, UsageError)
