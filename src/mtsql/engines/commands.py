"""Running an engine's command (``llamafactory-cli``, verl's ``main_ppo`` and model merger) as a subprocess.

    command = Command("llamafactory-cli train", (cli, "train", "train.yaml"), env={"FORCE_TORCHRUN": "1"})
    run_logged(command, work / "log.txt", on_output=watcher.feed)

The command's files are written first; it runs in its folder (default: the log's), with this
Python's ``bin`` first on PATH (so ``torchrun``, started by name by launchers, is this
environment's); its output is appended to the log as it comes and handed to ``on_output`` in
chunks (``OutputLines`` cuts them into lines). A non-zero exit raises ``StageFailed`` quoting
``error_line`` of its output; an interrupt kills the whole process group (launcher and workers), and
the kernel sends the launcher SIGTERM if mtsql itself is killed (``die_with_parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mtsql.base.errors import StageFailed
from mtsql.base.files import write_text

TAIL_BYTES = 256 * 1024  # output kept in memory to find the error line
WRAPPER_ERRORS = ("CalledProcessError", "ChildFailedError")  # launchers reporting a child's failure
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d*\]:\s?")  # torchrun's per-rank prefix
_EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b(?:\([\w.]+\))?:?")


@dataclass(frozen=True)
class Command:
    """One external command: its argv, the environment variables it adds, the folder it runs in
    (None: the log's), the files (path -> text) written before it runs, what it leaves behind
    (``produces``), and a note printed above it in a plan."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    files: dict[Path, str] = field(default_factory=dict)
    produces: dict[str, Path] = field(default_factory=dict)
    note: str = ""

    def shell(self, *, one_per_line: bool = False) -> str:
        """The command as a shell line with its environment variables; ``one_per_line`` puts each
        ``key=value`` override or ``--flag value`` on its own continued line."""
        parts = [[f"{key}={shlex.quote(value)}" for key, value in self.env.items()]]
        for index, arg in enumerate(self.argv):
            if one_per_line and index and (arg.startswith("--") or "=" in arg):
                parts.append([])
            parts[-1].append(shlex.quote(arg))
        return " \\\n    ".join(" ".join(p) for p in parts) if one_per_line else " ".join(sum(parts, []))


def run_logged(command: Command, log_path: Path, *, on_output: Callable[[str], None] | None = None) -> None:
    """Write ``command``'s files, run it, append its output to ``log_path``; fail with its error line."""
    log_path = Path(log_path)
    for path, text in command.files.items():
        write_text(path, text)
    cwd = command.cwd or log_path.parent
    cwd.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, **command.env, "PATH": path}
    tail = bytearray()
    with log_path.open("ab") as log:
        log.write(f"\n$ {command.shell()}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                command.argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            raise StageFailed(f"cannot start {command.argv[0]}: {exc.strerror}") from None
        try:
            while chunk := proc.stdout.read1(65536):
                log.write(chunk)
                log.flush()
                tail += chunk
                del tail[:-TAIL_BYTES]
                if on_output:
                    on_output(chunk.decode(errors="replace"))
        finally:
            if proc.poll() is None:  # interrupted while reading: stop the launcher and its workers
                os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
    if returncode != 0:
        raise StageFailed(
            f"{command.name} failed ({_exit_text(returncode)}): "
            f"{error_line(tail.decode(errors='replace'))} (full log: {log_path})"
        )


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the thread that started it dies (Linux
    ``PR_SET_PDEATHSIG``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}, out of memory?"
    return f"exit {returncode}"


def error_line(text: str) -> str:
    """The line that names what went wrong: the last exception line (a traceback's final line, or a
    line that names an exception, as Ray and Hydra print them) that is not a launcher reporting its
    child's failure; else the last non-empty line."""
    lines = [RANK_PREFIX.sub("", line.rstrip()) for line in re.split(r"[\r\n]", text)]
    found: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            after = next(
                ((i, ln) for i, ln in enumerate(lines[index + 1 :], index + 1) if ln and not ln[0].isspace()),
                None,
            )
            if after:
                found.append(after)
        elif _EXCEPTION.match(line):
            found.append((index, line.strip()))
    raised = [line for _, line in sorted(set(found))]
    real = [line for line in raised if not any(w in line.split(":")[0] for w in WRAPPER_ERRORS)]
    if real or raised:
        return (real or raised)[-1]
    nonempty = [line.strip() for line in lines if line.strip()]
    return nonempty[-1] if nonempty else "(no output)"


class OutputLines:
    """Cuts output that arrives in arbitrary chunks into lines (ended by a newline or, for progress
    bars, a carriage return; torchrun's rank prefix removed) and hands each complete one to ``on_line``."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self._partial = ""

    def feed(self, chunk: str) -> None:
        pieces = re.split(r"[\r\n]", self._partial + chunk)
        self._partial = pieces.pop()  # an unfinished line waits for the next chunk
        for piece in pieces:
            self.on_line(RANK_PREFIX.sub("", piece))
