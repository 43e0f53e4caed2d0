"""`mtsql status`: what a run folder holds, read from manifests only, in pipeline order.

One row per artifact folder (``<label>/<fp12>``, or ``<fp12>.partial``: ``running`` while a process
holds the stage's lock, else ``partial`` with how its last attempt ended; a damaged manifest is a row
that names it, not an error for the whole run; an artifact whose files do not verify against its
manifest, checked with cached hashes, is ``edited``, a ``latest`` link that leads out of the run
or nowhere a ``bad link`` row, and a label whose ``latest`` is another label's artifact an ``alias``
row): SFT rounds (sample, reject, sft), the RL pool sample, the curriculum, the RL stages,
then the evaluations (base → sft → rl), as the artifacts' keys (``ArtifactKey``) say. Other folders of
a run (``report/``) are not stages.
"""

from __future__ import annotations

import fcntl
import re
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

from mtsql.base.artifacts import (
    ATTEMPTS,
    PARTIAL,
    Artifact,
    ArtifactKey,
    Store,
    key_of,
    read_attempts,
    read_manifest,
    verify,
)
from mtsql.base.errors import UsageError
from mtsql.base.run_folders import is_artifact_folder, is_label_folder, is_run_folder, run_holding
from mtsql.core.results import RlStageResult

ARTIFACT_FOLDER = re.compile(r"^([0-9a-f]{12}|[^.]+\.partial)$")  # <fp12>, or a stage at work: <fp12>.partial
ROUND_STAGES = ("sample", "reject", "sft")


def run_folder(run: str, runs_dir: Path) -> Path:
    """A run name under ``runs_dir`` or a path to a run folder; it must exist, and not be a folder inside
    a run (a label or artifact folder: the run is named instead)."""
    candidates = list(dict.fromkeys((Path(run).expanduser(), runs_dir / run)))
    for candidate in candidates:
        if candidate.is_dir():
            holder = run_holding(candidate)
            if holder is not None and holder != candidate.resolve():
                kind = (
                    "an artifact folder"
                    if is_artifact_folder(candidate.resolve())
                    else "a label folder"
                    if is_label_folder(candidate.resolve())
                    else "a folder"
                )
                raise UsageError(f"{run} is {kind} of the run {holder}, not a run: give the run ({holder})")
            return candidate
    looked = " and ".join(str(candidate) for candidate in candidates)
    raise UsageError(f"no run '{run}' (looked for {looked}); `mtsql status` lists runs")


def pipeline_order(key: ArtifactKey | None, label: str = "") -> tuple:
    """Sort key of an artifact, as the pipelines run them: the base model's evaluations, SFT rounds,
    the SFT evaluations, RL pool sample, curriculum, RL stages, the RL evaluations, then evaluations
    of other models and anything else (a folder whose key is unknown: ``label`` only)."""
    if key is None:
        return (8, 0, 0, label)
    label, number = key.label, key.round or 0
    if key.stage == "evaluate":
        return ({"base": 0, "sft": 2, "rl": 6}.get(key.phase, 7), 0, 0, label)
    if key.stage in ROUND_STAGES and key.variant is None:
        return (1, number, ROUND_STAGES.index(key.stage), label)
    if key.stage == "sample":
        return (3, 0, 0, label)
    if key.stage == "curriculum":
        return (4, 0, 0, label)
    if key.stage == "rl":
        return (5, number, 0, label)
    return (8, 0, 0, label)


def status_rows(folder: Path) -> list[tuple[str, ...]]:
    """Rows of (label, state, fingerprint, created, wall time, summary) in pipeline order; within a
    label the artifact ``latest`` points to, then older versions (newest first), then partial ones."""
    found = []  # (sort key, created, row)
    for stage_dir in (p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        entries = [p for p in stage_dir.iterdir() if p.is_dir() and ARTIFACT_FOLDER.match(p.name)]
        link = stage_dir / "latest"
        try:
            latest = Store(folder).inside(link) if link.is_symlink() else None
        except UsageError as exc:  # a link the store did not make: name it, show the rest
            latest = None
            found.append(
                (
                    (pipeline_order(None, stage_dir.name), 2),
                    "",
                    (stage_dir.name, "bad link", "", "", "", str(exc)),
                )
            )
        if latest is not None and latest.parent != stage_dir.resolve():
            found += _alias(stage_dir.name, latest)
        manifests, unreadable = {}, []
        for entry in entries:  # none: not a stage folder (the report, a user's notes)
            try:
                manifests[entry] = read_manifest(entry)
            except UsageError as exc:  # one damaged manifest: name it, show the rest
                unreadable.append((entry, exc))
        # a folder without a manifest sorts as its attempts.json says, else as the label's complete artifacts
        known = next((key_of(m) for m in manifests.values() if m is not None), None)
        for entry, exc in unreadable:
            found.append(
                (
                    (pipeline_order(known, stage_dir.name), 2),
                    "",
                    (stage_dir.name, "damaged", entry.name.split(".")[0], "", "", str(exc)),
                )
            )
        for entry, manifest in manifests.items():
            fp12 = entry.name.split(".")[0]
            if manifest is None:
                state, what = unfinished(entry)
                key = (read_attempts(entry / ATTEMPTS)[0] if (entry / ATTEMPTS).is_file() else None) or known
                found.append(
                    (
                        (pipeline_order(key, stage_dir.name), 2),
                        "",
                        (stage_dir.name, state, fp12, "", "", what),
                    )
                )
                continue
            is_latest = entry.resolve() == latest
            created = manifest.get("created_at", "")
            problems = verify(Artifact(entry, manifest), cached=True)
            state = "edited" if problems else "latest" if is_latest else "older"
            what = (
                f"does not verify (see `mtsql data verify`): {problems[0]}" if problems else summary(manifest)
            )
            found.append(
                (
                    (pipeline_order(key_of(manifest)), 0 if is_latest else 1),
                    created,
                    (
                        manifest["label"],
                        state,
                        manifest["fingerprint"][:12],
                        created[5:16].replace("T", " "),
                        duration(manifest.get("duration_s")),
                        what,
                    ),
                )
            )
    found.sort(key=lambda item: item[1], reverse=True)
    found.sort(key=lambda item: item[0])
    return [row for _, _, row in found]


def _alias(label: str, target: Path) -> list[tuple]:
    """The row of a label whose ``latest`` is another label's artifact (the same work asked for under
    this label), beside that artifact; none when its manifest cannot be read (its own row says why)."""
    try:
        manifest = read_manifest(target)
    except UsageError:
        return []
    if manifest is None:
        return []
    created = manifest.get("created_at", "")
    return [
        (
            (pipeline_order(key_of(manifest)), 1),
            created,
            (
                label,
                "alias",
                manifest["fingerprint"][:12],
                created[5:16].replace("T", " "),
                "",
                f"the same artifact as {target.parent.name} ({target.parent.name}/{target.name})",
            ),
        )
    ]


def unfinished(entry: Path) -> tuple[str, str]:
    """(state, what it holds) of an artifact folder without a manifest: ``running`` while a process
    holds its lock, else ``partial`` and how its last attempt ended (the attempts the store records)."""
    if not entry.name.endswith(PARTIAL):
        return "no manifest", "not written by a stage (no manifest, not .partial)"
    if lock_held(entry.with_name(entry.name.removesuffix(PARTIAL) + ".lock")):
        return "running", "another mtsql process is running this stage"
    history = read_attempts(entry / ATTEMPTS)[1] if (entry / ATTEMPTS).is_file() else []
    last = history[-1] if history else {}
    outcome = last.get("outcome", "running")
    if outcome == "running":
        ended = (
            "killed before it could record its end" if history else "stopped before it recorded an attempt"
        )
    else:
        ended = outcome
    error = (
        next(
            (
                line.removeprefix("=== ")
                for line in reversed(_log_lines(entry))
                if line.startswith("=== failed")
            ),
            None,
        )
        if outcome.startswith("failed")
        else None
    )
    attempts = f"{len(history)} attempt{'s' if len(history) != 1 else ''}, " if history else ""
    return "partial", f"{attempts}{error or ended}; rerun to resume"


def lock_held(path: Path) -> bool:
    """Whether a process holds the lock file of a stage (``Store.run`` holds it while the stage runs)."""
    try:
        with path.open("rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except FileNotFoundError:
        return False
    return False


def _log_lines(entry: Path) -> list[str]:
    path = entry / "log.txt"
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []


def status_table(folder: Path) -> Table:
    """The table of ``status_rows``; a folder that is no run (an empty table would say nothing) is a
    UsageError that says what it holds."""
    if not is_run_folder(folder):
        runs = sorted(p.name for p in folder.iterdir() if is_run_folder(p))
        holds = (
            f"it holds the runs {', '.join(runs)}: `mtsql status {folder / runs[0]}`"
            if runs
            else "a run holds <label>/<fingerprint>/manifest.json"
        )
        raise UsageError(f"{folder} holds no artifact, not a run folder ({holds})")
    table = Table(
        title=escape(str(folder)),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("artifact", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("fingerprint", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("wall", justify="right", no_wrap=True)
    table.add_column("what it holds")
    for row in status_rows(folder):
        table.add_row(*map(escape, row), style="dim" if row[1] == "older" else None)
    return table


def duration(seconds: float | None) -> str:
    """``42.1s``, ``3m05s`` or ``2h04m``; a dash when unknown."""
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def summary(manifest: dict) -> str:
    """A short account of a stage's metrics, by stage kind."""
    m, stage = manifest.get("metrics", {}), manifest["stage"]
    if stage == "evaluate":
        lines = [f"{m.get('mode')}, {m.get('memory')} memory"]
        for name, d in m.get("datasets", {}).items():
            lines.append(f"{name} EX {_pct(d.get('ex'))} EM {_pct(d.get('em'))} n={d.get('turns')}")
        return "\n".join(lines)
    if stage == "sample":
        return (
            f"{m.get('policy')} policy\n{m.get('count')} trajectories, {m.get('items')} items, "
            f"EX {_pct(m.get('ex'))}"
        )
    if stage == "reject":
        return f"solved {m.get('solved')}/{m.get('items')} items, kept {m.get('kept')}/{m.get('sampled')}"
    if stage == "sft":
        loss = m.get("train_loss")
        return f"{m.get('examples')} examples, train loss {'–' if loss is None else f'{loss:.3f}'}"
    if stage == "curriculum":
        sizes = ", ".join(str(row.get("total")) for row in (m.get("table") or {}).values())
        return f"pool {m.get('pool')} → stages of {sizes} turns"
    if stage == "rl":
        try:
            rl = RlStageResult.from_dict(m)
        except ValueError as exc:
            return f"{exc} (written by another mtsql): rerun its stage"
        text = f"{rl.steps} step{'' if rl.steps == 1 else 's'}"
        if rl.reward_last is not None:
            first = rl.reward_first
            text += (
                f", reward {'' if first is None or rl.steps == 1 else f'{first:.3g} → '}{rl.reward_last:.3g}"
            )
        if rl.steps_without_signal:
            text += f", {rl.steps_without_signal} without signal"
        return text
    return key_metrics(m)


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def key_metrics(metrics: dict, limit: int = 4) -> str:
    shown = [
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    return ", ".join(shown[:limit])
