"""SFT in more than one process on the CPUs: LLaMA-Factory under torchrun with gloo (``sft.nproc_per_node=2``)
against one process of the same global batch; ``slow``: the real trainings of the tiny Qwen3."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtsql.base.config import SftConfig
from mtsql.engines.llamafactory import train_config


def config(tmp_path: Path, **sft) -> dict:
    return train_config(SftConfig(max_steps=1, **sft), model_path=tmp_path / "model", template="qwen3",
                        dataset_dir=tmp_path, dataset="d", output_dir=tmp_path / "out")


@pytest.mark.parametrize(("sft", "backend"), [
    ({"use_cpu": True, "nproc_per_node": 2}, "gloo"),
    ({"use_cpu": True, "nnodes": 2}, "gloo"),
    ({"use_cpu": True}, None),  # one process: no process group
    ({"use_cpu": False, "nproc_per_node": 2}, None),  # GPUs: accelerate picks NCCL
])
def test_several_cpu_processes_all_reduce_over_gloo(tmp_path, sft, backend):
    """accelerate picks the CPU backend itself (ccl where oneCCL is installed and CCL_WORKER_COUNT is set, MPI
    where torch was built with it, else gloo); the plan says gloo, which every CPU torch has, so the launch
    does not depend on what else the machine holds (the real launch below runs it)."""
    assert config(tmp_path, **sft).get("ddp_backend") == backend
