"""The "Paper findings" section: each finding of MTSQL-R1 set against this run's evaluations.

The evaluations are those ``pipelines/method.yaml`` makes, found by what their keys say they scored
(``method_evaluations``; named in the rows as that pipeline labels them, ``EVALS``). Each row compares, in the
direction the paper claims, the rate it expects higher with the other one, by the 95 % interval of
their difference (``stats.Rate.minus``: Newcombe's interval from the two Wilson intervals). The
verdict follows one rule: **supported** when the interval lies above 0, **contradicted** when it lies
below 0, **not shown at this scale** when it holds 0. A row whose evaluations the run lacks says
which are missing.

For a difference in the paper's direction that the interval does not show, *n needed* is the number
of turns per group (of revisions, for the self-correction row) at which the same rates would clear 0:
the interval's lower half-width shrinks as 1/sqrt(n) (``stats.n_to_clear``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mtsql.app.report.evaluation import ex_rate, trajectory_rows
from mtsql.app.report.markdown import table
from mtsql.app.report.runs import (
    datasets,
    evaluation_of,
    evaluations,
    official_summary,
    preferred,
    tally_rate,
)
from mtsql.app.report.self_correction import revision_counts, verified_rates
from mtsql.app.report.stats import Rate, n_to_clear
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import TURN_BUCKETS

EVALS = {"base": "eval-base", "sft_r1": "eval-sft-r1", "sft": "eval-sft", "short": "eval-sft-short",
         "rl": "eval-rl", "outcome": "eval-rl-outcome"}  # each role's name in the rows
ROLES = {"base": ("base", None), "sft": ("sft", None), "short": ("sft", "short"), "rl": ("rl", None),
         "outcome": ("rl", "outcome")}  # role -> (the kind of model scored, its pipeline variant)
SUPPORTED, NOT_SHOWN, CONTRADICTED = "supported", "not shown at this scale", "contradicted"
DEV_TURNS = {"cosql": 1007, "sparc": 1203, "spider": 1034}  # whole dev sets: the most an evaluation can score


@dataclass(frozen=True)
class Finding:
    """One row: ``difference`` is (value, low, high) of the favoured rate minus the other, None when
    there is nothing to compare (``note`` says why)."""

    claim: str
    slice: str
    measured: str
    difference: tuple[float, float, float] | None = None
    n: int = 0  # the size the interval's width comes from (the larger group)
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.difference is None:
            return self.note
        _, low, high = self.difference
        return SUPPORTED if low > 0 else CONTRADICTED if high < 0 else NOT_SHOWN

    @property
    def needed(self) -> int | None:
        """Turns per group at which the same difference would clear 0 (None: shown, or not in the paper's
        direction)."""
        return None if self.difference is None or self.verdict != NOT_SHOWN else n_to_clear(self.n, self.difference)


def compare(claim: str, where: str, better_label: str, better: Rate, worse_label: str, worse: Rate) -> Finding:
    """The row of the claim that ``better`` is above ``worse``."""
    measured = f"{better_label} {better.cell()} vs {worse_label} {worse.cell()}"
    difference = better.minus(worse)
    return Finding(claim, where, measured, difference, max(better.n, worse.n),
                   "" if difference is not None else "nothing to compare (n = 0)")


def _missing(claim: str, labels: list[str], evals: dict[str, Artifact]) -> Finding | None:
    absent = [label for label in labels if label not in evals]
    return Finding(claim, "–", "–", note=f"missing: {', '.join(absent)}") if absent else None


def _pair(claim: str, better: str, worse: str, evals: dict[str, Artifact], *, buckets: bool = False) -> list[Finding]:
    """EX of evaluation ``better`` against ``worse`` per common dataset (and per turn and hardness)."""
    missing = _missing(claim, [better, worse], evals)
    if missing:
        return [missing]
    rows = []
    for dataset in (d for d in datasets(evals[better]) if d in datasets(evals[worse])):
        rows.append(compare(claim, dataset, better, ex_rate(evals[better], dataset), worse,
                            ex_rate(evals[worse], dataset)))
        if not buckets:
            continue
        cells = {label: official_summary(evals[label], dataset)["execution"] for label in (better, worse)}
        for key, names, prefix in (("by_turn", TURN_BUCKETS, "turn "), ("by_hardness", HARDNESS_LEVELS, "")):
            for name in names:
                a, b = (cells[label].get(key, {}).get(name) for label in (better, worse))
                if a and b and a["scored"] and b["scored"]:
                    rows.append(compare(claim, f"{dataset}, {prefix}{name}", better, tally_rate(a), worse,
                                        tally_rate(b)))
    return rows


def _final(evals: dict[str, Artifact]) -> str | None:
    """The last phase's evaluation: RL, else SFT."""
    return next((EVALS[p] for p in ("rl", "sft") if EVALS[p] in evals), None)


def _verification(evals: dict[str, Artifact]) -> list[Finding]:
    claim = "Verified answers are right more often"
    label = _final(evals)
    if label is None:
        return [Finding(claim, "–", "–", note=f"missing: {EVALS['rl']} or {EVALS['sft']}")]
    rows = []
    for dataset in datasets(evals[label]):
        verified, others = verified_rates(trajectory_rows(evals[label], dataset))
        rows.append(compare(claim, f"{dataset} ({label})", "verified", verified, "other answers", others))
    return rows


def _self_correction(evals: dict[str, Artifact]) -> list[Finding]:
    """Revisions after no_pass that changed correctness: wrong → right against right → wrong, as the
    share p of wrong → right against one half (difference 2p − 1, with the Wilson interval mapped alike)."""
    claim = "Self-correction turns wrong SQL right more often than right SQL wrong"
    label = _final(evals)
    if label is None:
        return [Finding(claim, "–", "–", note=f"missing: {EVALS['rl']} or {EVALS['sft']}")]
    rows = []
    for dataset in datasets(evals[label]):
        where = f"{dataset} ({label})"
        counts = revision_counts(evals[label], dataset)
        fixed, broke = counts["wrong_to_right"], counts["right_to_wrong"]
        share = Rate(fixed, fixed + broke)
        measured = f"wrong → right {fixed}, right → wrong {broke} (of {counts['revised']} revisions)"
        if not share.n:
            rows.append(Finding(claim, where, measured, note="nothing to compare (no revision changed correctness)"))
            continue
        low, high = share.interval
        rows.append(Finding(claim, where, measured, (2 * share.value - 1, 2 * low - 1, 2 * high - 1), share.n))
    return rows


def _resolving(evals: dict[str, Artifact]) -> list[Finding]:
    """Turns with a failed execution whose answer is right all the same: RL against SFT."""
    claim = "RL learns to resolve execution failures"
    missing = _missing(claim, [EVALS["rl"], EVALS["sft"]], evals)
    if missing:
        return [missing]
    rows = []
    for dataset in (d for d in datasets(evals[EVALS["rl"]]) if d in datasets(evals[EVALS["sft"]])):
        counts = {p: revision_counts(evals[EVALS[p]], dataset) for p in ("rl", "sft")}
        rl, sft = (Rate(counts[p]["resolved"], counts[p]["with_error"]) for p in ("rl", "sft"))
        rows.append(compare(claim, dataset, EVALS["rl"], rl, EVALS["sft"], sft))
    return rows


def _round_two(arts: dict[str, Artifact], evals: dict[str, Artifact]) -> list[Finding]:
    """Round 2 against round 1. When round 2 kept nothing it trained no model, and its evaluation is
    the same work as round 1's (served under ``eval-sft``): say so rather than call it missing."""
    claim = "A self-taught round improves on the round before"
    kept_nothing = _trained_nothing(arts, 2)
    if EVALS["sft_r1"] not in evals and kept_nothing is not None:
        return [Finding(claim, "–", "–", note=f"round 2 kept {kept_nothing.metrics.get('kept', 0)} "
                        f"trajectories and trained no model: {EVALS['sft']} scores the round-1 model")]
    return _pair(claim, EVALS["sft"], EVALS["sft_r1"], evals)


def method_evaluations(arts: dict[str, Artifact]) -> dict[str, Artifact]:
    """The evaluation of each role of ``EVALS`` (by its name there), chosen by key: the kind and variant of
    the model it scored, with gold memory, then as ``runs.preferred`` ranks them; ``sft_r1`` is the
    evaluation of the main chain's round 1 when a later round has one of its own."""
    plain = [art for art in evaluations(arts).values() if evaluation_of(art).memory == "gold"]

    def pick(phase: str, variant: str | None, round_: int | None = None) -> Artifact | None:
        found = [art for art in plain if art.key.phase == phase and art.key.model_variant == variant
                 and round_ in (None, art.key.round)]
        return max(found, key=preferred, default=None)

    chosen = {role: pick(*what) for role, what in ROLES.items()}
    if chosen["sft"] is not None and (chosen["sft"].key.round or 0) > 1:
        chosen["sft_r1"] = pick("sft", None, 1)
    return {EVALS[role]: art for role, art in chosen.items() if art is not None}


def _trained_nothing(arts: dict[str, Artifact], k: int) -> Artifact | None:
    """The main chain's reject artifact of round ``k`` when that round trained no sft model, else None."""
    rounds = {(art.key.stage, art.key.round) for art in arts.values() if art.key.variant is None}
    return next((art for art in arts.values() if art.key == ArtifactKey("reject", k)), None) \
        if ("sft", k) not in rounds else None


def findings(arts: dict[str, Artifact]) -> list[Finding]:
    """Every row of the section, in the order of the paper's findings."""
    evals = method_evaluations(arts)
    long = EVALS["sft_r1"] if EVALS["sft_r1"] in evals else EVALS["sft"]
    first_round = _pair("Round 1 of warm-start SFT improves on the base model", EVALS["sft_r1"], EVALS["base"],
                        evals) if EVALS["sft_r1"] in evals else []  # a one-round run: eval-sft is round 1
    return [*_pair("Warm-start SFT improves on the base model", EVALS["sft"], EVALS["base"], evals),
            *first_round, *_round_two(arts, evals),
            *_pair("RL improves on warm-start SFT", EVALS["rl"], EVALS["sft"], evals),
            *_pair("Long horizon beats short horizon on EX", long, EVALS["short"], evals, buckets=True),
            *_pair("The process reward beats the outcome reward", EVALS["rl"], EVALS["outcome"], evals),
            *_verification(evals), *_self_correction(evals), *_resolving(evals)]


def findings_section(arts: dict[str, Artifact]) -> list[str]:
    """The table of ``findings`` and a closing note on what the rows not shown would need."""
    rows = findings(arts)
    if not any(row.difference is not None for row in rows):
        return []  # not a method run: none of the comparisons has its evaluations
    body = [[row.claim, row.slice, row.measured, _points(row.difference), row.verdict, row.needed] for row in rows]
    lines = ["## Paper findings", "",
             "Each finding of MTSQL-R1 against this run: the rate the paper expects higher first, then the other "
             "(EX, %, [95 % interval], k/n), their difference in points with its 95 % interval (Newcombe), and "
             f"the verdict: *{SUPPORTED}* when the interval lies above 0, *{CONTRADICTED}* when it lies below, "
             f"*{NOT_SHOWN}* when it holds 0. Long against short horizon compares the short-horizon SFT model "
             "with the long-horizon one trained on the same items with the same budget (round 1, else the last "
             "round). Verification, self-correction and execution failures are counted in the last phase's "
             "evaluation (RL, else SFT). *n needed*: turns per evaluation (for the self-correction row, "
             "revisions that changed correctness) at which the same rates would clear 0.", "",
             *table(["finding", "slice", "measured", "difference (points)", "verdict", "n needed"], body,
                    numeric_from=3)]
    return lines + _closing(rows, evals_pace(arts))


def _points(difference: tuple[float, float, float] | None) -> str | None:
    return None if difference is None else "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * x for x in difference))


def evals_pace(arts: dict[str, Artifact]) -> float | None:
    """Seconds per evaluated turn over every evaluation of the run (wall time, server starts included)."""
    evals = evaluations(arts).values()
    turns = sum(block.turns for art in evals for block in evaluation_of(art).datasets.values())
    seconds = sum(art.manifest.get("duration_s") or 0.0 for art in evals)
    return seconds / turns if turns and seconds else None


def _closing(rows: list[Finding], pace: float | None) -> list[str]:
    counts = {v: sum(row.verdict == v for row in rows) for v in (SUPPORTED, NOT_SHOWN, CONTRADICTED)}
    lines = [f"Rows: {counts[SUPPORTED]} supported, {counts[NOT_SHOWN]} not shown at this scale, "
             f"{counts[CONTRADICTED]} contradicted, {len(rows) - sum(counts.values())} without a comparison.", ""]
    trends = [row for row in rows if row.needed is not None]
    for row in trends:
        dataset = row.slice.split(",")[0].split(" ")[0]
        whole = DEV_TURNS.get(dataset)
        beyond = (f"; more than the {whole:,} turns of {dataset} dev: only a larger difference (more training) "
                  "can show it" if whole and row.needed > whole else "")
        lines.append(f"* {row.claim} ({row.slice}): the measured {_points(row.difference)} would clear 0 with about "
                     f"{row.needed:,} per evaluation (this run: {row.n}){beyond}.")
    flat = sum(row.verdict == NOT_SHOWN and row.needed is None for row in rows)
    if flat:
        lines.append(f"* Rows not shown that measured no difference in the paper's direction: {flat}; no budget "
                     "follows from them.")
    if trends and pace:
        lines.append(f"* At this run's pace ({pace:.2f} s per evaluated turn, all its evaluations together, on "
                     "its machine), an evaluation of N turns takes about N x that.")
    return [*lines, ""]
