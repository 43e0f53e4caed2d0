"""Where a report goes, and how it replaces the one before without deleting anything it did not write.

A report folder holds ``report.md``, ``plots/*.png`` and ``.mtsql-report.json``, the list of the files
the report wrote with their sha256 (``MARK``). A report is built in a temporary folder of its own
(``.<name>.<pid>.<random>.tmp``, beside the destination) and swapped in under a lock on the parent folder:
the folder before is moved aside, the new one renamed into place, and of the old one only the files
its list names, unchanged, are deleted. A destination is refused in one line when it is a symlink or a
file, is or lies in a run (other than the reported run's own ``report/``), lies under ``runs_dir``,
holds the working folder, or holds anything that report did not write (a file of another name, one
edited since, a link). A run's ``report/`` written before the list existed (``report.md`` and
``plots/*.png`` only) is replaced too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from mtsql.base.artifacts import sha256_file
from mtsql.base.errors import UsageError
from mtsql.base.run_folders import REPORT_DIR, run_holding

log = logging.getLogger(__name__)

MARK = (
    ".mtsql-report.json"  # in a report folder: {"files": {path: sha256}, "folders": [path]} the report wrote
)
REPORT_MD = "report.md"
PLOTS = "plots"


def destination(run: Path, out: Path | None, runs_dir: Path | None = None) -> tuple[Path, bool]:
    """The folder the report of ``run`` may be written to (absolute, its parent resolved): ``out``, else
    ``<run>/report``; a UsageError in one line for any other kind of place. With it, whether it is the
    run's own report folder (``building``'s ``legacy``)."""
    own = Path(run).resolve() / REPORT_DIR
    given = f"--out {out}" if out is not None else f"the run's report folder {own}"
    if out is None:
        target = own
    else:
        absolute = Path(os.path.abspath(Path(out).expanduser()))
        if absolute.is_symlink():
            raise UsageError(
                f"{given} is a symlink (to {absolute.resolve()}); the report replaces a folder whole and "
                "never writes through a link: give --out a folder"
            )
        target = absolute.parent.resolve() / absolute.name if absolute.name else absolute
    if out is None and target.is_symlink():
        raise UsageError(
            f"{given} is a symlink (to {target.resolve()}); the store never makes one: delete the "
            "link and report again, or give --out a folder"
        )
    if target.exists() and not target.is_dir():
        raise UsageError(f"{given} is a file, not a folder: give --out a folder")
    existing = next((folder for folder in target.parents if folder.exists()), None)  # None: target is /
    if existing is not None and not existing.is_dir():
        raise UsageError(f"{given}: {existing} is a file, not a folder: give --out a folder")
    cwd = Path.cwd().resolve()
    if not target.name or target == cwd or target in cwd.parents:
        raise UsageError(
            f"{given} holds the working folder; the report replaces its folder whole: give --out a "
            "folder of its own"
        )
    if target != own:
        holder = run_holding(target)
        if holder is not None:
            where = "is the run folder" if holder == target else f"is inside the run folder {holder}"
            raise UsageError(
                f"{given} {where}; a run's folders are written by its stages only: give --out a "
                "folder outside any run"
            )
        root = Path(runs_dir).expanduser().resolve() if runs_dir is not None else None
        if root is not None and target.is_relative_to(root):
            raise UsageError(
                f"{given} is under runs_dir ({root}), where every folder is a run: give --out a folder "
                "outside it"
            )
    foreign = not_written(target, legacy=target == own)
    if foreign is not None:
        raise UsageError(
            f"{given} holds {foreign}; the report deletes only what it wrote: move that away or give "
            "--out a new folder"
        )
    return target, target == own


def _written(folder: Path, legacy: bool) -> tuple[dict[str, str | None], set[str]]:
    """What a report wrote into ``folder``: its files (relative path -> sha256; None: any content, for a
    run's report folder from before the list) and its folders; nothing when it holds no report's list."""
    mark = folder / MARK
    if mark.is_file() and not mark.is_symlink():
        try:
            listed = json.loads(mark.read_text(encoding="utf-8"))
            files, folders = dict(listed["files"]), set(listed["folders"])
        except (ValueError, KeyError, TypeError):  # not a list this module wrote
            return {}, set()
        return {MARK: None, **files}, folders
    if legacy:
        return {
            str(path.relative_to(folder)): None
            for path in (folder / REPORT_MD, *folder.glob(f"{PLOTS}/*.png"))
        }, {PLOTS}
    return {}, set()


def not_written(folder: Path, legacy: bool) -> str | None:
    """What in ``folder`` a report did not write, in words (None: nothing, or no such folder)."""
    if not folder.is_dir():
        return None
    files, folders = _written(folder, legacy)
    for path in folder.rglob("*"):  # not sorted: the first foreign entry of a large folder is named at once
        name = str(path.relative_to(folder))
        if path.is_symlink():
            return f"{path} (a link; a report makes none)"
        if path.is_dir() and name in folders:
            continue
        if not path.is_file() or name not in files:  # a folder, a file of another name, a FIFO, a device
            return f"{path} (not written by mtsql report)"
        if files[name] is not None and sha256_file(path) != files[name]:
            return f"{path} (changed since the report wrote it)"
    return None


def write_mark(folder: Path) -> None:
    """List every file and folder under ``folder`` (files with their sha256) in ``MARK``."""
    entries = sorted(folder.rglob("*"))
    files = {str(path.relative_to(folder)): sha256_file(path) for path in entries if path.is_file()}
    folders = [str(path.relative_to(folder)) for path in entries if path.is_dir()]
    (folder / MARK).write_text(
        json.dumps({"files": files, "folders": folders}, indent=1) + "\n", encoding="utf-8"
    )


@contextlib.contextmanager
def building(target: Path, *, legacy: bool) -> Iterator[Path]:
    """A temporary folder of this process beside ``target`` to build the report in; when the block ends
    without an error it replaces ``target`` (see the module), else it is removed. ``legacy``: ``target``
    is the run's own report folder, which a report from before ``MARK`` may hold."""
    made = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep(target)
    tmp = _beside(target, "tmp")
    tmp.mkdir()
    old = None
    try:
        yield tmp
        write_mark(tmp)
        with _locked(target.parent):
            foreign = not_written(target, legacy)
            if foreign is not None:  # written there since the report started
                raise UsageError(
                    f"{target} now holds {foreign}; the report deletes only what it wrote: move that "
                    "away and report again"
                )
            try:
                if target.exists():
                    os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))  # the folder keeps its permissions
                    old = _beside(target, "old")
                    os.rename(target, old)
                try:
                    os.rename(tmp, target)
                except OSError:
                    if old is not None:
                        os.rename(old, target)
                        old = None
                    raise
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.EINVAL, errno.EXDEV):
                    raise
                raise UsageError(
                    f"{target} cannot be replaced ({exc.strerror}; a mount point?): give --out a "
                    "folder of its own"
                ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:  # deepest first; one that is not empty holds what another process wrote
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    if old is not None:
        _remove_written(old, legacy)


_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.(tmp|old)$")  # what _beside names


def _beside(target: Path, kind: str) -> Path:
    """A name beside ``target`` that no other process uses: ``.<name>.<pid>.<random>.<kind>``."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def _sweep(target: Path) -> None:
    """Remove what reports killed outright (kill -9, a power cut) left beside ``target``: the temporary
    folders (``_beside``) of processes that no longer run, of their files a report writes only."""
    for entry in target.parent.iterdir():
        left = _LEFTOVER.match(entry.name)
        if (
            left
            and left["name"] == target.name
            and entry.is_dir()
            and not entry.is_symlink()
            and not _running(int(left["pid"]))
        ):
            _remove_written(entry, legacy=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OverflowError:  # no process can have that number
        return False
    return True


def _remove_written(folder: Path, legacy: bool) -> None:
    """Delete the files of an old report (``folder``, moved aside, or left by a killed report) that its
    list names and that are unchanged, then its emptied folders; anything else stays, named in a
    warning. ``legacy``: without a list, ``report.md`` and ``plots/*.png`` are the report's."""
    files, _ = _written(folder, legacy)
    for path in [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]:  # only what is inside
        name = str(path.relative_to(folder))
        if name in files and (files[name] is None or sha256_file(path) == files[name]):
            path.unlink()
    for path in sorted((p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        with contextlib.suppress(OSError):  # not empty: it holds a file the report did not write
            path.rmdir()
    try:
        folder.rmdir()
    except OSError:
        log.warning("kept %s: it holds files no report wrote", folder)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` itself (no file is made): one report swaps in at a time."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
