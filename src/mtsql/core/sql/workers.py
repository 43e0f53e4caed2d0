"""Work split over processes by group (a database), each group whole on one process.

    with GroupWorkers(task, groups, args, workers=2) as pool:
        for index, result in pool.results():   # in completion order
            ...

``groups`` maps a key to its items, each item ``(index, payload)``; ``task(groups, *args)`` is a
module-level generator that yields ``(index, result)`` for the items of the groups it is given.
Each process takes the next group from a shared queue, largest groups first, so the processes
finish together whatever each group costs, and a process keeps the caches of its groups warm.
Processes are forked where the platform can (nothing to import again; the parent's objects are
frozen out of the garbage collector first so that the children do not copy their memory), so open
the pool before starting threads such as a progress bar. A task's exception is raised again in the
caller; a process that dies is an error naming its exit code. Once the results are all in,
``cpu_seconds`` holds the CPU time each process used.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait

BATCH = 32  # results sent back together (fewer wake-ups of the caller; progress still moves)


def available_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class GroupWorkers:
    """Processes that run ``task`` on groups taken from a queue and stream the results back."""

    def __init__(
        self, task: Callable[..., Iterator[tuple[int, object]]], groups: dict, args: tuple, *, workers: int
    ):
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        queue = context.SimpleQueue()
        for key in sorted(groups, key=lambda key: -len(groups[key])):
            queue.put(key)
        count = max(1, min(workers, len(groups)))
        for _ in range(count):
            queue.put(None)  # one "no more groups" for each process
        self._connections: list[Connection] = []
        self._processes = []
        self.cpu_seconds: list[float] = []
        gc.freeze()
        try:
            for _ in range(count):
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(target=_run, args=(task, groups, args, queue, sender), daemon=True)
                process.start()
                sender.close()
                self._connections.append(receiver)
                self._processes.append(process)
        finally:
            gc.unfreeze()

    def results(self) -> Iterator[tuple[int, object]]:
        pending = {conn: process for conn, process in zip(self._connections, self._processes, strict=True)}
        while pending:
            for conn in wait(list(pending)):
                try:
                    kind, *payload = conn.recv()
                except EOFError:
                    process = pending.pop(conn)
                    process.join()
                    raise RuntimeError(f"a scoring process died (exit code {process.exitcode})") from None
                if kind == "results":
                    yield from payload[0]
                elif kind == "done":
                    pending.pop(conn).join()
                    self.cpu_seconds.append(payload[0])
                else:
                    exc, text = payload
                    raise exc from RuntimeError(f"in a scoring process:\n{text}")

    def close(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.terminate()
            process.join()
        for conn in self._connections:
            conn.close()

    def __enter__(self) -> GroupWorkers:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _run(task, groups: dict, args: tuple, queue, sender: Connection) -> None:
    try:
        while (key := queue.get()) is not None:
            batch = []
            for item in task({key: groups[key]}, *args):
                batch.append(item)
                if len(batch) == BATCH:
                    sender.send(("results", batch))
                    batch = []
            sender.send(("results", batch))
        sender.send(("done", time.process_time()))
    except BaseException as exc:  # the caller re-raises it; a process must not die silently
        sender.send(("error", _picklable(exc), traceback.format_exc()))
    finally:
        sender.close()


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # an exception that cannot cross processes is described instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")
