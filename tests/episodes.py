"""One episode at a time, for tests that look at a single trajectory: ``run_episode`` steps a policy
through ``SqlAgentEnv.step`` (the pipeline runs episodes in batches with
``mtsql.engines.rollout.RolloutEngine``, which steps the environment the same way), and ``ReplayPolicy``
replays recorded assistant messages."""

from __future__ import annotations

import random
from collections.abc import Sequence

from mtsql.core.agent.env import SqlAgentEnv, Trajectory
from mtsql.core.agent.policies import Policy
from mtsql.core.agent.tools import MemoryEntry
from mtsql.core.data.records import Turn


def run_episode(
    env: SqlAgentEnv,
    policy: Policy,
    turn: Turn,
    memory: list[MemoryEntry] | None = None,
    rng: random.Random | None = None,
) -> Trajectory:
    """Reset ``env`` on ``turn`` and step ``policy`` until the episode ends; return the trajectory.
    Without ``rng`` the randomness is seeded by the turn's uid (reproducible)."""
    rng = rng or random.Random(turn.uid)
    env.reset(turn, memory)
    done = False
    while not done:
        _, done, _ = env.step(policy(list(env.trajectory.messages), turn, rng))
    return env.trajectory


class ReplayPolicy:
    """Replays recorded assistant messages in order; an empty message once they run out."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory) -> ReplayPolicy:
        return cls([m["content"] for m in trajectory.messages if m["role"] == "assistant"])

    def __call__(self, messages: list[dict], turn: Turn, rng: random.Random) -> str:
        done = sum(m["role"] == "assistant" for m in messages)
        return self.texts[done] if done < len(self.texts) else ""
