"""Turns and environments on the packaged fixture data (real Spider databases, real dialogues)."""

from __future__ import annotations

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.data import load_turns
from mtsql.core.data.records import Turn


@pytest.fixture(scope="session")
def cosql_turns() -> list[Turn]:
    return load_turns("cosql", "dev", root=FIXTURE_DATA, with_hardness=False)


@pytest.fixture(scope="session")
def sparc_turns() -> list[Turn]:
    return load_turns("sparc", "dev", root=FIXTURE_DATA, with_hardness=False)


def find(turns: list[Turn], uid: str) -> Turn:
    return next(t for t in turns if t.uid == uid)


@pytest.fixture
def make_env():
    def make(sql_cfg: SqlConfig = SqlConfig(), **env) -> SqlAgentEnv:
        return SqlAgentEnv(EnvConfig(**env), sql_cfg, data_root=FIXTURE_DATA)

    return make
