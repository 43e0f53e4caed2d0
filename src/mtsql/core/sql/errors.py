"""Errors of the SQL layer (internal: the evaluator turns them into a 0 or a null with a message)."""

from __future__ import annotations


class SqlParseError(ValueError):
    """The Spider-SQL parser rejects a query (where the official parser raises, whatever the reason)."""


class OfficialCrash(RuntimeError):
    """A case where an official evaluator program would crash, so the item gets no score (null)."""
