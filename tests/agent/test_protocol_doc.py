"""docs/protocol.md shows exactly the messages, schemas and rewards the code produces."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import GoldWithCorrectionPolicy
from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.core.rewards import compute_rewards

from ..episodes import run_episode
from .conftest import find

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_the_example_dialogue_is_what_the_environment_produces(sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0000/2")
    traj = run_episode(
        SqlAgentEnv(data_root=FIXTURE_DATA), GoldWithCorrectionPolicy(data_root=FIXTURE_DATA), turn
    )
    text = DOC.read_text()
    shown = re.findall(r"#### (\d+)\. (\w+)\n\n````text\n(.*?)\n````\n", text, re.DOTALL)
    assert [(int(n), role, content) for n, role, content in shown] == [
        (i, m["role"], m["content"]) for i, m in enumerate(traj.messages, 1)
    ]
    blocks = [json.loads(b) for b in re.findall(r"````json\n(.*?)\n````", text, re.DOTALL)]
    assert blocks[0] == TOOL_SCHEMAS
    assert blocks[1]["steps"][0]["sql"] == traj.steps[0].sql and blocks[1]["final_sql"] == traj.final_sql
    assert set(blocks[1]) == set(traj.to_dict())
    rewards = compute_rewards(traj, turn.gold_sql, data_root=FIXTURE_DATA)
    assert blocks[2].keys() == rewards.keys()
    assert all(abs(blocks[2][k] - v) < 1e-9 for k, v in rewards.items())
