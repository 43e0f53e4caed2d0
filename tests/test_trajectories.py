"""Self-consistency (SQL-R1): the vote over executed candidates."""

from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.trajectories import ScoredRow, read_rows, vote

GOLD = "SELECT count(*) FROM singer"  # 6 on the fixture's concert_singer
RIGHT = [
    "SELECT count(*) FROM singer",
    "SELECT COUNT(singer_id) FROM singer",
    "select count(name) from singer",
]
WRONG = "SELECT count(*) FROM singer WHERE age > 30"
FAILS = ["SELECT count(*) FROM singers", "SELEC nonsense", None]


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl), ``fields`` changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[0] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


def rows(*sqls):
    turn = replace(scored().turn, db_id="concert_singer")
    return [scored(sample=i, final_sql=sql, turn=turn) for i, sql in enumerate(sqls)]


def pick(*sqls):
    return vote(rows(*sqls), FIXTURE_DATA, timeout_s=5.0)


def test_the_vote_flips_a_wrong_first_answer_when_most_samples_agree_on_another_result():
    chosen = pick(WRONG, RIGHT[0], RIGHT[1], WRONG.replace("30", "40"), RIGHT[2])
    assert chosen.final_sql in RIGHT and chosen.sample == 1, "the earliest sample of the winning result"


def test_the_vote_keeps_a_right_first_answer_that_the_majority_shares():
    assert pick(RIGHT[0], WRONG, RIGHT[1]).sample == 0


def test_failures_never_win_even_when_they_are_the_majority():
    assert pick(FAILS[0], FAILS[1], FAILS[2], FAILS[0], WRONG).final_sql == WRONG


def test_ties_go_to_the_earliest_sample_whatever_the_input_order():
    candidates = rows(WRONG, RIGHT[0], RIGHT[1], WRONG)
    assert vote(list(reversed(candidates)), FIXTURE_DATA, 5.0).sample == 0


@pytest.mark.parametrize("sqls", [FAILS, [None, None]])
def test_with_nothing_executable_the_first_sample_is_returned(sqls):
    assert pick(*sqls).sample == 0


def test_behaviour_of_one_rl_step_on_hand_made_episodes():
    from mtsql.core.agent.env import Step
    from mtsql.core.trajectories import episode_behaviour, step_behaviour

    def step(action, tool=None, verdict=None):
        return Step(index=0, text="", action=action, tool=tool, verdict=verdict)

    def taking(*steps):
        return replace(scored().trajectory, steps=list(steps))

    corrected = taking(
        step("tool_call", "exec_sql", "no_pass"),
        step("tool_call", "exec_sql", "pass"),
        step("tool_call", "memory_retrieve", "pass"),
        step("answer"),
    )
    invalid = taking(step("invalid"), step("invalid"))
    last_no_pass = taking(step("tool_call", "exec_sql", "no_pass"), step("invalid"), step("answer"))
    episodes = [episode_behaviour(t) for t in (corrected, invalid, last_no_pass)]
    assert episodes[0] == {
        "tool_calls": 3,
        "memory_calls": 1,
        "messages": 4,
        "invalid_messages": 0,
        "self_corrected": 1.0,
    }
    assert episodes[2]["self_corrected"] == 0.0, (
        "a no_pass on the last query run is not followed by a correction"
    )
    out = step_behaviour(episodes, [30, 10, 20])
    assert out == pytest.approx(
        {
            "tool_calls_per_turn": 4 / 3,
            "memory_calls_per_turn": 1 / 3,
            "self_correction_rate": 1 / 3,
            "invalid_message_rate": 3 / 9,
            "messages_per_turn": 3.0,
            "response_length": 20.0,
        }
    )
