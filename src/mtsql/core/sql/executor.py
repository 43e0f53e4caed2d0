"""The SQL sandbox: run one query on a SQLite database without being able to change it.

Each thread keeps a connection per database file (``file:...?mode=ro``, ``PRAGMA query_only``), with an
authorizer that allows only reading (SELECT, reading columns, functions other than
``load_extension``, recursive CTEs and a few schema-reading pragmas): DDL, DML, ATTACH (hence
``VACUUM INTO``), transactions and pragma writes are refused before they run. The time budget is
enforced inside SQLite by a progress handler that interrupts the statement, so a runaway query
(cross joins, recursive CTEs) stops within the budget; fetching rows is bounded by ``max_rows`` and
by a total size budget. ``execute`` never raises: failures come back classified, with
SQLite's own message.
"""

from __future__ import annotations

import marshal
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

ERROR_CLASSES = (
    "syntax",
    "no_such_table",
    "no_such_column",
    "ambiguous_column",
    "timeout",
    "too_many_rows",
    "write_refused",
    "no_database",
    "other",
)

MAX_SQL_CHARS = 1_000_000  # SQLite refuses longer statements (SQLITE_LIMIT_SQL_LENGTH)
MAX_VALUE_BYTES = 5_000_000  # largest string or blob a query may build (SQLITE_LIMIT_LENGTH)
MAX_RESULT_BYTES = 50_000_000  # total size of a fetched result (marshal bytes)
_PROGRESS_STEPS = 1_000_000  # SQLite VM instructions between two deadline checks (~20 ms; each takes the GIL)
_FETCH_CHUNK = 64
_OPEN_PER_THREAD = 16  # database files a thread keeps a connection open to

_READ_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
# SQLite's messages for a failure of the machine rather than of the query (a lock, I/O, memory, files)
_MACHINE_FAILURES = (
    "database is locked",
    "database table is locked",
    "disk i/o error",
    "out of memory",
    "unable to open database file",
    "interrupted",
)


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one query: typed rows, or a classified error with SQLite's message."""

    ok: bool
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    error_class: str | None
    error_message: str | None
    truncated: bool
    elapsed_s: float

    @property
    def transient(self) -> bool:
        """Whether the failure says more about the machine than the query (a timeout, a lock, I/O,
        memory, a missing file): running it again may succeed, so no cache keeps it."""
        if self.ok:
            return False
        message = (self.error_message or "").lower()
        return self.error_class in ("timeout", "no_database") or any(
            text in message for text in _MACHINE_FAILURES
        )

    def preview(self, max_chars: int = 200) -> str:
        """A short rendering: the error, or a header line and rows ("a | b"), cut to ``max_chars``."""
        if not self.ok:
            text = f"ERROR ({self.error_class}): {self.error_message}"
        else:
            lines = [" | ".join(self.columns)] + [" | ".join(_render(v) for v in row) for row in self.rows]
            more = "+" if self.truncated else ""
            lines.append(f"({len(self.rows)}{more} row{'s' if len(self.rows) != 1 else ''})")
            text = "\n".join(lines)
        if len(text) <= max_chars:
            return text
        return text[: max(0, max_chars - 1)] + "…"


def _render(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)


def result_kind(result: ExecResult) -> str:
    """``error`` (did not run), ``empty`` (no rows, or only NULLs) or ``ok``: what the agent's
    observations, the exec-verify reward and the vacuous-gold check call a result."""
    if not result.ok:
        return "error"
    if all(value is None for row in result.rows for value in row):
        return "empty"
    return "ok"


def _failure(
    error_class: str, message: str, started: float, rows: tuple = (), columns: tuple = ()
) -> ExecResult:
    return ExecResult(False, columns, rows, error_class, message, bool(rows), time.perf_counter() - started)


def execute(
    db_path, sql: str, *, timeout_s: float = 5.0, max_rows: int = 10_000, lossy_text: bool = True
) -> ExecResult:
    """Run ``sql`` read-only on the SQLite file ``db_path``; never raises, never modifies the file.

    More than ``max_rows`` rows (or more than ``MAX_RESULT_BYTES`` bytes) is a ``too_many_rows``
    failure that keeps the first rows (``truncated``); running past ``timeout_s`` is ``timeout``.
    Text that is not UTF-8 is decoded dropping the bad bytes, or with ``lossy_text=False`` fails as
    Python's ``sqlite3`` fails on it (what BIRD's evaluator sees).
    """
    started = time.perf_counter()
    if not isinstance(sql, str):
        sql = (
            bytes(sql).decode("utf-8", errors="replace") if isinstance(sql, (bytes, bytearray)) else str(sql)
        )
    if db_path is None or not os.path.isfile(db_path):
        return _failure("no_database", f"no database file at {db_path}", started)
    if len(sql) > MAX_SQL_CHARS:
        return _failure("other", f"query longer than {MAX_SQL_CHARS} characters", started)
    try:
        conn = _connection(os.fspath(db_path))
    except (sqlite3.Error, OSError) as exc:
        return _failure("no_database", f"cannot open {db_path}: {exc}", started)
    deadline = started + timeout_s
    conn.set_progress_handler(lambda: int(time.perf_counter() > deadline), _PROGRESS_STEPS)
    try:
        return _run(conn, sql, started, deadline, max_rows, lossy_text)
    finally:
        conn.set_progress_handler(None, 0)
        conn.text_factory = str


def _connection(path: str) -> sqlite3.Connection:
    """This thread's open connection to the file at ``path``, kept between calls (opening one and
    reading its schema costs more than most queries); a replaced or changed file gets a new one, and
    past ``_OPEN_PER_THREAD`` files the least recently used connection is closed."""
    stat = os.stat(path)
    key = (path, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    pool = _open.__dict__.setdefault("pool", OrderedDict())
    conn = pool.pop(key, None)
    if conn is None:
        for stale in [k for k in pool if k[0] == path]:  # the file was replaced or changed
            pool.pop(stale).close()
        conn = _connect(path)
    pool[key] = conn
    while len(pool) > _OPEN_PER_THREAD:
        pool.popitem(last=False)[1].close()
    return conn


def _forget_inherited_connections() -> None:
    """In a forked child: never use (nor close) the parent's connections, which SQLite forbids."""
    _inherited.append(_open.__dict__.pop("pool", None))


_open = threading.local()
_inherited: list = []
os.register_at_fork(after_in_child=_forget_inherited_connections)


def _connect(path: str) -> sqlite3.Connection:
    uri = f"file:{quote(os.path.realpath(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA query_only = 1")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.set_authorizer(_authorize)
    return conn


def _authorize(action: int, arg1, arg2, _db, _trigger) -> int:
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _run(
    conn: sqlite3.Connection, sql: str, started: float, deadline: float, max_rows: int, lossy_text: bool
) -> ExecResult:
    try:
        return _fetch(conn, sql, started, deadline, max_rows)
    except sqlite3.OperationalError as exc:
        if "could not decode" not in str(exc).lower():
            raise
        if not lossy_text:
            return _failure("other", str(exc), started)
    conn.text_factory = _decode_lossy  # rare: text that is not UTF-8; decode it dropping bad bytes
    return _fetch(conn, sql, started, deadline, max_rows)


def _decode_lossy(data: bytes) -> str:
    return data.decode("utf-8", errors="ignore")


def _fetch(conn: sqlite3.Connection, sql: str, started: float, deadline: float, max_rows: int) -> ExecResult:
    rows: list[tuple] = []
    columns: tuple[str, ...] = ()
    cursor = None
    try:
        cursor = conn.execute(sql)
        columns = tuple(d[0] for d in cursor.description or ())
        size = 0
        while chunk := cursor.fetchmany(_FETCH_CHUNK):
            size += len(marshal.dumps(chunk))  # bytes held, measured in C
            rows.extend(chunk)
            if len(rows) > max_rows:
                return _failure(
                    "too_many_rows", f"more than {max_rows} rows", started, tuple(rows[:max_rows]), columns
                )
            if size > MAX_RESULT_BYTES:
                return _failure(
                    "too_many_rows",
                    f"result larger than {MAX_RESULT_BYTES} bytes",
                    started,
                    tuple(rows),
                    columns,
                )
            if time.perf_counter() > deadline:
                return _failure("timeout", "interrupted: time budget exceeded", started, tuple(rows), columns)
    except sqlite3.OperationalError as exc:
        if "could not decode" in str(exc).lower() and conn.text_factory is str:
            raise
        return _error(exc, started, deadline)
    except sqlite3.Error as exc:
        return _error(exc, started, deadline)
    except (ValueError, UnicodeError, OverflowError, MemoryError) as exc:
        error_class = (
            "syntax" if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError) else "other"
        )
        return _failure(error_class, f"{type(exc).__name__}: {exc}", started)
    finally:
        if cursor is not None:
            cursor.close()  # ends the statement (and its read transaction) on the kept connection
    return ExecResult(True, columns, tuple(rows), None, None, False, time.perf_counter() - started)


def _error(exc: sqlite3.Error, started: float, deadline: float) -> ExecResult:
    message = str(exc)
    if message == "interrupted" and time.perf_counter() >= deadline:
        return _failure("timeout", "interrupted: time budget exceeded", started)
    return _failure(classify_error(message), message, started)


def classify_error(message: str) -> str:
    """Error class of a SQLite error message."""
    text = message.lower()
    if any(
        word in text for word in ("not authorized", "authorization denied", "readonly database", "read-only")
    ):
        return "write_refused"
    if text.startswith("no such table"):
        return "no_such_table"
    if text.startswith("no such column"):
        return "no_such_column"
    if text.startswith("ambiguous column"):
        return "ambiguous_column"
    if (
        "syntax error" in text
        or "incomplete input" in text
        or "unrecognized token" in text
        or "one statement at a time" in text
        or "null character" in text
    ):
        return "syntax"
    return "other"


class ResultMemo:
    """Values computed from queries whose results never change (gold queries), by key, the least recently
    used dropped past ``most``. A transient ``ExecResult`` (a timeout, a lock, I/O, memory, a missing
    file: the machine, not the query) is returned but never kept, so the next call runs again."""

    def __init__(self, most: int):
        self._values: OrderedDict[tuple, object] = OrderedDict()
        self._most = most

    def get(self, key: tuple, compute: Callable[[], object]) -> object:
        """The value kept under ``key``, else ``compute()`` (an exception propagates, nothing is kept)."""
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key]
        value = compute()
        if not (isinstance(value, ExecResult) and value.transient):
            self._values[key] = value
            if len(self._values) > self._most:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        self._values.clear()


_CACHED = ResultMemo(16_384)


def execute_cached(db_path, sql, *, timeout_s=5.0, max_rows=10_000) -> ExecResult:
    """``execute`` memoised per (database, query, limits) in a ``ResultMemo``: for gold queries."""
    key = (str(db_path), sql, float(timeout_s), int(max_rows))
    return _CACHED.get(key, lambda: execute(key[0], sql, timeout_s=timeout_s, max_rows=max_rows))


def forget_cached() -> None:
    """Forget what :func:`execute_cached` kept."""
    _CACHED.clear()
