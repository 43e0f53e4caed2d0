"""Shared fixtures: the packaged data subset, and the full data folder when $MTSQL_DATA is set."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import sys
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA

REPO = Path(__file__).resolve().parents[1]

# pytest-xdist's workers start with COLUMNS=80 and LINES=24: a rich Console made when mtsql is imported
# would keep that size for good, where tests/inprocess.py gives each command the COLUMNS it asks for.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def _leave_at_once() -> None:
    """An xdist worker has sent every result by the time its interpreter exits, and tearing down what the
    tests imported (torch, verl, ray, matplotlib) then held each worker for seconds before the run could
    end: the worker leaves once the exit handlers registered after this one (by the libraries) have run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_leave_at_once)  # registered first, run last


MODEL_FIXTURES = {
    "models_home",
    "tiny_qwen3",
    "tiny_qwen25",
    "tiny_llama3",
    "tiny_smollm2",
    "tiny_tokenizer",
    "tiny_backend",
    "smollm2",
    "model_dir",
}
VLLM_FIXTURES = {"vllm_python", "tiny_server"}
VERL_FIXTURES = {"verl_python"}


def pytest_collection_modifyitems(items):
    """Markers from the fixtures a test uses: a real model (``MODEL_FIXTURES``) -> ``model``; the full
    data folder -> ``data``."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if MODEL_FIXTURES & used:
            item.add_marker(pytest.mark.model)
        if "full_data" in used:
            item.add_marker(pytest.mark.data)
        if VLLM_FIXTURES & used:
            item.add_marker(pytest.mark.vllm)
        if VERL_FIXTURES & used:
            item.add_marker(pytest.mark.verl)


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory):
    """The MTSQL_HOME of every test that sets none: a fresh folder per session (per xdist worker). The
    caches tests fill (data digests of every artifact file, gold results) never reach the user's
    ~/.cache/mtsql, which grows with each run's files and is read and rewritten whole, and no test reads
    what a real run cached there. ``models_home`` replaces it for the tests with real models."""
    patch = pytest.MonkeyPatch()
    patch.setenv("MTSQL_HOME", str(tmp_path_factory.mktemp("mtsql-home")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def fixture_root() -> Path:
    return FIXTURE_DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full shared data folder; tests that need it are skipped when $MTSQL_DATA is unset."""
    value = os.environ.get("MTSQL_DATA")
    if not value or not (Path(value) / "sparc" / "dev.json").exists():
        pytest.skip("needs the full data folder: set MTSQL_DATA (CI sets ../shared/data)")
    return Path(value)


# Real models for the model/backend/rollout tests: one cache under .mtsql_home/ shared by every run,
# so the tiny Qwen3 is built once (~20 s) and SmolLM2 pulled once (slow tests only).
MODELS_HOME = REPO / ".mtsql_home" / "tests"


@pytest.fixture(scope="session")
def models_home():
    patch = pytest.MonkeyPatch()
    patch.setenv("MTSQL_HOME", str(MODELS_HOME))
    yield MODELS_HOME
    patch.undo()


@contextlib.contextmanager
def building(models_home: Path):
    """One process at a time builds or pulls into ``models_home`` (pytest-xdist runs several): another one
    finishing the same build meanwhile would replace the folder under the first one's tests."""
    models_home.mkdir(parents=True, exist_ok=True)
    with open(models_home / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def tiny_qwen3(models_home) -> Path:
    from mtsql.engines.models import registry

    with building(models_home):
        return registry.make_tiny("qwen3")


@pytest.fixture(scope="session")
def tiny_qwen25(models_home) -> Path:
    from mtsql.engines.models import registry

    with building(models_home):
        return registry.make_tiny("qwen25")


@pytest.fixture(scope="session")
def tiny_llama3(models_home) -> Path:
    from mtsql.engines.models import registry

    with building(models_home):
        return registry.make_tiny("llama3")


@pytest.fixture(scope="session")
def tiny_smollm2(models_home) -> Path:
    from mtsql.engines.models import registry

    with building(models_home):
        return registry.make_tiny("smollm2")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_qwen3):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen3)


@pytest.fixture(scope="session")
def tiny_backend(tiny_qwen3):
    from mtsql.engines.backends.hf import HFBackend

    return HFBackend(tiny_qwen3)


@pytest.fixture(scope="session")
def smollm2(models_home) -> Path:
    from mtsql.engines.models import registry

    with building(models_home):
        return registry.pull("smollm2-135m")


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """The Python of ``.venv-verl``, where verl trains on the CPUs (``make setup`` builds it on machines
    without CUDA). Missing, the tests fail under CI (where make test built it) and are skipped elsewhere."""
    import torch

    from mtsql.engines.verl.main_ppo import verl_python as find

    if torch.cuda.is_available():
        pytest.skip("verl's CPU tests: this machine has CUDA, where verl runs its GPU plan")
    python = Path(find())
    if not python.is_file():
        message = f"no {python} for the verl tests: run `make setup`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The Python with vLLM that the vllm backend finds (``make setup`` builds .venv-vllm on CPU
    machines). Missing, the tests fail under CI (where make test built it) and are skipped elsewhere."""
    from mtsql.base.errors import UsageError
    from mtsql.engines.backends.vllm_server import find_python

    try:
        return find_python()
    except UsageError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no vLLM for the vllm tests: {exc}")
        pytest.skip(f"no vLLM here (run make setup): {exc}")


@pytest.fixture(scope="session")
def tiny_server(tiny_qwen3, vllm_python, tmp_path_factory):
    """A vLLM server on the tiny Qwen3 (float32), shared by the tests that only talk to it."""
    from mtsql.engines.backends.vllm import VLLMBackend

    backend = VLLMBackend(
        tiny_qwen3,
        python=str(vllm_python),
        dtype="float32",
        kv_cache_gib=1,
        log_path=tmp_path_factory.mktemp("vllm") / "server.log",
    )
    yield backend
    backend.close()
