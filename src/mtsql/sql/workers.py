"""Work split over processes by group (a database), each group whole on one process.

    with GroupWorkers(task, groups, args, workers=2) as pool:
        for index, result in pool.results():   # in completion order
            ...

``groups`` maps a key to its items, each item ``(index, payload)``; ``task(groups, *args)`` is a
module-level generator that yields ``(index, result)`` for the items of the groups it is given.
Groups go to the least loaded process, largest first (by number of items), so a process keeps the
caches of its groups warm. Processes are forked where the platform can (nothing to import again),
so open the pool before starting threads such as a progress bar. A task's exception is raised
again in the caller; a process that dies is an error naming its exit code.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait


def available_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def partition(groups: dict, workers: int) -> list[dict]:
    """Groups spread over ``workers`` bins: largest first, each into the lightest bin so far."""
    bins: list[dict] = [{} for _ in range(min(workers, len(groups)))]
    loads = [0] * len(bins)
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lightest = loads.index(min(loads))
        bins[lightest][key] = items
        loads[lightest] += len(items)
    return bins


class GroupWorkers:
    """Processes that run ``task`` on their share of the groups and stream results back."""

    def __init__(self, task: Callable[..., Iterator[tuple[int, object]]], groups: dict, args: tuple, *, workers: int):
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        self._connections: list[Connection] = []
        self._processes = []
        for share in partition(groups, workers):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_run, args=(task, share, args, sender), daemon=True)
            process.start()
            sender.close()
            self._connections.append(receiver)
            self._processes.append(process)

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
                if kind == "result":
                    yield payload[0], payload[1]
                elif kind == "done":
                    pending.pop(conn).join()
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


def _run(task, share: dict, args: tuple, sender: Connection) -> None:
    try:
        for index, result in task(share, *args):
            sender.send(("result", index, result))
        sender.send(("done",))
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
