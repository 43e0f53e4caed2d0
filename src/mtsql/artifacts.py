"""Versioned, content-addressed stage artifacts (DVC-style: fingerprint + manifest + skip when done).

Layout::

    runs/<run>/<label>/<fp12>/   manifest.json  config.yaml  log.txt  metrics.json  <outputs>
    runs/<run>/<label>/latest -> <fp12>

``label`` is the stage name, with ``-r<k>`` for SFT rounds or ``-c<k>`` for curriculum stages.
The fingerprint hashes the stage name, its resolved config, the fingerprints of its inputs and
the code version. A stage works in ``<fp12>.partial/`` (kept across a crash so that stages can
resume from their own shards) and becomes complete only when ``manifest.json`` is written, last,
and the folder is renamed into place. No manifest, not done.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import mtsql
from mtsql.errors import StageFailed, UsageError
from mtsql.files import write_json

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
HASH_LIMIT = 64 * 2**20  # bigger files (checkpoints) are recorded by size only
PACKAGES = ("torch", "transformers", "llamafactory", "verl", "vllm", "sqlparse")


@dataclass(frozen=True)
class Artifact:
    """A complete stage output folder and its manifest."""

    path: Path
    manifest: dict

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def label(self) -> str:
        return self.manifest["label"]

    @property
    def metrics(self) -> dict:
        return self.manifest.get("metrics", {})

    def ref(self) -> dict:
        return {"label": self.label, "fingerprint": self.fingerprint, "path": str(self.path)}


@dataclass
class StageContext:
    """What a stage function gets: where to write, its config, its inputs, a log file."""

    label: str
    out: Path
    config: dict
    inputs: dict[str, Artifact]
    log_path: Path
    extra_manifest: dict = field(default_factory=dict)

    def log(self, line: str) -> None:
        with self.log_path.open("a") as handle:
            handle.write(line.rstrip("\n") + "\n")


def fingerprint(stage: str, config: dict, inputs: dict[str, Artifact] | dict[str, str]) -> str:
    """sha256 over the stage name, its resolved config, the input fingerprints and the code version."""
    fps = {k: (v.fingerprint if isinstance(v, Artifact) else v) for k, v in sorted(inputs.items())}
    blob = json.dumps({"stage": stage, "config": config, "inputs": fps, "code": mtsql.__version__},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete artifact, or None; a damaged one is a clear error."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: damaged manifest ({exc}); delete that folder or rerun with --force") from None
    for key in ("stage", "label", "fingerprint", "outputs"):
        if key not in manifest:
            raise UsageError(f"{path}: manifest lacks '{key}' (edited by hand?); delete that folder or rerun with --force")
    return manifest


class Store:
    """The artifacts of one run: ``<runs_dir>/<run>/``."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def folder(self, label: str, fp: str) -> Path:
        return self.root / label / fp[:12]

    def find(self, label: str, fp: str) -> Artifact | None:
        folder = self.folder(label, fp)
        manifest = read_manifest(folder)
        if manifest is None:
            return None
        if manifest["fingerprint"] != fp:
            raise UsageError(f"{folder / MANIFEST}: fingerprint does not match its folder (edited by hand?); "
                             "delete that folder or rerun with --force")
        return Artifact(folder, manifest)

    def latest(self, label: str) -> Artifact | None:
        link = self.root / label / "latest"
        if not link.exists():
            return None
        manifest = read_manifest(link.resolve())
        return Artifact(link.resolve(), manifest) if manifest else None

    def artifacts(self) -> list[Artifact]:
        """Every complete artifact of the run, oldest first."""
        found = []
        if self.root.exists():
            for manifest_path in self.root.glob(f"*/*/{MANIFEST}"):
                if manifest_path.parent.name == "latest":
                    continue
                manifest = read_manifest(manifest_path.parent)
                found.append(Artifact(manifest_path.parent, manifest))
        return sorted(found, key=lambda a: a.manifest.get("created_at", ""))

    def run(self, stage: str, label: str, config: dict, inputs: dict[str, Artifact],
            work: Callable[[StageContext], dict], *, force: bool = False, round: int | None = None) -> tuple[Artifact, bool]:
        """Run ``work`` unless a complete artifact with the same fingerprint exists.

        Returns (artifact, cached). ``work`` writes into ``ctx.out`` and returns its metrics.
        """
        fp = fingerprint(stage, config, inputs)
        if not force and (done := self.find(label, fp)):
            self._point_latest(label, done.path)
            return done, True
        final = self.folder(label, fp)
        partial = final.with_name(final.name + ".partial")
        final.parent.mkdir(parents=True, exist_ok=True)
        with _locked(final.with_name(final.name + ".lock")):
            if force and partial.exists():
                shutil.rmtree(partial)
            partial.mkdir(exist_ok=True)
            ctx = StageContext(label, partial, config, inputs, partial / "log.txt")
            (partial / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            start = time.time()
            metrics = work(ctx)
            if not isinstance(metrics, dict):
                raise StageFailed(f"stage {label} returned {type(metrics).__name__}, not a metrics dict")
            write_json(partial / "metrics.json", metrics)
            manifest = {
                "schema_version": SCHEMA_VERSION, "stage": stage, "label": label, "round": round,
                "fingerprint": fp, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "duration_s": round_(time.time() - start), "code": code_version(), "packages": package_versions(),
                "hardware": hardware(),
                "config_sha": hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest(),
                "inputs": {name: art.ref() for name, art in inputs.items()},
                "outputs": describe_outputs(partial), "argv": sys.argv, "metrics": metrics, **ctx.extra_manifest,
            }
            write_json(partial / MANIFEST, manifest)  # last: from here on the folder is complete
            if final.exists():
                trash = final.with_name(final.name + ".old")
                shutil.rmtree(trash, ignore_errors=True)
                final.rename(trash)
                shutil.rmtree(trash)
            partial.rename(final)
        self._point_latest(label, final)
        return Artifact(final, manifest), False

    def _point_latest(self, label: str, folder: Path) -> None:
        link = self.root / label / "latest"
        tmp = link.with_name(f".latest.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(folder.name)
        os.replace(tmp, link)


def verify(artifact: Artifact) -> list[str]:
    """Problems found when checking an artifact's files against its manifest (empty: intact)."""
    problems = []
    for entry in artifact.manifest["outputs"]:
        path = artifact.path / entry["path"]
        if not path.exists():
            problems.append(f"{path}: missing")
        elif "sha256" in entry and sha256_file(path) != entry["sha256"]:
            problems.append(f"{path}: content changed since the stage wrote it")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{path}: size changed since the stage wrote it")
    return problems


def describe_outputs(folder: Path) -> list[dict]:
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        entry: dict[str, Any] = {"path": str(path.relative_to(folder)), "size": path.stat().st_size}
        if entry["size"] <= HASH_LIMIT:
            entry["sha256"] = sha256_file(path)
        if path.suffix == ".jsonl":
            with path.open("rb") as handle:
                entry["records"] = sum(1 for line in handle if line.strip())
        out.append(entry)
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def code_version() -> dict:
    """Package version plus the git commit of the source tree (and whether it had local edits)."""
    root = Path(mtsql.__file__).resolve().parents[2]
    info: dict[str, Any] = {"version": mtsql.__version__, "git_commit": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if commit.returncode == 0:
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=5)
            info.update(git_commit=commit.stdout.strip(), dirty=bool(status.stdout.strip()))
    except (OSError, subprocess.TimeoutExpired):
        info["git_commit"] = None  # not a git checkout (an installed wheel): the version says enough
    return info


def package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def hardware() -> dict:
    """The machine a stage ran on: CPU, core count, memory and the GPUs ``nvidia-smi`` lists."""
    info: dict[str, Any] = {"machine": platform.machine(), "cpu": _cpu_model(), "cores": os.cpu_count(),
                            "memory_gb": None, "gpus": []}
    with contextlib.suppress(OSError, ValueError):
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_gb"] = round(pages * size / 2**30, 1)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # no nvidia-smi: a machine without NVIDIA GPUs
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        if smi.returncode == 0:
            info["gpus"] = [line.strip() for line in smi.stdout.splitlines() if line.strip()]
    return info


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def round_(x: float) -> float:
    return float(f"{x:.3f}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StageFailed(f"{path.parent}: another mtsql process is running this stage; wait for it") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
