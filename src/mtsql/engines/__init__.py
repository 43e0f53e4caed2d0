"""Engines: generation backends, the rollout, the RL engines (local GRPO, verl), LLaMA-Factory SFT, models.

Each family of engines has one registry, imported where it is used: ``backends.settings.BACKENDS`` and
``rl_settings.RL_ENGINES``."""
