"""The agent environment (docs/protocol.md, docs/method.md): protocol, prompts, tools, environment,
scripted policies.

    from mtsql.core.agent import SqlAgentEnv, TOOL_SCHEMAS, make_policy
    env, policy = SqlAgentEnv(env_cfg, sql_cfg, data_root), make_policy("gold")
    messages = env.reset(turn)
    observation, done, info = env.step(policy(messages, turn, rng))

Modules: ``protocol`` (one message -> one action), ``prompts`` (every text the model reads),
``schema_prompt`` (CREATE TABLE rendering), ``tools`` (exec_sql, memory_retrieve, TOOL_SCHEMAS),
``env`` (SqlAgentEnv, Trajectory, Step), ``policies`` (gold, gold_with_correction),
``mutations`` (wrong variants of a gold query). docs/protocol.md shows a full dialogue.
"""

from __future__ import annotations

from mtsql.core.agent.env import SqlAgentEnv, Step, Trajectory
from mtsql.core.agent.policies import GoldPolicy, GoldWithCorrectionPolicy, make_policy
from mtsql.core.agent.protocol import Action, parse_action
from mtsql.core.agent.tools import TOOL_SCHEMAS, MemoryEntry

__all__ = [
    "TOOL_SCHEMAS",
    "Action",
    "GoldPolicy",
    "GoldWithCorrectionPolicy",
    "MemoryEntry",
    "SqlAgentEnv",
    "Step",
    "Trajectory",
    "make_policy",
    "parse_action",
]
