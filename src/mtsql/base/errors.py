"""Errors the CLI turns into one clear line and an exit code: 1 when a stage or engine failed, 2 for a
bad command line, config or input file."""

from __future__ import annotations


class MtsqlError(Exception):
    """A known failure: printed as one line (what, where, how to fix), no traceback."""

    exit_code = 1


class UsageError(MtsqlError):
    """Bad command line, config or input file: exit 2."""

    exit_code = 2


class StageFailed(MtsqlError):
    """A stage or an external engine failed: exit 1."""

    exit_code = 1
