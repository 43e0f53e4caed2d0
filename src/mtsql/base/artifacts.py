"""Versioned, content-addressed stage artifacts (DVC-style: fingerprint + manifest + skip when done).

Layout::

    runs/<run>/<label>/<fp12>/   manifest.json  config.yaml  log.txt  metrics.json  <outputs>
    runs/<run>/<label>/latest -> <fp12>

What an artifact is, is its ``ArtifactKey`` (stage, round, variant), recorded in the manifest; the
folder's ``label`` is derived from it (``sample-r2``, ``rl-c1``, ``eval-sft``) and never parsed back.
The fingerprint hashes the stage name, the config it reads, the fingerprints of its inputs and the
digest of the code it runs; the label is not part of it, so the same work asked for under a new label
is served from the store (the new label's ``latest`` points at the existing folder).

A stage works in ``<fp12>.partial/`` (kept across a crash so that stages can resume from their own
shards) and becomes complete only when ``manifest.json`` is written, last, and the folder is renamed
into place. Files the stage wrote that name the ``.partial`` folder (a training YAML, a recorded
command) are rewritten to name the final folder first, so everything an artifact records stays valid.
No manifest, not done. Each attempt (its start, wall time and how it ended; a failure's error line also
goes to ``log.txt``) is kept in ``attempts.json`` while the folder is partial, then in the manifest's
``attempts``, whose total is its ``duration_s``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.files import read_json, write_json, write_text
from mtsql.base.paths import label_name
from mtsql.base.provenance import cached_sha256, code_version, hardware, package_versions
from mtsql.base.trackers import Trackers

SCHEMA_VERSION = (
    4  # 3: the manifest records its ArtifactKey ("key"); 4: an evaluation's key its model's variant
)
KEYED = 3  # the first schema whose manifests record their key: older ones are refused
MODEL_VARIANT = 4  # the first schema whose evaluation keys record the scored model's variant
MANIFEST = "manifest.json"
MODEL_DIR = "model"  # where a training stage (sft, rl) leaves its Hugging Face model folder
PARTIAL = ".partial"
ATTEMPTS = (
    "attempts.json"  # in a .partial folder: the attempts so far (the manifest keeps them once complete)
)
REWRITE_LIMIT = 256 * 2**20  # files this large are weights or data, never a record of a path


ROUND_MARKS = {
    "rl": "c"
}  # the letter before a round number in a label: rl-c2 (a curriculum stage); else sample-r2
PHASES = ("base", "sft", "rl")  # the kinds of model an evaluation scores


@dataclass(frozen=True)
class ArtifactKey:
    """What an artifact is: the stage that made it, its round, its variant. Its ``label`` (the folder name)
    is derived from it, so that the store, ``mtsql status`` and the report read what an artifact is from
    its manifest instead of from its name.

    ``round``: the self-taught SFT round of a sample, reject or sft artifact (``sft-r2``), the curriculum
    stage of an rl one (``rl-c2``), or the round of the model an evaluation scores (``eval-sft-r2``).
    ``variant``: for an evaluation, the kind of model it scores (base, sft or rl); else a name beside the
    stage (``sample-pool``: the RL pool's probe; ``sft-short-r1``: a pipeline variant's round). ``name``:
    a label given by hand (``--label``, a pipeline step's ``label``), kept as given; None when it is the
    derived one. ``model_variant`` (evaluations only): the variant of the model it scores (``short`` for
    ``sft-short-r1``; None: the run's main chain), so that the report tells the evaluations apart by key."""

    stage: str
    round: int | None = None
    variant: str | None = None
    name: str | None = None
    model_variant: str | None = None

    def __post_init__(self):
        if self.name is not None and self.name == self._derived():
            object.__setattr__(
                self, "name", None
            )  # one key for one artifact, however its label was asked for

    @property
    def label(self) -> str:
        return self.name or self._derived()

    def _derived(self) -> str:
        if self.stage == "evaluate":
            model = ArtifactKey(self.variant, self.round, self.model_variant)
            return f"eval-{model.label}" if self.variant else self.stage
        parts = [self.stage, *([self.variant] if self.variant else [])]
        if self.round is not None:
            parts.append(f"{ROUND_MARKS.get(self.stage, 'r')}{self.round}")
        return "-".join(parts)

    @classmethod
    def evaluation(cls, model: ArtifactKey | None, name: str | None = None) -> ArtifactKey:
        """The key of an evaluation of ``model`` (the key of a trained model; None: the base model),
        labelled ``eval-<the model's label>`` unless ``name`` is given."""
        if model is None:
            return cls("evaluate", variant="base", name=name)
        return cls("evaluate", model.round, model.stage, name or f"eval-{model.label}", model.variant)

    @property
    def phase(self) -> str | None:
        """The kind of model an evaluation scores (base, sft, rl); None for other artifacts."""
        return self.variant if self.stage == "evaluate" and self.variant in PHASES else None

    def to_dict(self) -> dict:
        return asdict(self)


def key_of(manifest: dict) -> ArtifactKey:
    """The key a manifest records (``read_manifest`` refuses one written before keys)."""
    return ArtifactKey(**manifest["key"])


def too_old(manifest: dict) -> str | None:
    """What an artifact written by an older mtsql lacks, or None: a manifest without its key, or an
    evaluation whose key does not name the variant of the model it scored."""
    schema = manifest.get("schema_version", 0)
    if "key" not in manifest or schema < KEYED:
        return "its manifest records no artifact key"
    if manifest["stage"] == "evaluate" and schema < MODEL_VARIANT:
        return "its key does not record the variant of the model it scored"
    return None


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
    def key(self) -> ArtifactKey:
        return key_of(self.manifest)

    @property
    def metrics(self) -> dict:
        return self.manifest.get("metrics", {})

    def records(self, name: str) -> int | None:
        """How many records output ``name`` (a .jsonl file) held when the stage wrote it; None if no such
        output."""
        return next(
            (entry.get("records") for entry in self.manifest.get("outputs", []) if entry["path"] == name),
            None,
        )

    def ref(self) -> dict:
        return {"label": self.label, "fingerprint": self.fingerprint, "path": str(self.path)}


@dataclass
class StageContext:
    """What a stage function gets: where to write, its inputs, a log file, the dashboards it logs to
    (``trackers``: the runner opens them; off where a stage runs without the runner)."""

    label: str
    out: Path
    inputs: dict[str, Artifact]
    log_path: Path
    extra_manifest: dict = field(default_factory=dict)
    trackers: Trackers = field(default_factory=Trackers.off)

    def log(self, line: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(line.rstrip("\n") + "\n")


class StageInterrupted(KeyboardInterrupt):
    """Ctrl-C while a stage ran: its ``.partial`` folder is kept for the next run to resume."""

    def __init__(self, label: str, partial: Path):
        super().__init__(label)
        self.label, self.partial = label, partial


def fingerprint(
    stage: str, config: dict, inputs: dict[str, Artifact] | dict[str, str], code: str = ""
) -> str:
    """sha256 over the stage name, the config it reads, the input fingerprints and its code digest."""
    fps = {k: (v.fingerprint if isinstance(v, Artifact) else v) for k, v in sorted(inputs.items())}
    blob = json.dumps(
        {"stage": stage, "config": config, "inputs": fps, "code": code}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete artifact, or None; a damaged one is a clear error."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{path}: damaged manifest ({exc}); delete that folder or rerun with --force"
        ) from None
    for key in ("stage", "label", "fingerprint", "outputs"):
        if key not in manifest:
            raise UsageError(
                f"{path}: manifest lacks '{key}' (edited by hand?); delete that folder or rerun with --force"
            )
    if lacks := too_old(manifest):
        raise UsageError(
            f"{folder}: written by an older mtsql ({lacks}); delete that folder and rerun its stage"
        )
    return manifest


class Store:
    """The artifacts of one run: ``<runs_dir>/<run>/``."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def folder(self, label: str, fp: str) -> Path:
        return self.root / label / fp[:12]

    def find(self, label: str, fp: str) -> Artifact | None:
        """The complete artifact with fingerprint ``fp``: under ``label``, else under any label; one whose
        files do not verify is a UsageError (``reusable``), never a cached result."""
        for folder in (self.folder(label, fp), *sorted(self.root.glob(f"*/{fp[:12]}"))):
            _not_a_symlink(folder)
            manifest = read_manifest(folder)
            if manifest is None:
                continue
            if manifest["fingerprint"] != fp:
                raise UsageError(
                    f"{folder / MANIFEST}: fingerprint does not match its folder (edited by hand?); "
                    "delete that folder or rerun with --force"
                )
            return reusable(Artifact(folder.resolve(), manifest))
        return None

    def latest(self, label: str) -> Artifact | None:
        """The artifact ``label``'s ``latest`` link points to (None: no such link, or an unfinished one).
        A label is a name, never a path; a link that leads outside the run, or nowhere, is an error."""
        link = self.root / label_name(label) / "latest"
        if not link.is_symlink() and not link.exists():
            return None
        target = self.inside(link)
        manifest = read_manifest(target) if target else None
        return Artifact(target, manifest) if manifest else None

    def inside(self, link: Path) -> Path | None:
        """Where a ``latest`` link of this run leads: an artifact folder of this run (None: one that was
        deleted, so the stage runs again), or a UsageError for a link that leads out of the run."""
        target = link.resolve()
        if target.parent.parent != self.root or (target.exists() and not target.is_dir()):
            raise UsageError(
                f"{link} leads to {target}, not to an artifact folder of run {self.root}; the store "
                "never makes such a link: delete it and rerun the stage"
            )
        return target if target.exists() else None

    def latest_links(self) -> list[Path]:
        """Every ``<label>/latest`` link of the run, those that lead nowhere included (``glob`` skips
        them)."""
        folders = sorted(p for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []
        return [folder / "latest" for folder in folders if (folder / "latest").is_symlink()]

    def link_problems(self) -> list[str]:
        """What is wrong with the run's ``latest`` links (each must lead to an artifact folder of the run)."""
        problems = []
        for link in self.latest_links():
            try:
                self.inside(link)
            except UsageError as exc:
                problems.append(str(exc))
        return problems

    def latest_of(self, stage: str) -> Artifact | None:
        """This run's last round or curriculum stage of ``stage`` (``sft-r2``, ``rl-c3``; of the artifacts
        its labels' ``latest`` links point to; one without a round counts as round 0; not a pipeline
        variant's), the newest of them on a tie; None when it has none."""
        found = []
        for link in self.latest_links():
            target = self.inside(link)
            manifest = read_manifest(target) if target else None
            key = key_of(manifest) if manifest is not None else None
            if key is not None and key.stage == stage and key.variant is None:  # a pipeline variant's
                # (sft-short-r1, rl-outcome-c1) is never this run's sft or rl model
                found.append(Artifact(link.resolve(), manifest))
        return max(found, key=lambda a: (a.key.round or 0, a.manifest.get("created_at", "")), default=None)

    def require(self, label: str) -> Artifact:
        """The latest complete artifact of ``label``, or a UsageError saying how to see what exists."""
        artifact = self.latest(label)
        if artifact is None:
            raise UsageError(
                f"run '{self.root.name}' has no complete '{label}' artifact "
                f"(see `mtsql status {self.root.name}`)"
            )
        return artifact

    def model(self, ref: str | None, *, auto: tuple[str, ...] = ("rl", "sft")) -> Artifact | None:
        """A ``--model`` reference: ``base`` (None); ``sft`` / ``rl``: this run's last round or
        stage; an artifact label such as ``sft-r2``; ``auto`` (or None): the first kind of ``auto``
        this run has, else base. RL starts from ``auto=("sft",)``, so a rerun never starts from its
        own output."""
        if ref in (None, "auto"):
            ref = next((kind for kind in auto if self.latest_of(kind) is not None), "base")
        if ref == "base":
            return None
        if ref in ("sft", "rl"):
            artifact = self.latest_of(ref)
            if artifact is None:
                command = "sft-iterate" if ref == "sft" else "rl"
                raise UsageError(
                    f"run '{self.root.name}' has no {ref} model yet; run `mtsql {command}` first"
                )
        else:
            artifact = self.require(ref)
        if not (artifact.path / MODEL_DIR).is_dir():
            raise UsageError(
                f"'{ref}' of run '{self.root.name}' is not a model artifact (no {MODEL_DIR}/ folder)"
            )
        return artifact

    def artifacts(self, damaged: list[str] | None = None) -> list[Artifact]:
        """Every complete artifact of the run (each folder once), oldest first. A damaged manifest is
        an error, or, given a ``damaged`` list, left out with its one-line problem added to the list."""
        found = []
        if self.root.exists():
            for manifest_path in self.root.glob(f"*/*/{MANIFEST}"):
                if manifest_path.parent.name == "latest":
                    continue
                try:
                    manifest = read_manifest(manifest_path.parent)
                except UsageError as exc:
                    if damaged is None:
                        raise
                    damaged.append(str(exc))
                    continue
                found.append(Artifact(manifest_path.parent, manifest))
        return sorted(found, key=lambda a: a.manifest.get("created_at", ""))

    def run(
        self,
        key: ArtifactKey,
        config: dict,
        inputs: dict[str, Artifact],
        work: Callable[[StageContext], dict],
        *,
        code: str = "",
        force: bool = False,
        unhashed: dict | None = None,
    ) -> tuple[Artifact, bool]:
        """Run ``work`` for the artifact ``key`` unless a complete artifact with the same fingerprint exists.

        Returns (artifact, cached). ``work`` writes into ``ctx.out`` and returns its metrics.
        ``config.yaml`` shows ``config`` (what the fingerprint covers) and, under ``not_hashed``,
        ``unhashed`` (settings that were used but cannot change the results: batch sizes, ports, paths).
        """
        stage, label = key.stage, label_name(key.label)
        fp = fingerprint(stage, config, inputs, code)
        if not force and (done := self.find(label, fp)):
            self._point_latest(label, done.path)
            return done, True
        final = self.folder(label, fp)
        partial, lock = final.with_name(final.name + PARTIAL), final.with_name(final.name + ".lock")
        for path in (final.parent, final, partial, lock, final.with_name(final.name + ".old")):
            _not_a_symlink(path)
        if partial.exists():
            _no_link_out(partial)  # a link made by hand: the next attempt would write through it
        if lock.exists() and not lock.is_file():
            raise UsageError(
                f"{lock} is not a file (the store's lock for this stage): delete it and rerun the stage"
            )
        current = self.latest(label)
        if current is not None and current.key.stage != stage:
            raise UsageError(
                f"label '{label}' is taken by a {current.key.stage} artifact ({current.path}); give this "
                f"{stage} stage another label"
            )
        check_inputs(inputs)
        made = [folder for folder in (final.parent, *final.parent.parents) if not folder.exists()][::-1]
        had_lock = lock.exists()
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            with _locked(lock):
                try:
                    return self._build(
                        key, fp, config, inputs, work, code=code, force=force, unhashed=unhashed
                    )
                except UsageError:
                    if not had_lock and not partial.exists():  # refused before any work: no trace of it
                        lock.unlink(missing_ok=True)
                    raise
        except UsageError:
            for folder in reversed(made):
                with contextlib.suppress(OSError):  # not empty: something else is there
                    folder.rmdir()
            raise

    def _build(
        self,
        key: ArtifactKey,
        fp: str,
        config: dict,
        inputs: dict[str, Artifact],
        work: Callable[[StageContext], dict],
        *,
        code: str,
        force: bool,
        unhashed: dict | None,
    ) -> tuple[Artifact, bool]:
        """``run`` once it holds the stage's lock: work in the ``.partial`` folder, then complete it."""
        stage, label = key.stage, key.label
        final = self.folder(label, fp)
        partial = final.with_name(final.name + PARTIAL)
        if force and partial.exists():
            shutil.rmtree(partial)
        resumed = partial.exists()
        if resumed:
            _own_copies(partial)
        partial.mkdir(exist_ok=True)
        ctx = StageContext(label, partial, inputs, partial / "log.txt")
        attempts = _Attempts(partial / ATTEMPTS, key)
        for killed in attempts.mark_killed():
            ctx.log(
                f"=== the attempt started {killed['started_at']} was killed before it recorded its end; its "
                f"wall time counts up to its last write ({killed['duration_s']}s)"
            )
        ctx.log(
            f"=== {label}: attempt started {attempts.start()}"
            + (" (resuming the .partial folder)" if resumed else "")
        )
        shown = {**config, "not_hashed": unhashed} if unhashed else config
        write_text(partial / "config.yaml", yaml.safe_dump(shown, sort_keys=False))
        try:
            metrics = work(ctx)
        except KeyboardInterrupt:
            attempts.stopped("interrupted", ctx, "=== interrupted")
            raise StageInterrupted(label, partial) from None
        except Exception as exc:
            attempts.stopped(f"failed: {type(exc).__name__}", ctx, f"=== failed: {type(exc).__name__}: {exc}")
            if isinstance(exc, UsageError) and not resumed and _holds_no_work(partial):
                shutil.rmtree(partial)  # bad input found before any work: nothing to resume
            raise
        if not isinstance(metrics, dict):
            raise StageFailed(f"stage {label} returned {type(metrics).__name__}, not a metrics dict")
        write_json(partial / "metrics.json", metrics)
        _point_paths_at(partial, final)
        history = attempts.end("complete")
        (partial / ATTEMPTS).unlink()
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "stage": stage,
            "label": label,
            "round": key.round,
            "key": key.to_dict(),
            "fingerprint": fp,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round_(sum(a.get("duration_s") or 0.0 for a in history)),
            "attempts": history,
            "code": {**code_version(), "digest": code},
            "packages": package_versions(),
            "hardware": hardware(),
            "config_sha": hashlib.sha256(
                json.dumps(config, sort_keys=True, default=str).encode()
            ).hexdigest(),
            "inputs": {name: art.ref() for name, art in inputs.items()},
            "outputs": describe_outputs(partial),
            "argv": sys.argv,
            "metrics": metrics,
            **ctx.extra_manifest,
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
        if link.exists() and link.resolve() == folder.resolve():
            return  # already there: a cached stage of a read-only run writes nothing
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".latest.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        target = folder.name if folder.parent == link.parent else os.path.relpath(folder, link.parent)
        tmp.symlink_to(target)
        os.replace(tmp, link)


class _Attempts:
    """The attempts at one artifact, kept in its ``.partial`` folder while it is built and moved into
    the manifest when it completes: each one's start, wall time and outcome. An attempt killed
    outright (kill -9, a power cut) keeps the outcome ``running`` and no duration until the next
    attempt starts (holding the lock, so the other is dead): it becomes ``killed``, its wall time up to
    the last file written in the folder before the attempt after it. The file also holds the
    artifact's key, so that ``mtsql status`` knows what a partial folder is."""

    def __init__(self, path: Path, key: ArtifactKey):
        self.path, self.key = path, key
        self.history: list[dict] = read_attempts(path)[1] if path.exists() else []
        self.started = 0.0

    def mark_killed(self) -> list[dict]:
        """Record the attempts still ``running`` (their process died without a word) as ``killed``, with
        the wall time to their last write; returns them. Call before this attempt writes anything."""
        writes = [
            p.stat().st_mtime for p in self.path.parent.rglob("*") if p.is_file() and not p.is_symlink()
        ]
        killed = []
        for index, attempt in enumerate(self.history):
            if attempt["outcome"] != "running":
                continue
            began = dt.datetime.fromisoformat(attempt["started_at"]).timestamp()
            ended = max(writes, default=began)
            if index + 1 < len(self.history):
                ended = min(
                    ended, dt.datetime.fromisoformat(self.history[index + 1]["started_at"]).timestamp()
                )
            attempt.update(outcome="killed", duration_s=round_(max(0.0, ended - began)))
            killed.append(attempt)
        return killed

    def start(self) -> str:
        self.started = time.time()
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.history.append({"started_at": now, "duration_s": None, "outcome": "running"})
        self._write()
        return now

    def end(self, outcome: str) -> list[dict]:
        """Every attempt, this one with its wall time and ``outcome`` (what the manifest keeps)."""
        self.history[-1].update(duration_s=round_(time.time() - self.started), outcome=outcome)
        return self.history

    def stopped(self, outcome: str, ctx: StageContext, line: str) -> None:
        """Record an attempt that did not complete, and ``line`` in the stage's log. Best effort: a
        full disk must not hide the error that stopped it."""
        self.end(outcome)
        with contextlib.suppress(OSError):
            ctx.log(line)
            self._write()

    def _write(self) -> None:
        write_json(self.path, {"key": self.key.to_dict(), "attempts": self.history})


def read_attempts(path: Path) -> tuple[ArtifactKey | None, list[dict]]:
    """The key and attempts an ``attempts.json`` holds (an older mtsql wrote the attempts alone)."""
    data = read_json(path)
    if isinstance(data, list):
        return None, data
    return ArtifactKey(**data["key"]), data["attempts"]


def _own_copies(partial: Path) -> None:
    """Give each file of a ``.partial`` folder that shares its data with another path (a run copied with
    ``cp -al``) a copy of its own, mtime kept, so that resuming appends to this run's files only."""
    for path in partial.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_nlink > 1:
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
            shutil.copy2(path, tmp)
            os.replace(tmp, path)


def _holds_no_work(partial: Path) -> bool:
    """Whether a ``.partial`` folder holds only what ``Store.run`` itself writes before the stage runs."""
    return {p.name for p in partial.iterdir()} <= {"config.yaml", "log.txt", ATTEMPTS}


def _point_paths_at(partial: Path, final: Path) -> None:
    """Rewrite the text files of ``partial`` that name it so that they name ``final`` instead."""
    old, new = str(partial).encode(), str(final).encode()
    for path in partial.rglob("*"):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > REWRITE_LIMIT:
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:8192]:
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
            tmp.write_bytes(data.replace(old, new))
            shutil.copymode(path, tmp)
            os.replace(tmp, path)


def verify(artifact: Artifact, *, cached: bool = False) -> list[str]:
    """Problems found when checking an artifact's files against its manifest (each recorded file there,
    unchanged, none added, none a link that leads out of the folder), and the metrics the manifest shows
    (``mtsql status``) against the hashed ``metrics.json`` (empty: intact). ``cached``: a file's sha256
    may come from ``provenance.cached_sha256`` (hashed again only when its size or mtime changed),
    which is what a stage, ``status`` and the report check; ``mtsql data verify`` hashes every byte."""
    folder = artifact.path
    if folder.is_symlink():
        return [f"{folder}: a symlink to {folder.resolve()}; the store never makes one"]
    problems = (
        [f"{folder / MANIFEST}: a symlink to {(folder / MANIFEST).resolve()}; the store never makes one"]
        if (folder / MANIFEST).is_symlink()
        else []
    )
    metrics_file = folder / "metrics.json"
    if metrics_file.is_file() and not metrics_file.is_symlink():
        try:
            written = _canonical(json.loads(metrics_file.read_text(encoding="utf-8")))
        except ValueError:
            written = None
        if written != _canonical(artifact.metrics):
            problems.append(
                f"{folder / MANIFEST}: its metrics differ from metrics.json (edited since the stage "
                "wrote them)"
            )
    recorded = {entry["path"] for entry in artifact.manifest["outputs"]}
    to_hash = []
    for entry in artifact.manifest["outputs"]:
        path = folder / entry["path"]
        if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            problems.append(
                f"{path}: a symlink to {path.resolve()}, outside the artifact (the store never makes one)"
            )
        elif not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{path}: size changed since the stage wrote it")
        elif "sha256" not in entry:
            problems.append(f"{path}: recorded by size only (an artifact of an older mtsql); size unchanged")
        else:
            to_hash.append((path, entry["sha256"]))
    shas = (
        (sha for _, sha in cached_sha256([path for path, _ in to_hash]))
        if cached
        else (sha256_file(path) for path, _ in to_hash)
    )
    problems += [
        f"{path}: content changed since the stage wrote it"
        for (path, want), sha in zip(to_hash, shas, strict=True)
        if sha != want
    ]
    extra = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if (p.is_file() or p.is_symlink())
        and p.name != MANIFEST
        and str(p.relative_to(folder)) not in recorded
    )
    if extra:
        shown = ", ".join(extra[:5]) + (f", … ({len(extra)} in all)" if len(extra) > 5 else "")
        problems.append(
            f"{folder}: file(s) the manifest does not record (added since the stage wrote it): {shown}"
        )
    return problems


def reusable(artifact: Artifact) -> Artifact:
    """``artifact``, found complete with the fingerprint asked for, if its files verify (cached hashes);
    else a UsageError naming the first problem: an artifact edited since the stage wrote it is never
    served as ``cached``, and a rerun would delete the edit, so the user decides (--force)."""
    problems = verify(artifact, cached=True)
    if problems:
        raise UsageError(
            f"{problems[0]}; artifact '{artifact.label}' of this work does not verify, so it is not "
            f"reused: see `mtsql data verify {artifact.path.parent.parent}`, then rerun with --force "
            "to make it again"
        )
    return artifact


def check_inputs(inputs: dict) -> None:
    """Refuse, in one line naming the file, an input artifact whose files differ from its manifest
    (checked with cached hashes: a stage start rehashes only files whose size or mtime changed)."""
    for name, artifact in inputs.items():
        if isinstance(artifact, Artifact) and "outputs" in artifact.manifest:  # else made in memory, not read
            problems = verify(artifact, cached=True)
            if problems:
                run = artifact.path.parent.parent
                raise UsageError(
                    f"{problems[0]}; input '{name}' ({artifact.label}) does not verify: see "
                    f"`mtsql data verify {run}`, then rerun the stage that made it with --force"
                )


def _canonical(data) -> str:
    return json.dumps(data, sort_keys=True)


def describe_outputs(folder: Path) -> list[dict]:
    """Every file with its size and sha256 (streamed; checkpoints too), and the records of .jsonl files."""
    _no_link_out(folder)
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        entry: dict[str, Any] = {
            "path": str(path.relative_to(folder)),
            "size": path.stat().st_size,
            "sha256": sha256_file(path),
        }
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


def round_(x: float) -> float:
    return float(f"{x:.3f}")


def _not_a_symlink(path: Path) -> None:
    """A UsageError when ``path``, a folder or file the store writes, is a symlink (the store never
    makes one there, and never writes through one)."""
    if path.is_symlink():
        raise UsageError(
            f"{path} is a symlink (to {path.resolve()}); the store makes none there and never writes "
            "through one: delete it and rerun the stage"
        )


def _no_link_out(folder: Path) -> None:
    """A UsageError when a file or folder under ``folder`` is a symlink that leads out of it."""
    inside = folder.resolve()
    for path in folder.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(inside):
            raise UsageError(
                f"{path} is a symlink to {path.resolve()}, outside {folder}; the store never writes "
                "through one: delete it and rerun the stage"
            )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        _not_a_symlink(path)
        raise
    with os.fdopen(fd, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StageFailed(
                f"{path.parent}: another mtsql process is running this stage; wait for it"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
