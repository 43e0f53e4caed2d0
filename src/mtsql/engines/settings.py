"""Registers every engine's settings as sub-sections of the config (``sample.<backend>``, ``rl.<engine>``).

Imported with ``mtsql.engines``; a new backend or RL engine adds its ``settings.py`` here."""

from mtsql.engines.backends import settings as backends  # noqa: F401  (hf, vllm, openai)
from mtsql.engines.local_grpo import settings as local_grpo  # noqa: F401
from mtsql.engines.verl import settings as verl  # noqa: F401
