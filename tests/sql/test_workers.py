from __future__ import annotations

import multiprocessing
import os

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.sql.workers import GroupWorkers


def squares(share: dict, offset: int, meet: multiprocessing.Barrier):
    for key, items in share.items():
        meet.wait(timeout=120)  # each group waits for one on the other process: one process cannot take all
        for index, value in items:
            yield index, (key, value * value + offset, os.getpid())


def test_results_of_every_group_come_back_from_several_processes():
    groups = {key: [(10 * k + i, i) for i in range(3)] for k, key in enumerate("abcd")}
    meet = multiprocessing.get_context("fork").Barrier(2)
    with GroupWorkers(squares, groups, (1, meet), workers=2) as pool:
        results = dict(pool.results())
        assert len(pool.cpu_seconds) == 2 and all(seconds >= 0 for seconds in pool.cpu_seconds)
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
    with (
        pytest.raises(UsageError, match="bad input in a worker"),
        GroupWorkers(failing, {"a": [], "b": []}, (), workers=2) as pool,
    ):
        list(pool.results())
    with (
        pytest.raises(RuntimeError, match="exit code 3"),
        GroupWorkers(dying, {"a": []}, (), workers=1) as pool,
    ):
        list(pool.results())
