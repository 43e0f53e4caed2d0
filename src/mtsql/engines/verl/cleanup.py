"""Stopping every process a verl run left: its Ray cluster (GCS, raylet, workers) and vLLM's engines.

main_ppo starts Ray, Ray starts its workers, the workers start vLLM: several of them leave the process
group mtsql kills on Ctrl-C, and a killed ``mtsql`` leaves them to init. Each run is therefore started
with ``TAG`` in its environment (``tagged_env``), which every one of those processes inherits, and
``stop_tagged`` finds and kills them by it, after a run and before the next attempt of the same stage.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

TAG = "MTSQL_VERL_RUN"
STOP_TIMEOUT_S = 30.0


def tagged_env(run: str) -> dict[str, str]:
    """The environment entry that marks every process of the verl run ``run`` (e.g. its stage folder)."""
    return {TAG: run}


def tagged(run: str) -> list[psutil.Process]:
    """The live processes of this user marked with ``run`` (never this process)."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(TAG) == run:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def stop_tagged(run: str, timeout: float = STOP_TIMEOUT_S) -> int:
    """SIGKILL the processes marked with ``run`` until none is left; returns how many were stopped.
    Raises ``RuntimeError`` naming the ones still alive after ``timeout`` seconds."""
    deadline, stopped = time.monotonic() + timeout, set()
    while processes := tagged(run):
        if time.monotonic() > deadline:
            raise RuntimeError(f"verl run {run}: processes {[p.pid for p in processes]} survive SIGKILL")
        for process in processes:
            try:
                process.send_signal(signal.SIGKILL)
                stopped.add(process.pid)
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(processes, timeout=1.0)
    return len(stopped)
