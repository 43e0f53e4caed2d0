"""Waiting on an event with a deadline: the one polling loop the tests share (no test waits a fixed time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], seconds: float, message: str, every: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy, and return that; fail with ``message`` when
    ``seconds`` pass first. ``check`` may itself assert (a process that ended too early)."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} within {seconds:.0f} s")
        time.sleep(every)
