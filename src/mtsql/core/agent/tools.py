"""The two tools: ``exec_sql`` (the read-only sandbox) and ``memory_retrieve`` (the dialogue memory).

``tool_schemas(protocol)`` (OpenAI function JSON) is what the chat template, the SFT export and the RL
tool configuration all show the model; ``protocol.PROTOCOL_ARGUMENTS`` checks calls against the same
shape. ``TOOL_SCHEMAS`` are mtsql's (``exec_sql(sql)``, ``memory_retrieve()``), ``RELEASE_TOOL_SCHEMAS``
the released MTSQL-R1 checkpoints' (both take ``code``, the query to run or to check).

The release protocol's observations (``release_exec_sql``, ``release_memory_retrieve``) follow the
release's shape: results as a Python list of row tuples behind a short prefix, cut to
``result_chars`` characters prefix included; each earlier turn with its SQL, its Spider parse and its
first ``RELEASE_MEMORY_ROWS`` result rows.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mtsql.core.agent import prompts
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.sql.clauses import render_breakdown
from mtsql.core.sql.errors import SqlParseError
from mtsql.core.sql.executor import ExecResult, execute_cached, result_kind
from mtsql.core.sql.parser import parse_sql
from mtsql.core.sql.schema import load_schema

RELEASE_MEMORY_ROWS = 50  # result rows of an earlier turn in the release's memory observation

TOOL_SCHEMAS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": "exec_sql",
            "description": "Run one read-only SQLite query on the conversation's database and return its "
            "result (or the error), followed by what to verify.",
            "parameters": {
                "type": "object",
                "properties": {"sql": {"type": "string", "description": "One SQLite SELECT query."}},
                "required": ["sql"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "memory_retrieve",
            "description": "Show the earlier turns of the conversation (questions, their SQL clause by "
            "clause, result previews) to check the latest query against them.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
]


RELEASE_TOOL_SCHEMAS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": "exec_sql",
            "description": "Execute an SQL query on the conversation's database and return its results.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The SQL query to execute."}},
                "required": ["code"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "memory_retrieve",
            "description": "Retrieve the earlier questions of the dialogue with their SQL, to check a query "
            "for coherence with them.",
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "description": "The SQL query to check against the dialogue memory.",
                    }
                },
                "required": ["code"],
            },
        },
    },
]


def tool_schemas(protocol: str) -> list[dict]:
    """The tool schemas the model is shown under ``protocol`` (mtsql | release)."""
    return RELEASE_TOOL_SCHEMAS if protocol == "release" else TOOL_SCHEMAS


def env_tools(env_cfg: EnvConfig) -> list[dict]:
    """The tool schemas an environment shows the model: its protocol's in long mode, none in short."""
    return tool_schemas(env_cfg.protocol) if env_cfg.mode == "long" else []


@dataclass(frozen=True)
class SqlRun:
    """One query through the sandbox, as the environment and the rewards see it.

    ``kind``: ``error`` (the sandbox's ``error_class`` says which), ``empty`` (no rows, or only NULL
    values) or ``ok``. ``text`` is the rendered result, at most ``result_chars`` characters.
    """

    kind: str
    error_class: str | None
    row_count: int | None
    text: str
    elapsed_s: float


@dataclass(frozen=True)
class MemoryEntry:
    """One earlier turn of the dialogue: its question and the SQL remembered for it (None: no answer)."""

    question: str
    sql: str | None

    def to_dict(self) -> dict:
        return {"question": self.question, "sql": self.sql}

    @classmethod
    def from_dict(cls, row: dict) -> MemoryEntry:
        return cls(question=row["question"], sql=row.get("sql"))


def run_sql(db_path: Path, sql: str, sql_cfg: SqlConfig, result_chars: int) -> SqlRun:
    """Execute ``sql`` read-only (cached, with the configured timeout and row cap) and classify it."""
    result = execute_cached(db_path, sql, timeout_s=sql_cfg.timeout_s, max_rows=sql_cfg.max_rows)
    return SqlRun(
        kind=result_kind(result),
        error_class=None if result.ok else result.error_class,
        row_count=len(result.rows) if result.ok else None,
        text=render_result(result, result_chars),
        elapsed_s=result.elapsed_s,
    )


def render_result(result: ExecResult, max_chars: int) -> str:
    """The sandbox's rendering (header and rows, or the classified error), cut to ``max_chars``."""
    return result.preview(max_chars=max_chars)


def exec_sql(
    *,
    db_path: Path,
    sql: str,
    question: str,
    has_history: bool,
    sql_cfg: SqlConfig,
    result_chars: int,
    error_hint: bool = False,
) -> tuple[SqlRun, str]:
    """Run the query; the observation recaps the question, the SQL and the result, then asks to verify.
    ``error_hint``: after a missing table or column, the result names the ones that exist (``schema_hint``),
    and after any error the observation names a corrected query as the next step, no other tool."""
    run = run_sql(db_path, sql, sql_cfg, result_chars)
    result = _with_hint(run, db_path, sql) if error_hint else run.text
    return run, prompts.exec_observation(
        question=question,
        sql=sql,
        result=result,
        has_history=has_history,
        refused=error_hint and run.kind == "error",
    )


def schema_hint(db_path: Path, sql: str, error_class: str | None, missing: str | None = None) -> str | None:
    """What a good database client adds to a missing-name error: the tables of the database (no such
    table), or the columns of the tables the query names (no such column; every table's when it names
    none), spelled as the schema spells them; then, when one of them is close to the ``missing`` name
    (``closest_name``), "Did you mean ...?" and the query with that name (``with_name_replaced``). None for
    other errors."""
    if error_class not in ("no_such_table", "no_such_column") or not Path(db_path).is_file():
        return None
    tables = load_schema(db_path).spelled  # refuses an unreadable file with a one-line UsageError
    if error_class == "no_such_table":
        hint, names = f"the tables of this database are {', '.join(tables)}.", list(tables)
    else:
        named = set(re.findall(r"\w+", sql.lower()))
        shown = {t: c for t, c in tables.items() if t.lower() in named} or tables
        hint = "the columns are " + "; ".join(f"{t}({', '.join(c)})" for t, c in shown.items()) + "."
        names = [c for columns in shown.values() for c in columns]
    guess = closest_name(missing, names, tables) if missing else None
    if not guess:
        return prompts.HINT_PREFIX + hint
    fixed = with_name_replaced(sql, missing, guess)
    return (
        prompts.HINT_PREFIX
        + hint
        + f" Did you mean {guess}?"
        + (f"\n{prompts.SUGGESTION_PREFIX}{fixed}" if fixed != sql else "")
    )


_QUOTED = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*")""")


def with_name_replaced(sql: str, missing: str, guess: str) -> str:
    """``sql`` with the ``missing`` name spelled ``guess`` (``T1.Names``: that qualified name; ``Names``: also
    as ``T1.Names``), outside quoted strings: the query a client's "Did you mean" stands for."""
    qualifier, _, name = missing.rpartition(".")
    before = rf"(?<![\w.]){re.escape(qualifier)}\." if qualifier else r"(?<!\w)"  # unqualified: T1.x too
    pattern = re.compile(rf"{before}{re.escape(name)}(?!\w)", re.IGNORECASE)
    replacement = f"{qualifier}.{guess}" if qualifier else guess
    parts = _QUOTED.split(sql)
    return "".join(
        part if index % 2 else pattern.sub(lambda _: replacement, part) for index, part in enumerate(parts)
    )


def closest_name(missing: str, names: Sequence[str], tables: Sequence[str] = ()) -> str | None:
    """The existing name ``missing`` was most likely meant to be: the same letters once case, underscores
    and a table-name prefix are set aside (``singer_name`` -> ``Name`` in singer, ``pet_type`` ->
    ``PetType``), else the closest by ``difflib`` (``singers`` -> ``singer``), else None."""

    def squash(name: str) -> str:
        return re.sub(r"[^a-z0-9]", "", name.lower())

    wanted = squash(missing.rsplit(".", 1)[-1])
    by_squash = {squash(n): n for n in names}
    stems = [wanted] + [
        wanted[len(p) :]
        for t in tables
        for p in {squash(t), squash(t).removesuffix("s")}
        if p and wanted.startswith(p) and len(wanted) > len(p)
    ]
    for stem in stems:
        if stem in by_squash:
            return by_squash[stem]
    close = difflib.get_close_matches(wanted, list(by_squash), n=1, cutoff=0.8)
    return by_squash[close[0]] if close else None


_MISSING = re.compile(r"no such (?:table|column): (\S+)")


def _with_hint(run: SqlRun, db_path: Path, sql: str) -> str:
    missing = _MISSING.search(run.text)
    hint = (
        schema_hint(db_path, sql, run.error_class, missing and missing.group(1))
        if run.kind == "error"
        else None
    )
    return f"{run.text}\n{hint}" if hint else run.text


def memory_retrieve(
    *,
    db_path: Path,
    memory: Sequence[MemoryEntry],
    question: str,
    candidate: str | None,
    sql_cfg: SqlConfig,
    result_chars: int,
) -> str:
    """The dialogue memory with a clause breakdown and result preview per turn, then the checklist."""
    turns = []
    for entry in memory:
        if entry.sql:
            result = run_sql(db_path, entry.sql, sql_cfg, result_chars).text
            turns.append((entry.question, entry.sql, render_breakdown(entry.sql), result))
        else:
            turns.append((entry.question, None, "", ""))
    return prompts.memory_observation(
        turns=turns,
        question=question,
        candidate=candidate,
        candidate_clauses=render_breakdown(candidate) if candidate else "",
    )


def release_exec_sql(
    *,
    db_path: Path,
    sql: str,
    question: str,
    has_history: bool,
    sql_cfg: SqlConfig,
    result_chars: int,
    error_hint: bool = False,
) -> tuple[SqlRun, str]:
    """exec_sql under the release protocol: a recap with the result cut to ``result_chars`` (prefix
    included), then the four verification steps; ``error_hint`` as in ``exec_sql``, on the same line."""
    result = execute_cached(db_path, sql, timeout_s=sql_cfg.timeout_s, max_rows=sql_cfg.max_rows)
    text = release_result(result)[:result_chars]
    run = SqlRun(
        kind=result_kind(result),
        error_class=None if result.ok else result.error_class,
        row_count=len(result.rows) if result.ok else None,
        text=text,
        elapsed_s=result.elapsed_s,
    )
    shown = _with_hint(run, db_path, sql).replace("\n", " ") if error_hint else text
    return run, prompts.release_exec_observation(
        question=question, sql=sql, result=shown, has_history=has_history
    )


def release_memory_retrieve(
    *,
    db_path: Path,
    memory: Sequence[MemoryEntry],
    question: str,
    candidate: str,
    sql_cfg: SqlConfig,
    result_chars: int,
) -> str:
    """memory_retrieve under the release protocol: the call's own query run (cut as in exec_sql), then
    each earlier turn with its SQL, its Spider parse and its first ``RELEASE_MEMORY_ROWS`` rows."""
    own = execute_cached(db_path, candidate, timeout_s=sql_cfg.timeout_s, max_rows=sql_cfg.max_rows)
    turns = []
    for entry in memory:
        if entry.sql:
            result = execute_cached(
                db_path, entry.sql, timeout_s=sql_cfg.timeout_s, max_rows=sql_cfg.max_rows
            )
            rows = repr(list(result.rows[:RELEASE_MEMORY_ROWS])) if result.ok else release_result(result)
            turns.append((entry.question, entry.sql, _spider_parse(db_path, entry.sql), rows))
        else:
            turns.append((entry.question, None, "", ""))
    return prompts.release_memory_observation(
        question=question, candidate=candidate, result=release_result(own)[:result_chars], turns=turns
    )


def release_result(result: ExecResult) -> str:
    """A result as the release shows it: the rows as a Python list of tuples, or the error, behind a
    prefix."""
    if not result.ok:
        return f"Error: {result.error_message}"
    return f"Rows: {list(result.rows)!r}"


def _spider_parse(db_path: Path, sql: str) -> str:
    """The Spider parse of ``sql`` (the dict the official evaluators compare), or why there is none."""
    if not Path(db_path).is_file():
        return "(no database to parse against)"
    try:
        return repr(parse_sql(sql, load_schema(db_path)))
    except SqlParseError:
        return "(the query does not parse)"
