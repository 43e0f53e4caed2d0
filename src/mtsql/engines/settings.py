"""Registers every engine's settings as sub-sections of the config (``sample.<backend>``, ``rl.<engine>``),
and how the config reads a model's context (``engines.models.registry.model_context``).

Imported with ``mtsql.engines``, so any caller of ``load_config`` above ``base`` has them; a new
backend or RL engine adds its ``settings.py`` here."""

from mtsql.base.config import context_reader
from mtsql.engines.backends import settings as backends  # noqa: F401  (hf, vllm, openai)
from mtsql.engines.local_grpo import settings as local_grpo  # noqa: F401
from mtsql.engines.models.registry import model_context
from mtsql.engines.verl import settings as verl  # noqa: F401

context_reader(model_context)
