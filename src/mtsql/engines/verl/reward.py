"""verl's custom reward function: mtsql's rewards of the trajectory the agent loop recorded.

verl 0.9.1 loads it from ``reward.custom_reward_function.path=pkg://mtsql.engines.verl.reward``
and ``.name=compute_score``; ``reward.custom_reward_function.reward_kwargs`` (added with ``+``)
become keyword arguments: ``reward`` (``RewardConfig`` fields), ``sql`` (``SqlConfig`` fields) and
``data_root``. The naive reward manager merges the agent loop's ``extra_fields`` into
``extra_info``, so the episode arrives as the JSON of ``Trajectory.to_dict()``; the decoded
``solution_str`` is not used (the trajectory is the exact record of what the model did).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mtsql.base.config import build
from mtsql.core.agent.env import Trajectory
from mtsql.core.agent.settings import SqlConfig
from mtsql.core.rewards import RewardConfig, compute_rewards, reward_keys
from mtsql.core.trajectories import BEHAVIOUR, episode_behaviour

TRAJECTORY_KEY = "mtsql_trajectory"
RESPONSE_TOKENS_KEY = "mtsql_response_tokens"
OK_KEY = "trajectory_ok"
BEHAVIOUR_KEYS = (
    *BEHAVIOUR,
    "response_tokens",
)  # what the episode did: read back per step by main_ppo.step_samples_of
VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

logger = logging.getLogger(__name__)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Any = None,
    reward: Mapping | None = None,
    sql: Mapping | None = None,
    data_root: str | None = None,
    **verl_kwargs: Any,
) -> dict[str, float]:
    """The ``score_keys`` of the reward config: the rewards (``score`` = the configured family's
    total), the episode's behaviour (``trajectories.episode_behaviour`` and its model tokens, which
    verl's rollout dump keeps per step for the report) and ``trajectory_ok``.

    Without a readable trajectory in ``extra_info`` every value is 0 and ``trajectory_ok`` is 0,
    with a warning: the same keys on every call, as verl requires. A reward_kwargs key mtsql does
    not know is an error, so a typo in the launch command cannot pass unnoticed.
    """
    unknown = set(verl_kwargs) - VERL_KWARGS
    if unknown:
        raise TypeError(
            f"compute_score got unknown reward_kwargs {sorted(unknown)}: use reward, sql, data_root"
        )
    reward_cfg = config_section(RewardConfig, reward, source="reward_kwargs", prefix="reward")
    sql_cfg = config_section(SqlConfig, sql, source="reward_kwargs", prefix="sql")
    trajectory, problem = read_trajectory(extra_info)
    if trajectory is None:
        logger.warning("compute_score(%s): %s; scoring 0", data_source, problem)
        return dict.fromkeys(score_keys(reward_cfg), 0.0)
    tokens = _int_or_none(extra_info.get(RESPONSE_TOKENS_KEY))
    scores = compute_rewards(
        trajectory,
        ground_truth,
        reward_cfg,
        sql_cfg=sql_cfg,
        data_root=Path(data_root) if data_root else None,
        response_tokens=tokens,
    )
    behaviour = {key: float(value) for key, value in episode_behaviour(trajectory).items()}
    return {**scores, **behaviour, "response_tokens": float(tokens or 0), OK_KEY: 1.0}


def score_keys(reward_cfg: RewardConfig) -> tuple[str, ...]:
    """The keys ``compute_score`` returns under ``reward_cfg``, on every call of a run."""
    return (*reward_keys(reward_cfg), *BEHAVIOUR_KEYS, OK_KEY)


def read_trajectory(extra_info: Any) -> tuple[Trajectory | None, str]:
    """(the trajectory, "") or (None, what is wrong) from a reward call's ``extra_info``."""
    if not isinstance(extra_info, Mapping):
        return None, f"extra_info is {type(extra_info).__name__}, not a mapping"
    text = extra_info.get(TRAJECTORY_KEY)
    if not isinstance(text, str):
        return None, f"extra_info has no '{TRAJECTORY_KEY}' (was the row run by mtsql's agent loop?)"
    try:
        record = json.loads(text)
        if not isinstance(record, dict):
            raise TypeError(f"a {type(record).__name__}, not an object")
        return Trajectory.from_dict(record), ""
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"'{TRAJECTORY_KEY}' is not a trajectory record ({type(exc).__name__}: {exc})"


def config_section(cls: type, value: Mapping | None, *, source: str, prefix: str) -> Any:
    """A validated mtsql config section from a mapping that Hydra may hand over as a DictConfig."""
    return build(cls, _plain(value or {}), source=source, prefix=f"{prefix}.")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
