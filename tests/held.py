"""The real ``mtsql`` command in a process of its own, held at a chosen call until a test signals it.

    process = subprocess.Popen(held_command(marker, "mtsql.core.agent.policies:GoldPolicy.__call__",
                                            "sample", ...), ...)
    wait_for(marker, process)       # the stage is now inside that call, and stays there
    process.send_signal(signal.SIGINT)

The first call of ``module:Class.method`` runs, writes ``marker`` and then waits (up to ``HOLD_S``) before
returning: a signal sent once the marker exists reaches the stage at that point, however fast the
machine is. Apart from that one wrapped call, the command is the one users run (``mtsql.app.cli.main``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from .waiting import wait_until

HOLD_S = 120

_SCRIPT = f"""
import importlib, sys, threading
from pathlib import Path

marker, target = Path(sys.argv.pop(1)), sys.argv.pop(1)
module, _, path = target.partition(":")
owner_name, method = path.split(".")
owner = getattr(importlib.import_module(module), owner_name)
real = getattr(owner, method)

def held(*args, **kwargs):
    result = real(*args, **kwargs)
    if not marker.exists():
        marker.write_text(target)
        threading.Event().wait({HOLD_S})  # a signal's handler (Ctrl-C: KeyboardInterrupt) runs here
    return result

setattr(owner, method, held)
sys.argv[0] = "mtsql"
from mtsql.app.cli import main
main()
"""


def ctrl_c_reaches_it() -> None:
    """``preexec_fn`` of a child a test sends SIGINT: Ctrl-C at its default, as in a terminal. A suite run
    as a background job (``make test &``, CI runners) ignores SIGINT, children inherit that, and the signal
    would be lost (the command then runs to its end)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def held_command(marker: Path, target: str, *args: str) -> list[str]:
    """``python -m mtsql *args`` whose first call of ``target`` writes ``marker`` and then holds."""
    return [sys.executable, "-c", _SCRIPT, str(marker), target, *args]


def wait_for(marker: Path, process: subprocess.Popen, seconds: float = 300) -> None:
    """Until ``marker`` exists; fails if ``process`` ends first or ``seconds`` pass."""

    def held() -> bool:
        assert process.poll() is None, f"the command ended before it was held: {process.communicate()}"
        return marker.exists()

    wait_until(held, seconds, "the command was not held")
