"""SFT in more than one process on the CPUs: LLaMA-Factory under torchrun with gloo (``sft.nproc_per_node=2``)
against one process of the same global batch; ``slow``: the real trainings of the tiny Qwen3."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest

from mtsql.base.errors import UsageError
from mtsql.engines.llamafactory import export_sharegpt, plan_sft, run_sft, train_config
from mtsql.engines.llamafactory.settings import SftConfig
from mtsql.engines.llamafactory.train import training_curve


def config(tmp_path: Path, **sft) -> dict:
    return train_config(
        SftConfig(max_steps=1, **sft),
        model_path=tmp_path / "model",
        template="qwen3",
        dataset_dir=tmp_path,
        dataset="d",
        output_dir=tmp_path / "out",
    )


@pytest.mark.parametrize(
    ("sft", "backend"),
    [
        ({"use_cpu": True, "nproc_per_node": 2}, "gloo"),
        ({"use_cpu": True, "nnodes": 2}, "gloo"),
        ({"use_cpu": True}, None),  # one process: no process group
        ({"use_cpu": False, "nproc_per_node": 2}, None),  # GPUs: accelerate picks NCCL
    ],
)
def test_several_cpu_processes_all_reduce_over_gloo(tmp_path, sft, backend):
    """accelerate picks the CPU backend itself (ccl where oneCCL is installed and CCL_WORKER_COUNT is set, MPI
    where torch was built with it, else gloo); the plan says gloo, which every CPU torch has, so the launch
    does not depend on what else the machine holds (the real launch below runs it)."""
    assert config(tmp_path, **sft).get("ddp_backend") == backend


def test_sft_extra_changes_the_backend_only_when_it_says_it_overrides(tmp_path):
    for processes in (1, 2):  # a key mtsql sets in some launches: refused in all of them
        with pytest.raises(UsageError, match="sft.extra sets ddp_backend"):
            config(tmp_path, use_cpu=True, nproc_per_node=processes, extra={"ddp_backend": "ccl"})
    assert (
        config(tmp_path, use_cpu=True, nproc_per_node=2, extra={"ddp_backend": "ccl"}, extra_override=True)[
            "ddp_backend"
        ]
        == "ccl"
    )


# ---------------------------------------------------------------------------------------------
# Real CPU trainings: one process against two of the same global batch

LR = 0.5  # plain SGD: a weight's change is lr x its gradient, so the weights compare the gradients themselves
EXAMPLES = 4  # two optimizer steps of a global batch of 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def examples() -> list[dict]:
    """Four trajectories of different lengths and answers, so that each step's two examples pad differently
    and a shard given the wrong examples would change the loss."""
    from .test_llamafactory import trajectory

    out = []
    for index, answer in enumerate(("count(*)", "name", "age", "max(age)")):
        item = trajectory(thinking=index % 2 == 0)
        item["messages"][1]["content"] += f" (variant {index})" * (index + 1)
        item["messages"][-1]["content"] = item["messages"][-1]["content"].replace("count(*)", answer)
        out.append(item)
    return out


def train(tmp_path: Path, model: Path, name: str, **layout):
    """Full fine-tuning of ``model`` on ``examples()``: two steps of SGD, seed 3; ``layout``: batch and
    processes."""
    cfg = SftConfig(
        finetuning_type="full",
        max_steps=2,
        grad_accum=1,
        cutoff_len=512,
        learning_rate=LR,
        lr_scheduler_type="constant",
        gradient_checkpointing=False,
        use_cpu=True,
        extra={"optim": "sgd"},
        **layout,
    )
    plan = plan_sft(cfg, model_path=model, template="qwen3", work_dir=tmp_path / name, seed=3)
    stats = export_sharegpt(
        examples(), plan.dataset_dir, tokenizer_path=model, template="qwen3", cutoff_len=512
    )
    result = run_sft(plan, log_path=tmp_path / name / "log.txt", expected_examples=stats.examples)
    assert (result.examples, result.steps) == (EXAMPLES, 2)
    return plan


@pytest.mark.slow
def test_two_cpu_processes_train_as_one_process_of_the_same_global_batch(tmp_path, tiny_qwen3):
    """``sft.nproc_per_node=2`` (torchrun, gloo, a batch of 1 per process) against one process with a batch of
    2: the same examples in each step, so the same loss, gradient norm and weights up to float32 summation
    order.

    Tolerances: the per-step loss and gradient norm to 1e-5 relative, the change of every weight tensor to
    1e-4 of its norm. What differs is only the order of float32 sums (a padded batch of 2 against two batches
    of 1 whose gradients gloo averages); on the 2-core machine the two agreed to ~1e-7 (docs/results.md). A
    process given the other's examples, a loss averaged per process instead of over the global batch, or
    gradients summed instead of averaged changes both by far more."""
    from safetensors.torch import load_file

    one = train(tmp_path, tiny_qwen3, "one", batch_size=2)
    two = train(tmp_path, tiny_qwen3, "two", batch_size=1, nproc_per_node=2, master_port=free_port())
    assert one.train.name == "llamafactory train" and two.train.env["FORCE_TORCHRUN"] == "1"
    assert two.train_config["ddp_backend"] == "gloo"
    log = (tmp_path / "two" / "log.txt").read_text()
    assert (
        "Process rank: 1, world size: 2" in log
        and "Total train batch size (w. parallel, distributed & accumulation) = 2" in log
    )

    curves = {name: training_curve(plan.trainer_dir) for name, plan in (("one", one), ("two", two))}
    assert [step for step, _ in curves["one"]] == [step for step, _ in curves["two"]] == [1, 2]
    for (_, first), (_, second) in zip(curves["one"], curves["two"], strict=True):
        for key in ("loss", "grad_norm"):
            assert math.isclose(first[key], second[key], rel_tol=1e-5), (key, first[key], second[key])

    base = load_file(tiny_qwen3 / "model.safetensors")
    weights = {
        name: load_file(plan.model_dir / "model.safetensors") for name, plan in (("one", one), ("two", two))
    }
    for key, before in base.items():
        moved = (weights["one"][key] - before).norm().item()
        apart = (weights["one"][key] - weights["two"][key]).norm().item()
        assert apart <= 1e-4 * moved or apart == moved == 0, (key, apart, moved)
    assert any(not weights["one"][key].equal(before) for key, before in base.items())
