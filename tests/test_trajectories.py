"""Self-consistency (SQL-R1): the vote over executed candidates."""

import pytest

from mtsql.paths import FIXTURE_DATA
from mtsql.trajectories import vote

GOLD = "SELECT count(*) FROM singer"  # 6 on the fixture's concert_singer
RIGHT = ["SELECT count(*) FROM singer", "SELECT COUNT(singer_id) FROM singer", "select count(name) from singer"]
WRONG = "SELECT count(*) FROM singer WHERE age > 30"
FAILS = ["SELECT count(*) FROM singers", "SELEC nonsense", None]


def rows(*sqls):
    return [{"sample": i, "final_sql": sql, "turn": {"db_id": "concert_singer"}} for i, sql in enumerate(sqls)]


def pick(*sqls):
    return vote(rows(*sqls), FIXTURE_DATA, timeout_s=5.0)


def test_the_vote_flips_a_wrong_first_answer_when_most_samples_agree_on_another_result():
    chosen = pick(WRONG, RIGHT[0], RIGHT[1], WRONG.replace("30", "40"), RIGHT[2])
    assert chosen["final_sql"] in RIGHT and chosen["sample"] == 1, "the earliest sample of the winning result"


def test_the_vote_keeps_a_right_first_answer_that_the_majority_shares():
    assert pick(RIGHT[0], WRONG, RIGHT[1])["sample"] == 0


def test_failures_never_win_even_when_they_are_the_majority():
    assert pick(FAILS[0], FAILS[1], FAILS[2], FAILS[0], WRONG)["final_sql"] == WRONG


def test_ties_go_to_the_earliest_sample_whatever_the_input_order():
    candidates = rows(WRONG, RIGHT[0], RIGHT[1], WRONG)
    assert vote(list(reversed(candidates)), FIXTURE_DATA, 5.0)["sample"] == 0


@pytest.mark.parametrize("sqls", [FAILS, [None, None]])
def test_with_nothing_executable_the_first_sample_is_returned(sqls):
    assert pick(*sqls)["sample"] == 0
