"""``mtsql ARGS`` run inside the test's process, as a subprocess would see it, without its start-up cost.

    result = mtsql_in_process(["status", str(run)], cwd=tmp_path, env={"COLUMNS": "200"})
    assert result.returncode == 0 and "sample" in result.stdout

The command goes through ``mtsql.app.cli.main`` (the console script's entry, so errors become one line
and an exit code as users see them) in folder ``cwd``, with ``os.environ`` replaced by ``env`` alone, the
SQL caches of this process emptied first, stdout and stderr (logging included) captured, and an exception
that would end a real process written as its traceback with exit code 1. What is written to the file
descriptors themselves (C libraries, child processes) is not captured. Tests about signals, the exit of a
real process or its environment (PYTHONPATH, mounts) keep a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


@contextlib.contextmanager
def _environment(env: Mapping[str, str], cwd: Path | None) -> Iterator[None]:
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.clear()
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


@contextlib.contextmanager
def _logging_to(stream: io.StringIO, level: str) -> Iterator[None]:
    """Root logging as ``main``'s ``basicConfig`` sets it up in a fresh process."""
    root, handler = logging.getLogger(), logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)


def mtsql_in_process(
    args: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``mtsql *args``; the result has a subprocess's ``returncode``, ``stdout`` and ``stderr``."""
    from mtsql.app.cli import main

    from .caches import clear_caches

    env = dict(env or {})
    out, err = io.StringIO(), io.StringIO()
    code = 0
    clear_caches()
    with (
        _environment(env, cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _logging_to(err, env.get("MTSQL_LOG", "WARNING").upper()),
    ):
        sys.argv = ["mtsql", *map(str, args)]
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                err.write(exc.code + "\n")
        except Exception:  # what the interpreter does with an uncaught exception
            err.write(traceback.format_exc())
            code = 1
    return subprocess.CompletedProcess(["mtsql", *map(str, args)], code, out.getvalue(), err.getvalue())


_STEPS = """
{prelude}
import json, os, sys, types
from pathlib import Path
tests = types.ModuleType("mtsql_tests")  # this folder as a package: site-packages may hold a "tests"
tests.__path__ = [sys.argv[1]]
sys.modules["mtsql_tests"] = tests
from mtsql_tests.inprocess import mtsql_in_process
for name, args in json.loads(sys.argv[2]).items():
    done = mtsql_in_process(args, env=dict(os.environ))
    for suffix, text in (("rc", str(done.returncode)), ("out", done.stdout), ("err", done.stderr)):
        Path(f"{name}.{suffix}").write_text(text)
"""


def steps_in_one_process(steps: Mapping[str, Sequence[str]], prelude: str = "") -> list[str]:
    """argv of one Python process that runs each named ``mtsql`` command in turn, as ``mtsql_in_process``
    does, and leaves ``NAME.rc``, ``NAME.out`` and ``NAME.err`` in its folder: for a test that needs a
    process of its own (a mount namespace, import hooks: ``prelude``, run first) without paying the
    start-up of one per command."""
    steps_json = json.dumps({name: list(args) for name, args in steps.items()})
    script = _STEPS.replace("{prelude}", prelude)
    return [sys.executable, "-c", script, str(Path(__file__).parent), steps_json]
