"""Report sections on evaluations: the headline comparison, the table of every evaluation, the
breakdowns for the plots, the agent's protocol behaviour and example trajectories."""

from __future__ import annotations

from mtsql.app.report.behaviour import behaviour, verdict_changes
from mtsql.app.report.markdown import table
from mtsql.app.report.runs import (
    PHASE_NAMES,
    datasets,
    decodings,
    evaluation_of,
    is_long_horizon,
    official_summary,
    tally_rate,
)
from mtsql.app.report.stats import Rate
from mtsql.app.trajectory_text import render_trajectory, trajectory_files
from mtsql.base.artifacts import Artifact
from mtsql.core.measures.revisions import is_recovery
from mtsql.core.trajectories import ScoredRow, read_rows

TOO_FEW = 30  # below this many scored turns an interval is too wide to show most differences
EXAMPLE_CHARS = 1500


def ex_rate(art: Artifact, dataset: str) -> Rate:
    return tally_rate(official_summary(art, dataset)["execution"]["question"])


def summary_section(heads: dict[str, Artifact]) -> list[str]:
    """Plain sentences: EX of base → SFT → RL per dataset, and what the intervals allow one to say."""
    lines = ["## Summary", ""]
    if not heads:
        return lines + ["No long-horizon evaluation with gold memory in this run: nothing to compare.", ""]
    names = list(dict.fromkeys(name for art in heads.values() for name in datasets(art)))
    for dataset in names:
        rates = {p: ex_rate(art, dataset) for p, art in heads.items() if dataset in datasets(art)}
        shown = " → ".join(f"{PHASE_NAMES[p]} {r.cell()}" for p, r in rates.items())
        lines.append(f"* **{dataset}** execution accuracy (%, [95 % interval], correct/scored): {shown}.")
        pairs = [(a, b) for i, a in enumerate(rates) for b in list(rates)[i + 1 :]]
        for a, b in pairs:
            lines.append(f"  * {_compare(PHASE_NAMES[a], rates[a], PHASE_NAMES[b], rates[b])}")
        recovered = [
            (PHASE_NAMES[p], *recoveries(trajectory_rows(art, dataset)))
            for p, art in heads.items()
            if dataset in datasets(art) and is_long_horizon(art)
        ]
        if recovered:
            lines.append(
                "  * Failed executions recovered from (a turn whose `exec_sql` failed, then a later "
                "query ran and the answer was right): "
                + "; ".join(f"{name} {k} of {n}" for name, k, n in recovered)
                + "."
            )
        smallest = min(r.n for r in rates.values())
        if smallest < TOO_FEW:
            lines.append(
                f"  * With as few as {smallest} scored turns the intervals are wide: this run cannot show "
                "differences smaller than they are; it shows the pipeline working, not the method's size "
                "of effect."
            )
    return lines + [""]


def _compare(a_name: str, a: Rate, b_name: str, b: Rate) -> str:
    difference = b.minus(a)
    if difference is None:
        return f"{a_name} and {b_name}: nothing to compare (no scored turns)."
    value, low, high = (100 * x for x in difference)
    shown = f"{b_name} − {a_name} = {value:+.1f} points [{low:+.1f}, {high:+.1f}]"
    if b.above(a):
        return f"{shown}: {b_name} is above {a_name} beyond the 95 % interval of the difference."
    if a.above(b):
        return f"{shown}: {b_name} is below {a_name} beyond the 95 % interval of the difference."
    return f"{shown}: the interval holds 0, so this run shows no difference between {a_name} and {b_name}."


def evaluation_table(evals: dict[str, Artifact]) -> list[str]:
    """Every evaluation, one row per dataset: question and interaction EX / EM with intervals."""
    rows = []
    for label, art in evals.items():
        result = evaluation_of(art)
        for dataset in datasets(art):
            for decoding, summary in decodings(art, dataset):
                ex, em = summary["execution"], summary["exact"]  # BIRD defines no EM: None
                joint = [
                    tally_rate(t["interaction"]).cell() if t and "interaction" in t else "–" for t in (ex, em)
                ]
                rows.append(
                    [
                        label,
                        result.mode,
                        result.memory,
                        decoding,
                        dataset,
                        summary["turns"],
                        tally_rate(ex["question"]).cell(),
                        tally_rate(em["question"]).cell() if em else "–",
                        *joint,
                        ex["question"]["unscorable"],
                    ]
                )
    return [
        "## Evaluations",
        "",
        "Official metrics on the profile's dev slices, in % with the 95 % Wilson interval and "
        "correct/scored. EX is execution match (test-suite semantics unless the profile says otherwise), EM "
        "exact set match; an interaction counts when all its turns do (– for single-turn datasets). Turns "
        "the evaluator cannot score (last column) are left out of the rate, as the official programs do. "
        "With self-consistency voting (decoding vote@n) the same model's greedy decoding is the row above "
        "it.",
        "",
        *table(
            [
                "evaluation",
                "mode",
                "memory",
                "decoding",
                "dataset",
                "turns",
                "EX",
                "EM",
                "interaction EX",
                "interaction EM",
                "unscorable",
            ],
            rows,
            numeric_from=5,
        ),
    ]


def breakdown_rates(heads: dict[str, Artifact], key: str) -> dict[str, dict[str, dict[str, Rate]]]:
    """``{dataset: {phase: {bucket: EX rate}}}`` for the plots (``key``: by_hardness or by_turn)."""
    out: dict[str, dict[str, dict[str, Rate]]] = {}
    for phase, art in heads.items():
        for dataset in datasets(art):
            cells = official_summary(art, dataset)["execution"].get(key)
            if cells:
                out.setdefault(dataset, {})[PHASE_NAMES[phase]] = {b: tally_rate(t) for b, t in cells.items()}
    return out


def recoveries(rows: list[ScoredRow]) -> tuple[int, int]:
    """(turns recovered from a failed exec_sql, turns with a failed exec_sql) among trajectory rows
    (``measures.revisions.is_recovery``)."""
    failed = [r for r in rows if any(s.result_kind == "error" for s in r.trajectory.tool_steps("exec_sql"))]
    return sum(is_recovery(r.trajectory, r.execution) for r in failed), len(failed)


def trajectory_rows(art: Artifact, dataset: str) -> list[ScoredRow]:
    path = trajectory_files(art).get(dataset)
    return read_rows(path) if path else []


def behaviour_section(evals: dict[str, Artifact]) -> list[str]:
    """Protocol rates of the long-horizon evaluations (short-mode runs have no tools to use)."""
    rows = []
    for label, art in evals.items():
        if not is_long_horizon(art):
            continue
        for dataset in datasets(art):
            found = trajectory_rows(art, dataset)
            if found:
                rates = behaviour(found)
                rows.append(
                    [
                        label,
                        dataset,
                        len(found),
                        *(
                            rates[k].cell()
                            for k in (
                                "answered",
                                "protocol_valid",
                                "memory_checked",
                                "changed_after_no_pass",
                                "changed_after_pass",
                            )
                        ),
                    ]
                )
    if not rows:
        return []
    return [
        "## Agent behaviour (long-horizon evaluations)",
        "",
        "Counted over every trajectory an evaluation kept (with voting, every sample). *Memory checked*: a "
        "turn that has earlier turns calls `memory_retrieve` at least once (n = such turns). *Query changed "
        "after no_pass / pass*: after an `exec_sql` result or a memory check got that verdict, the next "
        "query the agent proposed (its next `exec_sql` or its answer) differs from the judged one (the "
        "executed query; for a memory check the latest executed one), ignoring case, spacing and a final "
        "semicolon (n = such verdicts followed by a query). A change after no_pass is a self-correction.",
        "",
        *table(
            [
                "evaluation",
                "dataset",
                "trajectories",
                "answered",
                "protocol-valid",
                "memory checked",
                "query changed after no_pass",
                "query changed after pass",
            ],
            rows,
            numeric_from=2,
        ),
    ]


def _example_source(evals: dict[str, Artifact]) -> tuple[str, list[ScoredRow]] | None:
    """(label, rows of every dataset) of the last long-horizon evaluation that kept trajectories."""
    for label, art in reversed(evals.items()):
        rows = [row for dataset in datasets(art) for row in trajectory_rows(art, dataset)]
        if is_long_horizon(art) and rows:
            return label, rows
    return None


def example_section(evals: dict[str, Artifact], run_name: str) -> list[str]:
    """Three trajectories of the last long-horizon evaluation: a self-correction, a right answer, a miss."""
    source = _example_source(evals)
    if source is None:
        return []
    label, rows = source
    lines = [
        "## Example trajectories",
        "",
        f"From `{label}`, as the model saw and wrote them (long messages are clipped; `mtsql show {run_name} "
        f"{label} --dataset DATASET --item UID` prints one whole; the system prompt, the same for all, is "
        "shown once).",
        "",
    ]
    for i, (why, row) in enumerate(pick_examples(rows)):
        text = render_trajectory(row, limit=EXAMPLE_CHARS, system=i == 0).rstrip()
        lines += [f"### {row.uid} ({row.turn.dataset}): {why}", "", "```text", text, "```", ""]
    return lines


def pick_examples(rows: list[ScoredRow], count: int = 3) -> list[tuple[str, ScoredRow]]:
    """Up to ``count`` distinct items: a self-correction, a right answer, a miss (then any others)."""

    def corrected(row):
        return any(verdict_changes(row.trajectory)["no_pass"])

    wanted = (
        ("changed its query after a no_pass verdict", corrected),
        ("answered correctly (EX 1)", lambda r: r.execution == 1),
        ("a miss (EX 0 or no answer)", lambda r: r.execution != 1),
    )
    picks: list[tuple[str, ScoredRow]] = []
    for why, test in wanted:
        row = next((r for r in rows if test(r) and r.uid not in {p.uid for _, p in picks}), None)
        if row is not None:
            picks.append((why, row))
    for row in sorted(rows, key=lambda r: not r.trajectory.protocol_valid):  # protocol-valid ones first
        if len(picks) >= count:
            break
        if row.uid not in {p.uid for _, p in picks}:
            valid = "protocol-valid" if row.trajectory.protocol_valid else "off protocol"
            picks.append((f"another item ({'EX 1' if row.execution == 1 else 'a miss'}, {valid})", row))
    return picks[:count]
