"""A run folder known by what it holds, wherever it lies (under ``runs_dir`` or not), and what in it
no stage wrote.

The store's layout (``artifacts``): a run holds label folders; a label folder holds artifact folders
(``<fp12>/`` with ``manifest.json``), a stage at work (``<fp12>.partial/``), its lock
(``<fp12>.lock``), a ``latest`` link, and for a moment ``<fp12>.old/`` and ``.latest.<pid>``; the run
also holds ``report/``. A folder holding one of these marks is part of a run, so that commands that
write outside runs (``evaluate --out``, ``report --out``) can refuse it, and ``data verify`` can name
what else is there.
"""

from __future__ import annotations

import re
from pathlib import Path

from mtsql.base.artifacts import MANIFEST, PARTIAL

REPORT_DIR = "report"  # the run's report folder (``mtsql report``); no label may take this name
_FP12 = r"[0-9a-f]{12}"
_STORE_ENTRY = re.compile(rf"^(latest|\.latest\.\d+|{_FP12}(\.lock|\.old)?|[^.]+\.partial)$")


def _entries(folder: Path) -> list[Path]:
    """The entries of ``folder``; none when it is not a folder or cannot be listed."""
    try:
        return list(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        return []


def is_artifact_folder(folder: Path) -> bool:
    """A complete artifact (it holds a manifest) or a stage at work (``.partial``)."""
    return folder.is_dir() and ((folder / MANIFEST).is_file() or folder.name.endswith(PARTIAL))


def is_label_folder(folder: Path) -> bool:
    """A folder of the store's artifacts of one label: a ``latest`` link, an artifact, a stage's lock."""
    return any(_label_mark(entry) for entry in _entries(folder))


def _label_mark(entry: Path) -> bool:
    if entry.name == "latest":
        return entry.is_symlink()
    if re.fullmatch(rf"{_FP12}\.lock", entry.name):
        return entry.is_file()
    return bool(re.fullmatch(rf"{_FP12}|[^.]+{re.escape(PARTIAL)}", entry.name)) and is_artifact_folder(entry)


def is_run_folder(folder: Path) -> bool:
    """A folder holding at least one label folder."""
    return any(not entry.is_symlink() and is_label_folder(entry) for entry in _entries(folder))


def run_holding(path: Path) -> Path | None:
    """The run folder that ``path`` (resolved) is, or lies in, known by what the folders on its way hold;
    None when it is in no run."""
    where = Path(path).expanduser().resolve()
    for folder in (where, *where.parents):
        if is_artifact_folder(folder):
            return folder.parent.parent
        if is_label_folder(folder):
            return folder.parent
        if is_run_folder(folder):
            return folder
    return None


def strays(run: Path) -> list[str]:
    """One line per entry of ``run`` that no stage wrote: a file or folder beside the label folders and
    ``report/``, and in a label folder anything but the store's entries (an artifact folder without a
    manifest included)."""
    found = []
    for entry in sorted(_entries(run)):
        if entry.name == REPORT_DIR and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.is_symlink() or not is_label_folder(entry):
            found.append(
                f"{entry}: not written by a stage (neither a label folder nor the report); the store never "
                "makes it"
            )
            continue
        for inner in sorted(_entries(entry)):
            if not _STORE_ENTRY.match(inner.name):
                found.append(
                    f"{inner}: not written by a stage (the store writes only artifact folders, their "
                    "locks and `latest` in a label folder)"
                )
            elif (
                re.fullmatch(_FP12, inner.name) and not inner.is_symlink() and not (inner / MANIFEST).exists()
            ):
                found.append(f"{inner}: an artifact folder without {MANIFEST} (not written by a stage)")
    return found
