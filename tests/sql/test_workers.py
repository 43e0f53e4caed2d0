from __future__ import annotations

import os

import pytest

from mtsql.errors import UsageError
from mtsql.sql.workers import GroupWorkers, partition


def test_partition_puts_each_group_whole_on_the_lightest_process():
    groups = {"a": [1] * 5, "b": [1] * 4, "c": [1] * 3, "d": [1] * 3, "e": [1]}
    bins = partition(groups, 2)
    assert [sorted(b) for b in bins] == [["a", "d"], ["b", "c", "e"]]  # loads 8 and 8
    assert partition({"a": [1]}, 4) == [{"a": [1]}]


def squares(share: dict, offset: int):
    for key, items in share.items():
        for index, value in items:
            yield index, (key, value * value + offset, os.getpid())


def test_results_of_every_group_come_back_from_several_processes():
    groups = {key: [(10 * k + i, i) for i in range(3)] for k, key in enumerate("abcd")}
    with GroupWorkers(squares, groups, (1,), workers=2) as pool:
        results = dict(pool.results())
    assert sorted(results) == sorted(index for items in groups.values() for index, _ in items)
    assert results[32] == ("d", 5, results[32][2])
    pids = {key: {pid for k, _, pid in results.values() if k == key} for key in groups}
    assert all(len(p) == 1 for p in pids.values()), "a group is scored by one process"
    assert len(set().union(*pids.values())) == 2 and os.getpid() not in set().union(*pids.values())


def failing(share: dict):
    yield 0, "fine"
    raise UsageError("bad input in a worker")


def dying(share: dict):
    yield 0, "fine"
    os._exit(3)


def test_a_task_error_is_raised_again_and_a_dead_process_is_reported():
    with pytest.raises(UsageError, match="bad input in a worker"), \
            GroupWorkers(failing, {"a": [], "b": []}, (), workers=2) as pool:
        list(pool.results())
    with pytest.raises(RuntimeError, match="exit code 3"), GroupWorkers(dying, {"a": []}, (), workers=1) as pool:
        list(pool.results())
