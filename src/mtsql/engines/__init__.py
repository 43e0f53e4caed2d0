"""Engines: generation backends, the rollout, the RL engines (local GRPO, verl), LLaMA-Factory SFT, models.

Importing this package registers each engine's settings with the config (``engines.settings``)."""

from mtsql.engines import settings  # noqa: F401
