"""The agent environment: one episode answers one turn of a dialogue (docs/protocol.md).

    env = SqlAgentEnv(env_cfg, sql_cfg, data_root)
    messages = env.reset(turn)                       # [system, user]
    observation, done, info = env.step(assistant_text)
    env.trajectory                                   # everything that happened, JSON-serialisable

Long mode: the agent runs queries with ``exec_sql``, states ``<exec_verify>`` on each result, on
later turns of a dialogue checks its query with ``memory_retrieve`` and ``<memory_verify>``, and
ends with ``<answer_sql>``, within ``max_messages`` assistant messages. A message that cannot be
parsed gets a protocol-error observation and costs a message; ``max_invalid`` such messages in a
row end the episode (``finish_reason = "invalid"``). Departures from that flow (a missing
verdict, answering without a memory check, ...) do not stop the episode; they are recorded as the
step's ``flow_errors`` and make the trajectory ``protocol_valid = False``.

Short mode (the paper's baseline): no tools; the first message is the answer, valid or not.

``env.protocol: release`` reads and answers messages as the released MTSQL-R1 checkpoints expect
(``protocol.parse_action``, ``tools.release_exec_sql`` / ``release_memory_retrieve``): the memory check
is about the query the ``memory_retrieve`` call carries, and further actions in a message are ignored
(counted in ``Step.ignored_actions``). ``env.observation_chars`` caps every observation.
``env.error_hint`` adds to a missing-table or missing-column error the names that exist
(``tools.schema_hint``); SFT export, local rollouts and verl's agent loop all step this class, so all
three show it alike.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.paths import data_dir, database_path
from mtsql.core.agent import prompts, tools
from mtsql.core.agent.protocol import EXEC_VERIFY, MEMORY_VERIFY, Action, parse_action
from mtsql.core.agent.schema_prompt import render_schema
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.agent.tools import MemoryEntry
from mtsql.core.data.records import Turn

MODES = ("long", "short")
MIN_OBSERVATION_CHARS = 100
MEMORY_SOURCES = ("gold", "predicted")
VERDICT_TAG = {"exec_sql": EXEC_VERIFY, "memory_retrieve": MEMORY_VERIFY}


@dataclass
class Step:
    """One assistant message and what followed it.

    ``exec_verdict`` / ``memory_verdict``: the verdicts this message states. ``verdict`` (tool steps
    only): the verdict the agent later gave on this tool's result, None if it never gave one.
    ``result_kind`` (exec_sql): ok | empty | error, with the sandbox's ``error_class``.
    ``checked_sql`` (memory_retrieve): the query the memory check is about: the latest executed one
    (mtsql protocol) or the call's own (release). ``ignored_actions``: the tool calls or answers after
    the first call that the release protocol did not run.
    """

    index: int
    text: str
    action: str  # tool_call | answer | invalid
    tool: str | None = None
    arguments: dict | None = None
    sql: str | None = None
    exec_verdict: str | None = None
    memory_verdict: str | None = None
    has_think: bool = False
    invalid_reason: str | None = None
    flow_errors: list[str] = field(default_factory=list)
    observation: str | None = None
    result_kind: str | None = None
    error_class: str | None = None
    row_count: int | None = None
    checked_sql: str | None = None
    verdict: str | None = None
    ignored_actions: int = 0
    tool_s: float = 0.0


@dataclass
class Trajectory:
    """The full record of one episode. ``final_sql`` comes only from an ``<answer_sql>`` the model wrote."""

    uid: str
    dataset: str
    db_id: str
    question: str
    mode: str
    memory_source: str
    max_messages: int
    thinking: bool
    memory: list[MemoryEntry]
    messages: list[dict]
    steps: list[Step] = field(default_factory=list)
    final_sql: str | None = None
    finish_reason: str | None = None  # answer | max_messages | invalid (short mode); None while running
    protocol_valid: bool = False
    elapsed_s: float = 0.0

    @property
    def num_messages(self) -> int:
        """The assistant messages of the episode."""
        return len(self.steps)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def tool_steps(self, tool: str) -> list[Step]:
        return [s for s in self.steps if s.action == "tool_call" and s.tool == tool]

    def proposed_sql(self) -> list[str]:
        """Every query the model proposed: each exec_sql argument, then the final answer."""
        out = [s.sql for s in self.tool_steps("exec_sql") if s.sql]
        return out + ([self.final_sql] if self.final_sql else [])

    def to_dict(self) -> dict:
        row = asdict(self)
        row["num_messages"] = self.num_messages
        return row

    @classmethod
    def from_dict(cls, row: dict) -> Trajectory:
        row = {k: v for k, v in row.items() if k != "num_messages"}
        unknown = sorted(set(row) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(
                f"a trajectory record holds {', '.join(unknown)}, which this mtsql does not write: an "
                "older mtsql made it; rerun the stage that wrote it with --force"
            )
        row["memory"] = [MemoryEntry.from_dict(m) for m in row.get("memory", [])]
        row["steps"] = [Step(**s) for s in row.get("steps", [])]
        return cls(**row)


class SqlAgentEnv:
    """Episodes of the text-to-SQL agent over one data folder; see the module docstring."""

    def __init__(
        self,
        env_cfg: EnvConfig = EnvConfig(),
        sql_cfg: SqlConfig = SqlConfig(),
        data_root: Path | None = None,
    ) -> None:
        if env_cfg.mode not in MODES:
            raise ValueError(f"env.mode must be one of {MODES}, got {env_cfg.mode!r}")
        if env_cfg.memory not in MEMORY_SOURCES:
            raise ValueError(f"env.memory must be one of {MEMORY_SOURCES}, got {env_cfg.memory!r}")
        if env_cfg.max_messages < 1:
            raise ValueError(f"env.max_messages must be at least 1, got {env_cfg.max_messages}")
        if env_cfg.max_invalid is not None and env_cfg.max_invalid < 1:
            raise ValueError(f"env.max_invalid must be at least 1 (or null), got {env_cfg.max_invalid}")
        if env_cfg.observation_chars is not None and env_cfg.observation_chars < MIN_OBSERVATION_CHARS:
            raise ValueError(
                f"env.observation_chars must be at least {MIN_OBSERVATION_CHARS} (or null), "
                f"got {env_cfg.observation_chars}"
            )
        self.env_cfg = env_cfg
        self.sql_cfg = sql_cfg
        self.data_root = data_dir(data_root)
        self.trajectory: Trajectory | None = None
        self._turn: Turn | None = None
        self._pending: int | None = None  # index of the tool step whose verdict is due

    @property
    def max_messages(self) -> int:
        return 1 if self.env_cfg.mode == "short" else self.env_cfg.max_messages

    def reset(self, turn: Turn, memory: list[MemoryEntry] | None = None) -> list[dict]:
        """Start an episode on ``turn``. ``memory``: the earlier turns' SQL as the agent answered them
        (required in predicted mode past the first turn); None uses the gold SQL of earlier turns."""
        memory = self._memory(turn, memory)
        cfg = self.env_cfg
        system = prompts.system_prompt(
            mode=cfg.mode,
            max_messages=cfg.max_messages,
            result_chars=cfg.result_chars,
            thinking=cfg.thinking,
            protocol=cfg.protocol,
        )
        user = prompts.user_prompt(
            schema=render_schema(turn.db_id, self.data_root, cfg.sample_values, turn.dataset),
            question=turn.question,
            history=[(m.question, m.sql) for m in memory],
            show_history_sql=cfg.mode == "short",
            evidence=turn.evidence,
        )
        self._turn, self._pending = turn, None
        self.trajectory = Trajectory(
            uid=turn.uid,
            dataset=turn.dataset,
            db_id=turn.db_id,
            question=turn.question,
            mode=cfg.mode,
            memory_source=cfg.memory,
            max_messages=self.max_messages,
            thinking=cfg.thinking,
            memory=memory,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        )
        return list(self.trajectory.messages)

    def step(self, assistant_text: str) -> tuple[dict | None, bool, dict]:
        """Take one assistant message; return the tool observation (None once the episode ended)."""
        traj = self.trajectory
        if traj is None or traj.done:
            raise RuntimeError("step() needs a running episode: call reset() first")
        started = time.perf_counter()
        text = assistant_text if isinstance(assistant_text, str) else repr(assistant_text)
        action = parse_action(assistant_text, self.env_cfg.protocol)
        step = Step(
            index=len(traj.steps),
            text=text,
            action=action.kind,
            tool=action.tool,
            arguments=action.arguments,
            sql=action.sql,
            exec_verdict=action.exec_verdict,
            memory_verdict=action.memory_verdict,
            has_think=action.think is not None,
            invalid_reason=action.reason,
            ignored_actions=action.ignored,
        )
        traj.messages.append({"role": "assistant", "content": text})
        traj.steps.append(step)
        observation = None
        if self.env_cfg.mode == "short":
            self._short(step, action)
        else:
            observation = self._long(step, action)
        traj.elapsed_s += time.perf_counter() - started
        if observation is not None:
            observation = prompts.cap_observation(observation, self.env_cfg.observation_chars)
            step.observation = observation
            traj.messages.append({"role": "tool", "content": observation})
        info = {
            "action": step.action,
            "tool": step.tool,
            "invalid_reason": step.invalid_reason,
            "flow_errors": list(step.flow_errors),
            "remaining_messages": self.max_messages - len(traj.steps),
            "finish_reason": traj.finish_reason,
        }
        return (None if observation is None else {"role": "tool", "content": observation}), traj.done, info

    # -----------------------------------------------------------------------------------------

    def _memory(self, turn: Turn, memory: list[MemoryEntry] | None) -> list[MemoryEntry]:
        if memory is None:
            if self.env_cfg.memory == "predicted" and turn.previous_questions:
                raise ValueError(
                    f"{turn.uid}: predicted memory needs the agent's answers to the "
                    f"{len(turn.previous_questions)} earlier turns"
                )
            return [
                MemoryEntry(q, s) for q, s in zip(turn.previous_questions, turn.previous_sql, strict=True)
            ]
        if len(memory) != len(turn.previous_questions):
            raise ValueError(
                f"{turn.uid}: memory has {len(memory)} entries for "
                f"{len(turn.previous_questions)} earlier turns"
            )
        return list(memory)

    def _short(self, step: Step, action: Action) -> None:
        """The one message of the short mode: an answer, or the end of the episode without one."""
        if action.kind == "tool_call":
            step.action, step.invalid_reason = "invalid", "no tools in this mode: answer in <answer_sql>"
        if step.action == "answer":
            if self.env_cfg.thinking and action.think is None:
                step.flow_errors.append("missing <think> reasoning")
            self._end_episode("answer", action.sql)
        else:
            self._end_episode("invalid", None)

    def _long(self, step: Step, action: Action) -> str | None:
        if action.valid:
            self._check_flow(step, action)
            if action.kind == "answer":
                self._end_episode("answer", action.sql)
                return None
        if len(self.trajectory.steps) >= self.max_messages:
            self._end_episode("max_messages", None)
            return None
        if not action.valid and self._invalid_in_a_row() == self.env_cfg.max_invalid:
            self._end_episode("invalid", None)
            return None
        if action.valid:
            observation = self._run_tool(step, action)
            if action.tool == "exec_sql" or self.trajectory.memory:  # an empty memory needs no verdict
                self._pending = step.index
        else:
            observation = prompts.protocol_error(action.reason, thinking=self.env_cfg.thinking)
        if len(self.trajectory.steps) == self.max_messages - 1:
            observation = prompts.with_last_message_warning(observation)
        return observation

    def _invalid_in_a_row(self) -> int:
        count = 0
        for step in reversed(self.trajectory.steps):
            if step.action != "invalid":
                break
            count += 1
        return count

    def _check_flow(self, step: Step, action: Action) -> None:
        traj, errors = self.trajectory, step.flow_errors
        if self.env_cfg.thinking and action.think is None:
            errors.append("missing <think> reasoning")
        expected = None
        if self._pending is not None:
            pending = traj.steps[self._pending]
            expected = VERDICT_TAG[pending.tool]
            pending.verdict = action.exec_verdict if pending.tool == "exec_sql" else action.memory_verdict
            if pending.verdict is None:
                errors.append(f"no <{expected}> verdict on the {pending.tool} result")
            self._pending = None
        for tag, value in ((EXEC_VERIFY, action.exec_verdict), (MEMORY_VERIFY, action.memory_verdict)):
            if value is not None and tag != expected:
                errors.append(f"<{tag}> without a fresh tool result to judge")
        if action.kind == "answer":
            if not traj.tool_steps("exec_sql"):
                errors.append("answered without running a query")
            if self._turn.previous_questions and not traj.tool_steps("memory_retrieve"):
                errors.append("answered without checking the dialogue memory")
            if "no_pass" in (action.exec_verdict, action.memory_verdict):
                errors.append("answered right after a no_pass verdict without running the corrected query")

    def _run_tool(self, step: Step, action: Action) -> str:
        started = time.perf_counter()
        turn, cfg = self._turn, self.env_cfg
        db_path = database_path(turn.db_id, self.data_root)
        release = cfg.protocol == "release"
        common = {
            "db_path": db_path,
            "question": prompts.with_evidence(turn.question, turn.evidence),
            "sql_cfg": self.sql_cfg,
            "result_chars": cfg.result_chars,
        }
        if action.tool == "exec_sql":
            run_exec = tools.release_exec_sql if release else tools.exec_sql
            run, observation = run_exec(
                sql=action.sql, has_history=bool(turn.previous_questions), error_hint=cfg.error_hint, **common
            )
            step.result_kind, step.error_class, step.row_count = run.kind, run.error_class, run.row_count
        elif release:
            step.checked_sql = action.sql
            observation = tools.release_memory_retrieve(
                memory=self.trajectory.memory, candidate=action.sql, **common
            )
        else:
            executed = self.trajectory.tool_steps("exec_sql")
            step.checked_sql = executed[-1].sql if executed else None
            observation = tools.memory_retrieve(
                memory=self.trajectory.memory, candidate=step.checked_sql, **common
            )
        step.tool_s = time.perf_counter() - started
        return observation

    def _end_episode(self, reason: str, final_sql: str | None) -> None:
        traj = self.trajectory
        traj.finish_reason, traj.final_sql = reason, final_sql
        traj.protocol_valid = reason == "answer" and all(
            s.action != "invalid" and not s.flow_errors for s in traj.steps
        )
