"""pass@k against its closed form and against counting k-subsets by hand."""

from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from mtsql.core.measures.pass_at_k import ks_for, pass_at_k, pass_at_k_table
from mtsql.core.trajectories import ScoredRow, read_rows


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl), ``fields`` changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 1 / 4),  # 1 - C(3,1)/C(4,1) = 1 - 3/4
        (4, 1, 2, 1 / 2),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 3, 9 / 10),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (8, 3, 4, 13 / 14),  # 1 - C(5,4)/C(8,4) = 1 - 5/70
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (4, 3, 2, 1.0),  # n - c < k: every k-subset holds a right sample
    ],
)
def test_closed_form(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c"), [(5, 2), (6, 1), (7, 4)])
def test_it_is_the_share_of_k_subsets_with_a_right_sample(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(samples, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_out_of_range_is_an_error():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_ks():
    assert (
        ks_for(1) == [1]
        and ks_for(4) == [1, 2, 4]
        and ks_for(6) == [1, 2, 4, 6]
        and ks_for(8) == [1, 2, 4, 8]
    )


def rows(uid, hardness, turn_index, results):
    turn = replace(scored().turn, turn_index=turn_index)
    return [
        scored(uid=uid, sample=s, hardness=hardness, turn=turn, execution=ex) for s, ex in enumerate(results)
    ]


def test_table_by_hardness_and_turn():
    table = pass_at_k_table(
        rows("a", "easy", 0, [1, 0, 0, 0])
        + rows("b", "hard", 1, [0, 0, 0, 0])
        + rows("c", "easy", 1, [1, 1, 0, 0])
        + rows("d", "hard", 0, [None] * 4),
        4,
    )
    assert table["samples"] == 4 and table["ks"] == [1, 2, 4]
    # pass@1 per turn: a 1/4, b 0, c 2/4; pass@2: a 1/2, b 0, c 1 - C(2,2)/C(4,2) = 5/6; pass@4: 1, 0, 1
    assert table["all"]["turns"] == 3, "d's samples are all unscorable: it is left out"
    assert table["all"]["pass"] == pytest.approx(
        {"1": (1 / 4 + 0 + 2 / 4) / 3, "2": (1 / 2 + 5 / 6) / 3, "4": 2 / 3}
    )
    assert table["by_hardness"]["easy"]["pass"] == pytest.approx(
        {"1": 3 / 8, "2": (1 / 2 + 5 / 6) / 2, "4": 1.0}
    )
    assert table["by_hardness"]["extra"] == {"turns": 0, "pass": None}
    assert table["by_turn"]["2"]["pass"] == pytest.approx({"1": 1 / 4, "2": 5 / 12, "4": 1 / 2})


def test_table_needs_every_sample():
    with pytest.raises(ValueError, match="3 samples, expected 4"):
        pass_at_k_table(rows("a", "easy", 0, [1, 0, 0]), 4)
