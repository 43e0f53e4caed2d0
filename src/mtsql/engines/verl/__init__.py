"""verl 0.9.1 engine for ``mtsql rl`` (GPUs, or the CPUs through ``.venv-verl``): multi-turn GRPO over mtsql's
agent environment.

* ``dataset``: the RL parquet (one row per turn) verl's ``RLHFDataset`` reads.
* ``agent_loop``: ``SqlAgentLoop``, verl's agent loop over ``SqlAgentEnv`` (imports verl).
* ``reward``: ``compute_score``, verl's custom reward function over ``mtsql.core.rewards``.
* ``main_ppo``: the Hydra overrides, one ``main_ppo`` run per curriculum stage, checkpoint merging,
  the dry-run script and the runner (the CPU environment and overrides where CUDA is absent).
* ``cpu_platform``: verl's CPU platform and its patches, imported by verl's plugin hook (imports verl).
* ``cleanup``: every process of a verl run (Ray, vLLM) found by its environment tag and stopped.

Only ``agent_loop``, ``cpu_platform`` and ``main_ppo.compose_train_config`` import verl, so the rest
loads anywhere.
"""
