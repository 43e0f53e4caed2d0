"""Where a result came from: the source code a stage ran, the git state, the package versions.

``code_digest("mtsql.stages.sft")`` hashes the code of that module and of every mtsql module it
imports, directly or through others (read from the files, imports inside functions included), so a
fingerprint changes when code that can change the stage's output changes. The code is hashed as its
syntax tree without docstrings, so comments, docstrings and formatting never rerun a stage.
``data_digest(root)`` identifies a data folder by what it holds, not where it is.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import mtsql
from mtsql.base.files import write_json
from mtsql.base.paths import home_dir

PACKAGE_ROOT = Path(mtsql.__file__).resolve().parent
PACKAGES = ("torch", "transformers", "llamafactory", "verl", "vllm", "sqlparse", "deepspeed")


def module_file(name: str) -> Path | None:
    """The source file of an mtsql module or package (without importing it), or None."""
    parts = name.split(".")
    if parts[0] != "mtsql":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(name: str, path: Path) -> frozenset[str]:
    """mtsql modules a file imports (``from mtsql.x import y`` names ``mtsql.x`` and, if it is a
    module, ``mtsql.x.y``), the packages that importing ``name`` runs, and modules named in strings
    (``"mtsql.engines.backends.hf"``, ``"mtsql.x.y.Class"``: imported by name, as registries do)."""
    return _imported_by(name, path.read_text(encoding="utf-8"), str(path), PACKAGE_ROOT)


@functools.lru_cache(maxsize=1024)
def _imported_by(name: str, source: str, filename: str, root: Path) -> frozenset[str]:
    """``_imported`` for one source text: several stages share most modules, and each is parsed once per
    text (``root``, the package the names resolve in, is part of the key)."""
    found = {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 1)}
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("mtsql."):
            parts = node.value.split(".")
            found.update(m for m in (".".join(parts[:n]) for n in range(len(parts), 1, -1)) if module_file(m))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "mtsql")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mtsql":
            found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if module_file(f"{node.module}.{alias.name}")
            )
    return frozenset(m for m in found if module_file(m))


@functools.cache
def code_closure(name: str) -> tuple[str, ...]:
    """``name`` and every mtsql module it imports, transitively, sorted."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in seen or module_file(current) is None:
            continue
        seen.add(current)
        todo.extend(_imported(current, module_file(current)) - seen)
    return tuple(sorted(seen))


@functools.cache
def code_digest(name: str) -> str:
    """sha256 over the names and code (``code_text``) of ``code_closure(name)``."""
    digest = hashlib.sha256()
    for module in code_closure(name):
        digest.update(module.encode() + b"\0" + code_text(module_file(module)).encode() + b"\0")
    return digest.hexdigest()


def code_text(path: Path) -> str:
    """The syntax tree of a file without its docstrings, as text: what the code does, not how it reads."""
    return _code_text_of(path.read_text(encoding="utf-8"), str(path))


@functools.lru_cache(maxsize=1024)
def _code_text_of(source: str, filename: str) -> str:
    """``code_text`` of one source text, parsed once however many stages' digests cover it."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


FRESH_S = (
    2.0  # a file changed this recently is hashed afresh each time: a write within one mtime tick keeps it
)


def data_digest(root: Path) -> str:
    """sha256 of what a data folder holds: each file's path inside the folder, size and sha256, in path
    order (files and folders whose name starts with a dot left out). Neither the folder's own path nor
    file times count, so the same bytes at another path have the same digest, and one changed byte
    anywhere gives another. Each file's sha256 comes from ``cached_sha256``, so after the first time a
    digest costs one ``stat`` per file."""
    root = Path(root).resolve()
    files = _data_files(root)
    digest = hashlib.sha256()
    for path, (size, sha) in zip(files, cached_sha256(files, forget_under=root), strict=True):
        digest.update(f"{path.relative_to(root).as_posix()}\0{size}\0{sha}\n".encode())
    return digest.hexdigest()


def cached_sha256(files: list[Path], *, forget_under: Path | None = None) -> list[tuple[int, str]]:
    """(size, sha256) of each file. The sha256 is kept in ``$MTSQL_HOME/cache/data-files.json`` under the
    file's path, size and mtime, and hashed again only when one of those changed (or the file changed in
    the last ``FRESH_S`` seconds). ``forget_under``: a folder whose cached files not in ``files`` are
    dropped from the cache (they were deleted); each write also drops the files that no longer exist."""
    cache_path = home_dir() / "cache" / "data-files.json"
    cache, changed, now = _read_digest_cache(cache_path), False, time.time()
    found = []
    for path in files:
        stat = path.stat()
        mark = [stat.st_size, stat.st_mtime_ns]
        entry = cache.get(str(path))
        if entry is not None and entry[:2] == mark:
            sha = entry[2]
        else:
            with path.open("rb") as handle:
                sha = hashlib.file_digest(handle, "sha256").hexdigest()
            if now - stat.st_mtime > FRESH_S:
                cache[str(path)], changed = [*mark, sha], True
        found.append((stat.st_size, sha))
    if changed:
        present = {str(path) for path in files}
        if forget_under is not None:  # entries of files no longer in this folder go
            inside = f"{forget_under}{os.sep}"
            cache = {
                key: value for key, value in cache.items() if key in present or not key.startswith(inside)
            }
        # and those of files that are gone anywhere (a deleted run's artifacts): the cache is read and
        # written whole, so it holds only what exists
        cache = {key: value for key, value in cache.items() if key in present or os.path.exists(key)}
        try:
            write_json(cache_path, cache)
        except OSError as exc:  # a read-only MTSQL_HOME: the digests stand, only the next check is slower
            print(
                f"note: data digest cache {cache_path} not written ({exc.strerror}); files are hashed again "
                "next time",
                file=sys.stderr,
            )
    return found


def _data_files(root: Path) -> list[Path]:
    """The files under ``root`` (through symlinks), without dot names, sorted by their path inside it."""
    found = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(folder) / name for name in names if not name.startswith(".")]
    return sorted((p for p in found if p.is_file()), key=lambda p: p.relative_to(root).as_posix())


def _read_digest_cache(path: Path) -> dict[str, list]:
    """The cached file digests; an unreadable or damaged cache is said on stderr and read as an empty one
    (a cache never decides a digest: a missing entry is computed again, and the cache rewritten)."""
    if not path.exists():
        return {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        cache = exc
    if not isinstance(cache, dict):
        problem = cache if isinstance(cache, Exception) else f"holds a {type(cache).__name__}, not a mapping"
        print(
            f"note: data digest cache {path}: {problem}; the data folder's files are hashed again",
            file=sys.stderr,
        )
        return {}
    return cache


def code_version() -> dict:
    """Package version plus the git commit of the source tree (and whether it had local edits)."""
    root = PACKAGE_ROOT.parents[1]
    info: dict[str, Any] = {"version": mtsql.__version__, "git_commit": None, "dirty": None}
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode == 0:
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            info.update(git_commit=commit.stdout.strip(), dirty=bool(status.stdout.strip()))
    except (OSError, subprocess.TimeoutExpired):
        info["git_commit"] = (
            None  # not a git checkout (an installed wheel): the version and code digest say enough
        )
    return info


def package_versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def cpu_flags() -> set[str]:
    """The instruction-set flags of this machine's CPU (``/proc/cpuinfo``; empty where it is not readable)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    return set()


def cpu_has_fast_bf16() -> bool:
    """Whether bf16 matrix products run natively on this CPU (AVX512-BF16 or AMX); elsewhere torch
    emulates them, several times slower than float32."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def hardware() -> dict:
    """The machine a stage ran on: CPU, core count, memory and the GPUs ``nvidia-smi`` lists."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": None,
        "gpus": [],
    }
    with contextlib.suppress(OSError, ValueError):
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_gb"] = round(pages * size / 2**30, 1)
    with contextlib.suppress(
        OSError, subprocess.TimeoutExpired
    ):  # no nvidia-smi: a machine without NVIDIA GPUs
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if smi.returncode == 0:
            info["gpus"] = [line.strip() for line in smi.stdout.splitlines() if line.strip()]
    return info


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()
