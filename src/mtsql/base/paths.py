"""Where things live: the data folder (MTSQL_DATA), BIRD's folder (MTSQL_BIRD, else ``<data>/bird``) and
the cache/model home (MTSQL_HOME).

These environment variables are read here and nowhere else.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.files import check_folder

FIXTURE_DATA = Path(__file__).parent.parent / "fixtures" / "data"


def data_dir(override: str | Path | None = None) -> Path:
    """The data folder: ``override`` (a config's ``data.root``), else $MTSQL_DATA, else the fixture subset."""
    value = override or os.environ.get("MTSQL_DATA")
    return Path(value).expanduser().resolve() if value else FIXTURE_DATA


def home_dir() -> Path:
    """Caches and converted models: $MTSQL_HOME, else ~/.cache/mtsql (it need not exist yet); a file on
    its path is a one-line ``UsageError``."""
    value = os.environ.get("MTSQL_HOME")
    root = Path(value).expanduser() if value else Path.home() / ".cache" / "mtsql"
    setting = "MTSQL_HOME" if value else "MTSQL_HOME (unset: the default ~/.cache/mtsql)"
    return check_folder(root, setting, "set MTSQL_HOME to a folder for mtsql's caches and models").resolve()


def bird_dir(root: Path | None = None) -> Path:
    """BIRD's folder, holding ``dev/`` and ``train/`` as BIRD distributes them: $MTSQL_BIRD, else
    ``<data folder>/bird``."""
    value = os.environ.get("MTSQL_BIRD")
    return Path(value).expanduser().resolve() if value else (root or data_dir()) / "bird"


def bird_databases(split: str, root: Path | None = None) -> Path:
    """The databases folder of a BIRD split: ``<bird>/<split>/<split>_databases``."""
    return bird_dir(root) / split / f"{split}_databases"


def database_path(db_id: str, root: Path | None = None) -> Path:
    """The SQLite file of a database (it may not exist: check before executing): Spider's layout
    (``<data>/database/<db_id>/<db_id>.sqlite``), else a BIRD split's databases folder that has it."""
    root = root or data_dir()
    path = root / "database" / db_id / f"{db_id}.sqlite"
    if not path.is_file():
        for split in ("dev", "train"):
            bird = bird_databases(split, root) / db_id / f"{db_id}.sqlite"
            if bird.is_file():
                return bird
    return path


RESERVED_LABELS = (
    "report",
    "latest",
    "trackers",
)  # folders of a run (or of a label) that are not artifacts, in any case
STORE_SUFFIXES = (".partial", ".lock", ".old")  # what the store adds to an artifact folder's name


def folder_name(value: str, what: str) -> str:
    """``value``, a run name or artifact label that becomes one folder, or a UsageError saying why not.
    Read as the file name it makes: under an ASCII locale (LC_ALL=C) ``café`` makes none, and a name
    typed there arrives as its UTF-8 bytes (``os.fsencode`` gives them back)."""
    try:
        spelled = os.fsencode(value).decode("utf-8")
    except UnicodeError:
        raise UsageError(
            f"{what} {value!r} cannot be a file name in this locale ({sys.getfilesystemencoding()}): "
            "use ASCII letters, or a UTF-8 locale (LC_ALL=C.UTF-8)"
        ) from None
    if not re.fullmatch(r"[\w.-]+", spelled) or value in (".", ".."):
        raise UsageError(f"{what} {value!r} names a folder: use letters, digits, '.', '-' and '_' only")
    return value


def label_name(value: str, what: str = "label") -> str:
    """``value``, an artifact label (one folder of a run, never a path), or a UsageError saying why not:
    a reserved name in any case (``report``: the report folder a run holds; on a case-insensitive disk
    ``REPORT`` is that folder), one that starts with a dot, or one that ends as the store's own folders
    and files do (``<fp12>.partial``, ``.lock``, ``.old``)."""
    folder_name(value, what)
    if value.lower() in RESERVED_LABELS or value.startswith(".") or value.lower().endswith(STORE_SUFFIXES):
        raise UsageError(
            f"{what} {value!r} is reserved for a run's own folders ({', '.join(RESERVED_LABELS)} in any "
            f"case, names starting with '.' or ending in {', '.join(STORE_SUFFIXES)}): choose another label"
        )
    return value


def user_path(value: str | Path) -> Path:
    """A path a user gave in a setting: ``~`` expanded, as a shell would."""
    return Path(value).expanduser()
