"""Where things live: the data folder (MTSQL_DATA) and the cache/model home (MTSQL_HOME).

These two environment variables are read here and nowhere else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mtsql.base.errors import UsageError

FIXTURE_DATA = Path(__file__).parent.parent / "fixtures" / "data"


def data_dir(override: str | Path | None = None) -> Path:
    """The data folder: ``override`` (a config's ``data.root``), else $MTSQL_DATA, else the fixture subset."""
    value = override or os.environ.get("MTSQL_DATA")
    return Path(value).expanduser().resolve() if value else FIXTURE_DATA


def home_dir() -> Path:
    """Caches and converted models: $MTSQL_HOME, else ~/.cache/mtsql."""
    value = os.environ.get("MTSQL_HOME")
    root = Path(value).expanduser() if value else Path.home() / ".cache" / "mtsql"
    return root.resolve()


def database_path(db_id: str, root: Path | None = None) -> Path:
    """The SQLite file of a Spider database (it may not exist: check before executing)."""
    root = root or data_dir()
    return root / "database" / db_id / f"{db_id}.sqlite"


RESERVED_LABELS = ("report", "latest", "trackers")  # folders of a run (or of a label) that are not artifacts


def folder_name(value: str, what: str) -> str:
    """``value``, a run name or artifact label that becomes one folder, or a UsageError saying why not."""
    if not re.fullmatch(r"[\w.-]+", value) or value in (".", ".."):
        raise UsageError(f"{what} {value!r} names a folder: use letters, digits, '.', '-' and '_' only")
    return value


def label_name(value: str, what: str = "label") -> str:
    """``value``, an artifact label (one folder of a run, never a path), or a UsageError saying why not:
    a reserved name (``report``: the report folder a run holds) or one that starts with a dot."""
    folder_name(value, what)
    if value in RESERVED_LABELS or value.startswith("."):
        raise UsageError(f"{what} {value!r} is reserved for a run's own folders ({', '.join(RESERVED_LABELS)}, "
                         "names starting with '.'): choose another label")
    return value


def user_path(value: str | Path) -> Path:
    """A path a user gave in a setting: ``~`` expanded, as a shell would."""
    return Path(value).expanduser()
