"""verl with more than one worker on the CPUs: ``rl.verl.n_gpus_per_node`` worker processes (each an FSDP2 rank
over gloo with a vLLM engine of its own) against one worker of the same global batch."""

from __future__ import annotations

from pathlib import Path

from mtsql.base.config import load_config
from mtsql.engines.verl.main_ppo import CurriculumParquet, build_stage_plan

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"


def overrides(tmp_path: Path, *settings: str) -> dict[str, str]:
    cfg = load_config(TINY, ["rl.batch_size=2", *settings])
    plan = build_stage_plan(cfg, [CurriculumParquet("stage-1", tmp_path / "s.parquet", 4)], model_path="m",
                            out_dir=tmp_path, data_root=tmp_path, cpu=True, python="python")
    return dict(item.split("=", 1) for item in plan[0].argv[3:])


def test_each_cpu_worker_is_a_gpu_of_the_private_ray_cluster(tmp_path):
    """verl places one worker per GPU bundle: on the CPUs ``rl.verl.n_gpus_per_node`` workers, and the private Ray
    cluster says it has that many GPUs (else the placement group never schedules)."""
    for workers in (1, 2):
        pairs = overrides(tmp_path, f"rl.verl.n_gpus_per_node={workers}")
        assert (pairs["trainer.n_gpus_per_node"], pairs["+ray_kwargs.ray_init.num_gpus"]) == (str(workers),) * 2
        assert pairs["trainer.nnodes"] == "1"
