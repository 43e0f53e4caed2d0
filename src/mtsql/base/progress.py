"""Progress of long work on stderr: a rich bar on a terminal (or in Jupyter); anywhere else (CI, nohup,
output redirected to a log) a plain line now and then, so a log never stays silent for minutes.

    with progress_bar(TextColumn("rollout"), BarColumn(), MofNCompleteColumn()) as bar:
        task = bar.add_task("rollout", total=len(items))
        ...
        bar.advance(task)

A plain line says ``rollout: 120/640 (19%), rate 310, elapsed 0:02:05, left ~0:08:40``. It comes when
``EVERY_S`` seconds have passed since the task started or since its last line, and once more when a
task that printed lines completes: work shorter than ``EVERY_S`` prints nothing.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TaskID, TextColumn

EVERY_S = 30.0

T = TypeVar("T")


def progress_bar(
    *columns: ProgressColumn | str,
    console: Console | None = None,
    transient: bool = False,
    disable: bool = False,
) -> Progress:
    """A ``rich.progress.Progress`` on stderr: the live bar on a terminal, plain lines elsewhere."""
    console = console or Console(stderr=True)
    if disable or console.is_terminal or console.is_jupyter:
        return Progress(*columns, console=console, transient=transient, disable=disable)
    return PlainProgress(*columns, console=console)


def track(items: Sequence[T] | Iterable[T], description: str, console: Console | None = None) -> Iterator[T]:
    """``rich.progress.track`` with the plain lines of :func:`progress_bar` when not on a terminal."""
    items = list(items)
    with progress_bar(TextColumn(description), BarColumn(), MofNCompleteColumn(), console=console) as bar:
        task = bar.add_task(description, total=len(items))
        for item in items:
            yield item
            bar.advance(task)


class PlainProgress(Progress):
    """rich's ``Progress`` without the live display: each task prints a plain line when one is due."""

    def __init__(self, *columns: ProgressColumn | str, console: Console):
        super().__init__(*columns, console=console, disable=True)
        self._last: dict[TaskID, tuple[float, float]] = {}  # task -> (time, completed) of its last line

    def update(self, task_id: TaskID, **changes) -> None:
        super().update(task_id, **changes)
        self._report(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._report(task_id)

    def _report(self, task_id: TaskID) -> None:
        task = self._tasks[task_id]
        now, done, total = time.monotonic(), task.completed, task.total
        printed = task_id in self._last
        last_time, last_done = self._last.get(task_id, (now - (task.elapsed or 0.0), None))
        finished = bool(total) and done >= total
        if now - last_time >= EVERY_S or (finished and printed and done != last_done):
            self._last[task_id] = (now, done)
            self.console.print(
                plain_line(task.description, done, total, task.elapsed, task.fields),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def plain_line(
    description: str, done: float, total: float | None, elapsed: float | None, fields: dict
) -> str:
    """``description: done/total (pct), field value, ..., elapsed h:mm:ss, left ~h:mm:ss``."""
    parts = [f"{done:.0f}/{total:.0f} ({done / total:.0%})" if total else f"{done:.0f}"]
    parts += [f"{key} {value}" for key, value in fields.items()]
    if elapsed is not None:
        parts.append(f"elapsed {dt.timedelta(seconds=round(elapsed))}")
        if total and 0 < done < total:
            parts.append(f"left ~{dt.timedelta(seconds=round(elapsed * (total - done) / done))}")
    return f"{description}: {', '.join(parts)}"
