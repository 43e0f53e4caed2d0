"""RL parquet for verl 0.9.1: one row per turn, in the columns verl's ``RLHFDataset`` reads (docs/engines.md).

    report = write_rl_parquet(turns, path, env_cfg=cfg.env, sql_cfg=cfg.sql, data_root=root,
                              chat=ChatFormat(tokenizer), max_prompt_len=cfg.rl.max_prompt_len)

Columns: ``data_source`` (``mtsql-<dataset>``), ``prompt`` (the [system, user] messages of
``SqlAgentEnv.reset``), ``ability``, ``reward_model`` (``{style: rule, ground_truth: gold SQL}``),
``extra_info`` and ``agent_name`` (routes each row to ``SqlAgentLoop``). ``extra_info`` has the
same keys in every row and only scalars: the turn and its memory travel as JSON strings, because
Arrow cannot write an empty struct and reads a key missing from some rows back as None.
No ``tools_kwargs``: the agent loop runs the environment's tools itself, not verl's tool classes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.agent.tools import MemoryEntry, env_tools
from mtsql.core.chat_format import ChatFormat
from mtsql.core.data.records import Turn

AGENT_NAME = "mtsql_sql_agent"
ABILITY = "text2sql"


@dataclass(frozen=True)
class ExportReport:
    """What ``write_rl_parquet`` wrote: rows kept, and uids dropped for a prompt over the limit."""

    path: Path
    rows: int
    too_long: tuple[str, ...]


def episode_tools(env_cfg: EnvConfig) -> list[dict] | None:
    """The tool schemas the chat template shows the model: the two tools in long mode, none in short."""
    return env_tools(env_cfg) or None


def rl_row(index: int, turn: Turn, messages: Sequence[dict], memory: Sequence[MemoryEntry] | None) -> dict:
    """One parquet row for ``turn`` whose episode starts with ``messages``."""
    return {
        "data_source": f"mtsql-{turn.dataset}",
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": turn.gold_sql},
        "extra_info": {
            "index": index,
            "uid": turn.uid,
            "hardness": turn.hardness or "",
            "turn": json.dumps(turn.to_dict(), ensure_ascii=False),
            "memory": json.dumps(
                None if memory is None else [m.to_dict() for m in memory], ensure_ascii=False
            ),
        },
        "agent_name": AGENT_NAME,
    }


def turn_of(extra_info: Mapping) -> Turn:
    """The Turn a row (or an agent loop's ``extra_info``) carries."""
    return Turn.from_dict(json.loads(extra_info["turn"]))


def memory_of(extra_info: Mapping) -> list[MemoryEntry] | None:
    """The memory a row carries: None means the environment's default (the gold earlier SQL)."""
    entries = json.loads(extra_info["memory"])
    return None if entries is None else [MemoryEntry.from_dict(e) for e in entries]


def write_rl_parquet(
    turns: Sequence[Turn],
    path: Path,
    *,
    env_cfg: EnvConfig,
    sql_cfg: SqlConfig,
    data_root: Path | None,
    chat: ChatFormat,
    max_prompt_len: int,
    memories: Mapping[str, Sequence[MemoryEntry]] | None = None,
) -> ExportReport:
    """Write the RL rows of ``turns``; a turn whose prompt exceeds ``max_prompt_len`` tokens is dropped.

    ``memories`` (by turn uid) gives the agent's own earlier answers for ``env.memory: predicted``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = SqlAgentEnv(env_cfg, sql_cfg, data_root)
    tools = episode_tools(env_cfg)
    rows, too_long = [], []
    for turn in turns:
        memory = None if memories is None else memories.get(turn.uid)
        messages = env.reset(turn, None if memory is None else list(memory))
        if len(chat.prompt_ids(messages, tools)) > max_prompt_len:
            too_long.append(turn.uid)
            continue
        rows.append(rl_row(len(rows), turn, messages, memory))
    if not rows:
        raise UsageError(
            f"no RL rows for {path}: {len(turns)} turns given, {len(too_long)} over "
            f"{max_prompt_len} prompt tokens"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return ExportReport(path=path, rows=len(rows), too_long=tuple(too_long))
