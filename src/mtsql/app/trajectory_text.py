"""One trajectory as readable text: what the model was shown, what it wrote, what came back, how it scored.

    row, where = find_trajectory(run_folder, "eval-sft", dataset="cosql", item="cosql-dev-0003/1")
    print(render_trajectory(row))           # `mtsql show`; the report renders its examples the same way

Rows are the scored rollout records of ``trajectories.jsonl`` (sample artifacts) and
``<dataset>/trajectories.jsonl`` (evaluation artifacts). Only decoded text is shown, never token ids, and
characters a terminal would obey rather than show (NUL, BEL, CR, ESC, bidi overrides) are escaped.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from pathlib import Path

from mtsql.base.artifacts import Artifact, Store
from mtsql.base.errors import UsageError
from mtsql.core.agent.env import Step
from mtsql.core.trajectories import ScoredRow, read_rows

TRAJECTORIES = "trajectories.jsonl"
RULE_WIDTH = 78
SHOWN_UIDS = 8
HIDDEN_CATEGORIES = (
    "Cc",
    "Cf",
    "Zl",
    "Zp",
)  # control, format (bidi, zero-width), line and paragraph separators


def trajectory_files(artifact: Artifact) -> dict[str | None, Path]:
    """``{None: file}`` for a sample artifact, ``{dataset: file}`` for an evaluation; empty otherwise."""
    own = artifact.path / TRAJECTORIES
    if own.exists():
        return {None: own}
    return {path.parent.name: path for path in sorted(artifact.path.glob(f"*/{TRAJECTORIES}"))}


def find_trajectory(
    run: Path, label: str, *, dataset: str | None = None, item: str | None = None, sample: int | None = None
) -> tuple[ScoredRow, str]:
    """The row of ``item`` (default: the first) in artifact ``label`` of ``run``, and where it came from."""
    store = Store(run)
    artifact = store.latest(label)
    if artifact is None or not trajectory_files(artifact):
        with_rows = sorted({a.label for a in store.artifacts() if trajectory_files(a)})
        what = "no complete artifact" if artifact is None else "no trajectories in artifact"
        raise UsageError(
            f"{run}: {what} '{label}'; artifacts with trajectories: {', '.join(with_rows) or 'none'}"
        )
    files = trajectory_files(artifact)
    if None in files:
        path, rows = files[None], iter(read_rows(files[None]))
        if dataset is not None:
            rows = _of_dataset(rows, dataset, path)
    else:
        if dataset is not None and dataset not in files:
            raise UsageError(f"{label} has no dataset '{dataset}'; it has: {', '.join(files)}")
        path = files[dataset or next(iter(files))]
        rows = iter(read_rows(path))
    seen: list[str] = []
    for row in rows:
        if (item is None or row.uid == item) and (sample is None or row.sample == sample):
            return row, str(path)
        if row.uid not in seen:
            seen.append(row.uid)
    wanted = f"item '{item}'" if item else "any item"
    wanted += f" with sample {sample}" if sample is not None else ""
    listing = ", ".join(seen[:SHOWN_UIDS]) + (f", ... ({len(seen)} items)" if len(seen) > SHOWN_UIDS else "")
    raise UsageError(f"{path}: no trajectory of {wanted}; items there: {listing or 'none'}")


def _of_dataset(rows: Iterator[ScoredRow], dataset: str, path: Path) -> Iterator[ScoredRow]:
    present = set()
    for row in rows:
        present.add(row.turn.dataset)
        if row.turn.dataset == dataset:
            yield row
    if dataset not in present:
        raise UsageError(
            f"{path}: no trajectory of dataset '{dataset}'; it has: {', '.join(sorted(present))}"
        )


def render_trajectory(row: ScoredRow, *, limit: int | None = None, system: bool = True) -> str:
    """The whole episode as text; ``limit`` clips each message to that many characters, and
    ``system=False`` leaves out the system prompt (the same for every episode of a run)."""
    traj, turn = row.trajectory, row.turn
    lines = [
        f"{row.uid} · sample {row.sample} · {turn.dataset} {turn.split} · database {turn.db_id}"
        f" · turn {turn.turn_index + 1} · hardness {turn.hardness or 'unknown'}",
        f"mode {traj.mode}, memory {traj.memory_source}, at most {traj.max_messages} messages"
        + (f"; {row.generated_tokens} generated tokens" if row.generated_tokens else "")
        + (" (a generation hit its token limit)" if row.truncated else ""),
    ]
    for message in traj.messages[:2]:
        if message["role"] == "system" and not system:
            lines += ["", "── system ".ljust(RULE_WIDTH, "─"), "(the system prompt, left out here)"]
        else:
            lines += _section(message["role"], message["content"], limit)
    for step in traj.steps:
        lines += _section(f"assistant · message {step.index + 1}", step.text, limit)
        lines += [f"  » {note}" for note in _step_notes(step)]
        if step.observation is not None:
            source = f"tool · {step.tool}" if step.action == "tool_call" else "environment · protocol error"
            lines += _section(source, step.observation, limit)
    return visible("\n".join(lines + _outcome(row))) + "\n"


def visible(text: str) -> str:
    """``text`` with its control characters (newlines and tabs aside), format characters (bidi overrides
    such as U+202E, zero-width ones) and line separators written as escapes (``\\x07``, ``\\r``,
    ``\\u202e``): a terminal shows what the data holds instead of obeying it."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if ch not in "\n\t" and unicodedata.category(ch) in HIDDEN_CATEGORIES
        else ch
        for ch in text
    )


def _section(title: str, text: str, limit: int | None) -> list[str]:
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… [{len(text) - limit} more characters; `mtsql show` prints them]"
    return ["", f"── {title} ".ljust(RULE_WIDTH, "─"), text.rstrip("\n")]


def _step_notes(step: Step) -> list[str]:
    notes = []
    for tag, verdict in (("exec_verify", step.exec_verdict), ("memory_verify", step.memory_verdict)):
        if verdict is not None:
            notes.append(f"states <{tag}> {verdict}")
    if step.action == "invalid":
        notes.append(f"not a valid action: {step.invalid_reason}")
    elif step.action == "answer":
        notes.append(f"answers: {step.sql}")
    elif step.tool == "exec_sql":
        result = step.result_kind or "not run"
        if step.error_class:
            result += f" ({step.error_class})"
        elif step.row_count is not None:
            result += f", {_plural(step.row_count, 'row')}"
        notes.append(f"calls exec_sql: {step.sql}  → {result}; judged next: {step.verdict or 'never'}")
    else:
        checked = step.checked_sql or "no query run yet"
        notes.append(f"calls memory_retrieve on: {checked}; judged next: {step.verdict or 'never'}")
    notes += [f"protocol departure: {error}" for error in step.flow_errors]
    return notes


def _outcome(row: ScoredRow) -> list[str]:
    traj, reward = row.trajectory, row.reward
    valid = "protocol-valid" if traj.protocol_valid else "not protocol-valid"
    lines = [
        "",
        "── outcome ".ljust(RULE_WIDTH, "─"),
        f"finished by: {traj.finish_reason} ({valid}) after {_plural(len(traj.steps), 'message')}",
        f"final SQL: {traj.final_sql or '(none)'}",
        f"gold SQL:  {row.turn.gold_sql}",
        f"EX {_score(row.execution)} · EM {_score(row.exact)}",
    ]
    if reward:
        lines.append(
            "reward: "
            + ", ".join(
                f"{key} {reward[key]:.3g}"
                for key in ("score", "outcome", "process", "sqlr1")
                if key in reward
            )
        )
        lines.append(
            "  terms: "
            + ", ".join(
                f"{key} {value:.3g}"
                for key, value in reward.items()
                if key not in ("score", "outcome", "process", "sqlr1")
            )
        )
    return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _score(value) -> str:
    return "unscorable" if value is None else str(value)
