"""verl's side of the engine parity test (tests/integrations/test_engine_parity.py), run as a script
in a process of its own: ``python verl_actor_step.py BATCH.pt RESULT.pt``.

It does what verl 0.9.1's classic trainer does to one rollout batch, on CPU, float32, one gloo
process: GRPO advantages by the trainer's ``compute_advantage``, then, on an
``ActorRolloutRefWorker(role="actor")``, the old log-probs (``compute_log_prob``; also the
reference's: the reference is the policy before the update) and one ``update_actor`` through the FSDP
engine and ``ppo_loss``, with the environment and overrides ``rl.engine: verl`` uses on a CPU machine.
It saves the old log-probs, the advantages, the update's metrics and every parameter after the update.

A process of its own because verl's platform is a process-wide singleton, chosen once, and the worker
starts a process group: neither may leak into the pytest process.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def environment(store: Path) -> dict[str, str]:
    """What ``rl.engine: verl`` sets on a CPU machine (``launch.cpu_env``), and what Ray would set:
    one rank, its process group on a file store (no port), no CUDA (the test runs the CPU path anywhere)."""
    from mtsql.engines.verl.main_ppo import cpu_env

    return {
        **cpu_env(),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "0",
        "DIST_INIT_METHOD": f"file://{store}",
        "CUDA_VISIBLE_DEVICES": "",
    }


def overrides(batch: dict) -> list[str]:
    """The CPU overrides of every ``main_ppo`` run mtsql starts on a CPU machine (``launch.cpu_overrides``),
    then the batch's update settings: one rollout per prompt, no entropy term, plain SGD."""
    from mtsql.engines.verl.main_ppo import cpu_overrides, hydra_value

    s, actor = batch["settings"], "actor_rollout_ref.actor"
    return [f"{key}={hydra_value(value)}" for key, value in cpu_overrides()] + [
        f"actor_rollout_ref.model.path={batch['model']}",
        "+actor_rollout_ref.model.load_tokenizer=false",  # the batch is token ids: saves seconds
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s['micro_batch']}",
        f"{actor}.ppo_mini_batch_size={s['mini_batch_size']}",
        f"{actor}.ppo_micro_batch_size_per_gpu={s['micro_batch']}",
        f"{actor}.clip_ratio={s['clip_ratio']}",
        f"{actor}.clip_ratio_low={s['clip_ratio']}",
        f"{actor}.clip_ratio_high={s['clip_ratio']}",
        f"{actor}.loss_agg_mode={s['loss_agg_mode']}",
        f"{actor}.use_kl_loss={str(s['kl_coef'] > 0).lower()}",
        f"{actor}.kl_loss_coef={s['kl_coef']}",
        f"{actor}.kl_loss_type=low_var_kl",
        f"{actor}.entropy_coeff=0",
        f"{actor}.optim.optimizer=SGD",
        f"{actor}.optim.weight_decay=0",
        f"{actor}.optim.lr={s['lr']}",
        f"{actor}.optim.clip_grad={s['max_grad_norm']}",
        f"{actor}.optim.total_training_steps=1",
    ]


def trainer_batch(batch: dict):
    """The rollout batch as verl's trainer holds it: padded prompts and responses, the reward on
    each response's last model token, one uid per group; advantages from the trainer's function."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    prompts, responses, mask = batch["prompts"], batch["responses"], batch["response_mask"]
    ids = torch.cat([prompts, responses], dim=1)
    last = mask.shape[1] - 1 - mask.flip(1).argmax(1)  # each response's last model token
    rewards = torch.zeros(mask.shape, dtype=torch.float32)
    rewards[torch.arange(len(last)), last] = batch["rewards"]
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(ids.shape[1]).expand_as(ids).clone(),
            "response_mask": mask,
            "token_level_rewards": rewards,
        },
        non_tensors={"uid": np.array(batch["groups"], dtype=object)},
    )
    return compute_advantage(data, adv_estimator="grpo")


def no_padding(data):
    """What the trainer hands the worker: a TensorDict with nested (unpadded) sequences."""
    from verl.workers.utils.padding import left_right_2_no_padding

    return left_right_2_no_padding(data.to_tensordict())


def main(batch_file: str, result_file: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.update(environment(Path(scratch) / "store"))  # before torch and verl read them
        import torch
        from hydra import compose, initialize_config_module
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine_workers import ActorRolloutRefWorker
        from verl.workers.utils.padding import no_padding_2_padding

        batch = torch.load(batch_file)
        with initialize_config_module("verl.trainer.config", version_base=None):
            config = compose("ppo_trainer", overrides=overrides(batch))
        worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
        worker.init_model()

        data = trainer_batch(batch)
        request = no_padding(data)
        temperature = batch["settings"]["temperature"]  # the trainer passes the rollout's
        tu.assign_non_tensor(request, calculate_entropy=False, compute_loss=False, temperature=temperature)
        old = no_padding_2_padding(tu.get(worker.compute_log_prob(request), "log_probs"), request).float()
        data.batch["old_log_probs"] = old
        data.batch["ref_log_prob"] = old.clone()  # the reference is the policy before the update

        request = no_padding(data)
        size = batch["settings"]["mini_batch_size"]
        tu.assign_non_tensor(
            request,
            calculate_entropy=False,
            compute_loss=True,
            temperature=temperature,
            global_batch_size=size,
            mini_batch_size=size,
            epochs=1,
            seed=0,
            dataloader_kwargs={"shuffle": False},
        )
        metrics = tu.get(worker.update_actor(request), "metrics")
        params = {
            name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for name, p in worker.actor.engine.module.named_parameters()
        }
        torch.distributed.destroy_process_group()
    torch.save(
        {
            "old_log_probs": old,
            "advantages": data.batch["advantages"].float(),
            "params": params,
            "metrics": {k: [float(x) for x in v] for k, v in metrics.items()},
        },
        result_file,
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
