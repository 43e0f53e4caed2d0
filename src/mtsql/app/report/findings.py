"""The "Paper findings" section: each finding of MTSQL-R1 set against this run's evaluations.

The findings compare roles (``ROLES``: the base model, warm-start SFT round 1 and its last round, the
short-horizon SFT baseline, RL with the process reward and with the outcome reward); which model plays
each role is the experiment's to say, in the ``report.findings.models`` of the pipeline file that names the
section (``FindingsSettings``). Each role's evaluation is found by what its key says it scored
(``method_evaluations``) and named in the rows as the pipeline labels an evaluation of that model by
default, ``eval-<model>``. Each row compares, in the direction the paper claims, the rate it expects
higher with the other one, by the 95 % interval of their difference (``stats.Rate.minus``: Newcombe's
interval from the two Wilson intervals). The verdict follows one rule: **supported** when the interval
lies above 0, **contradicted** when it lies below 0, **not shown at this scale** when it holds 0. A row
whose evaluations the run lacks says which are missing.

For a difference in the paper's direction that the interval does not show, *n needed* is the number
of turns per group (of revisions, for the self-correction row) at which the same rates would clear 0:
the interval's lower half-width shrinks as 1/sqrt(n) (``stats.n_to_clear``); past the size of the whole
dev set (``report.findings.dev_turns``), the closing note says only more training can show it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

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

SUPPORTED, NOT_SHOWN, CONTRADICTED = "supported", "not shown at this scale", "contradicted"


@dataclass(frozen=True)
class FindingsModels:
    """The model of each role, as a pipeline file names models: ``base``, ``sft``, ``rl``, one round's
    ``sft-r<k>``, a variant's ``sft-<label>`` / ``rl-<label>``."""

    base: str | None = None
    sft_r1: str | None = None  # the first warm-start round, scored when a later round trained its own model
    sft: str | None = None  # warm-start SFT, its last round
    short: str | None = None  # the short-horizon SFT baseline, trained on the same items with the same budget
    rl: str | None = None  # RL with the process reward
    outcome: str | None = None  # RL from the same start with the outcome reward


ROLES = tuple(f.name for f in fields(FindingsModels))


@dataclass(frozen=True)
class FindingsSettings:
    """``report.findings`` of a pipeline file: ``models`` (every role's), ``dev_turns`` (dataset -> turns of
    its whole dev set: the most an evaluation can score)."""

    models: FindingsModels = field(default_factory=FindingsModels)
    dev_turns: dict[str, int] = field(default_factory=dict)

    def check(self, model_ref: re.Pattern) -> str | None:
        """What is wrong with these settings, None when nothing."""
        absent = [role for role in ROLES if getattr(self.models, role) is None]
        if absent:
            return f"models needs the model of every role ({', '.join(ROLES)}); missing: {', '.join(absent)}"
        wrong = next((role for role in ROLES if not model_ref.fullmatch(getattr(self.models, role))), None)
        if wrong:
            return (
                f"models.{wrong} '{getattr(self.models, wrong)}' is not a model reference (base, sft, rl, "
                "sft-r<k>, sft-<variant>, rl-<variant>)"
            )
        bad = next((name for name, n in self.dev_turns.items() if type(n) is not int or n < 1), None)
        return f"dev_turns.{bad} must be a whole number of turns, at least 1" if bad is not None else None

    def names(self) -> dict[str, str]:
        """Each role's name in the rows: the label a pipeline gives an evaluation of its model by default."""
        return {role: f"eval-{getattr(self.models, role)}" for role in ROLES}

    def key(self, role: str) -> tuple[str, str | None, int | None]:
        """The kind, variant and round of the model of ``role``, as an evaluation's key records them."""
        ref = getattr(self.models, role)
        kind, _, rest = ref.partition("-")
        round_ = re.fullmatch(r"r([1-9][0-9]*)", rest) if kind == "sft" else None
        return (kind, None, int(round_.group(1))) if round_ else (kind, rest or None, None)


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
        return (
            None
            if self.difference is None or self.verdict != NOT_SHOWN
            else n_to_clear(self.n, self.difference)
        )


def compare(
    claim: str, where: str, better_label: str, better: Rate, worse_label: str, worse: Rate
) -> Finding:
    """The row of the claim that ``better`` is above ``worse``."""
    measured = f"{better_label} {better.cell()} vs {worse_label} {worse.cell()}"
    difference = better.minus(worse)
    return Finding(
        claim,
        where,
        measured,
        difference,
        max(better.n, worse.n),
        "" if difference is not None else "nothing to compare (n = 0)",
    )


def _missing(claim: str, labels: list[str], evals: dict[str, Artifact]) -> Finding | None:
    absent = [label for label in labels if label not in evals]
    return Finding(claim, "–", "–", note=f"missing: {', '.join(absent)}") if absent else None


def _pair(
    claim: str, better: str, worse: str, evals: dict[str, Artifact], *, buckets: bool = False
) -> list[Finding]:
    """EX of evaluation ``better`` against ``worse`` per common dataset (and per turn and hardness)."""
    missing = _missing(claim, [better, worse], evals)
    if missing:
        return [missing]
    rows = []
    for dataset in (d for d in datasets(evals[better]) if d in datasets(evals[worse])):
        rows.append(
            compare(
                claim, dataset, better, ex_rate(evals[better], dataset), worse, ex_rate(evals[worse], dataset)
            )
        )
        if not buckets:
            continue
        cells = {label: official_summary(evals[label], dataset)["execution"] for label in (better, worse)}
        for key, names, prefix in (("by_turn", TURN_BUCKETS, "turn "), ("by_hardness", HARDNESS_LEVELS, "")):
            for name in names:
                a, b = (cells[label].get(key, {}).get(name) for label in (better, worse))
                if a and b and a["scored"] and b["scored"]:
                    rows.append(
                        compare(
                            claim, f"{dataset}, {prefix}{name}", better, tally_rate(a), worse, tally_rate(b)
                        )
                    )
    return rows


def _final(evals: dict[str, Artifact], names: dict[str, str]) -> str | None:
    """The last phase's evaluation: RL, else SFT."""
    return next((names[p] for p in ("rl", "sft") if names[p] in evals), None)


def _verification(evals: dict[str, Artifact], names: dict[str, str]) -> list[Finding]:
    claim = "Verified answers are right more often"
    label = _final(evals, names)
    if label is None:
        return [Finding(claim, "–", "–", note=f"missing: {names['rl']} or {names['sft']}")]
    rows = []
    for dataset in datasets(evals[label]):
        verified, others = verified_rates(trajectory_rows(evals[label], dataset))
        rows.append(compare(claim, f"{dataset} ({label})", "verified", verified, "other answers", others))
    return rows


def _self_correction(evals: dict[str, Artifact], names: dict[str, str]) -> list[Finding]:
    """Revisions after no_pass that changed correctness: wrong → right against right → wrong, as the
    share p of wrong → right against one half (difference 2p − 1, with the Wilson interval mapped alike)."""
    claim = "Self-correction turns wrong SQL right more often than right SQL wrong"
    label = _final(evals, names)
    if label is None:
        return [Finding(claim, "–", "–", note=f"missing: {names['rl']} or {names['sft']}")]
    rows = []
    for dataset in datasets(evals[label]):
        where = f"{dataset} ({label})"
        counts = revision_counts(evals[label], dataset)
        fixed, broke = counts["wrong_to_right"], counts["right_to_wrong"]
        share = Rate(fixed, fixed + broke)
        measured = f"wrong → right {fixed}, right → wrong {broke} (of {counts['revised']} revisions)"
        if not share.n:
            rows.append(
                Finding(claim, where, measured, note="nothing to compare (no revision changed correctness)")
            )
            continue
        low, high = share.interval
        rows.append(
            Finding(claim, where, measured, (2 * share.value - 1, 2 * low - 1, 2 * high - 1), share.n)
        )
    return rows


def _resolving(evals: dict[str, Artifact], names: dict[str, str]) -> list[Finding]:
    """Turns with a failed execution whose answer is right all the same: RL against SFT."""
    claim = "RL learns to resolve execution failures"
    missing = _missing(claim, [names["rl"], names["sft"]], evals)
    if missing:
        return [missing]
    rows = []
    for dataset in (d for d in datasets(evals[names["rl"]]) if d in datasets(evals[names["sft"]])):
        counts = {p: revision_counts(evals[names[p]], dataset) for p in ("rl", "sft")}
        rl, sft = (Rate(counts[p]["resolved"], counts[p]["with_error"]) for p in ("rl", "sft"))
        rows.append(compare(claim, dataset, names["rl"], rl, names["sft"], sft))
    return rows


def _round_two(
    arts: dict[str, Artifact], evals: dict[str, Artifact], names: dict[str, str], first: int
) -> list[Finding]:
    """The round after the ``sft_r1`` role's round ``first`` against it. When that round kept nothing it
    trained no model, and its evaluation is the same work as round ``first``'s (served under the ``sft``
    role's name): say so rather than call it missing."""
    claim = "A self-taught round improves on the round before"
    kept_nothing = _trained_nothing(arts, first + 1)
    if names["sft_r1"] not in evals and kept_nothing is not None:
        return [
            Finding(
                claim,
                "–",
                "–",
                note=f"round {first + 1} kept {kept_nothing.metrics.get('kept', 0)} "
                f"trajectories and trained no model: {names['sft']} scores the round-{first} model",
            )
        ]
    return _pair(claim, names["sft"], names["sft_r1"], evals)


def method_evaluations(arts: dict[str, Artifact], settings: FindingsSettings) -> dict[str, Artifact]:
    """The evaluation of each role (by its name in the rows, ``FindingsSettings.names``), chosen by key: the
    kind, variant and round of the model it scored, with gold memory, then as ``runs.preferred`` ranks them;
    ``sft_r1`` only when the ``sft`` role's evaluation scored a later round."""
    plain = [art for art in evaluations(arts).values() if evaluation_of(art).memory == "gold"]

    def pick(phase: str, variant: str | None, round_: int | None = None) -> Artifact | None:
        found = [
            art
            for art in plain
            if art.key.phase == phase and art.key.model_variant == variant and round_ in (None, art.key.round)
        ]
        return max(found, key=preferred, default=None)

    chosen = {role: pick(*settings.key(role)) for role in ROLES}
    first = settings.key("sft_r1")[2] or 0
    if chosen["sft"] is None or (chosen["sft"].key.round or 0) <= first:
        chosen["sft_r1"] = None
    names = settings.names()
    return {names[role]: art for role, art in chosen.items() if art is not None}


def _trained_nothing(arts: dict[str, Artifact], k: int) -> Artifact | None:
    """The main chain's reject artifact of round ``k`` when that round trained no sft model, else None."""
    rounds = {(art.key.stage, art.key.round) for art in arts.values() if art.key.variant is None}
    return (
        next((art for art in arts.values() if art.key == ArtifactKey("reject", k)), None)
        if ("sft", k) not in rounds
        else None
    )


def findings(arts: dict[str, Artifact], settings: FindingsSettings) -> list[Finding]:
    """Every row of the section, in the order of the paper's findings."""
    evals, n = method_evaluations(arts, settings), settings.names()
    long = n["sft_r1"] if n["sft_r1"] in evals else n["sft"]
    first_round = (
        _pair("Round 1 of warm-start SFT improves on the base model", n["sft_r1"], n["base"], evals)
        if n["sft_r1"] in evals
        else []
    )  # a one-round run: the sft role is round 1
    return [
        *_pair("Warm-start SFT improves on the base model", n["sft"], n["base"], evals),
        *first_round,
        *_round_two(arts, evals, n, settings.key("sft_r1")[2] or 1),
        *_pair("RL improves on warm-start SFT", n["rl"], n["sft"], evals),
        *_pair("Long horizon beats short horizon on EX", long, n["short"], evals, buckets=True),
        *_pair("The process reward beats the outcome reward", n["rl"], n["outcome"], evals),
        *_verification(evals, n),
        *_self_correction(evals, n),
        *_resolving(evals, n),
    ]


def findings_section(arts: dict[str, Artifact], settings: FindingsSettings) -> list[str]:
    """The table of ``findings`` and a closing note on what the rows not shown would need."""
    rows = findings(arts, settings)
    if not any(row.difference is not None for row in rows):
        return []  # not a method run: none of the comparisons has its evaluations
    body = [
        [row.claim, row.slice, row.measured, _points(row.difference), row.verdict, row.needed] for row in rows
    ]
    lines = [
        "## Paper findings",
        "",
        "Each finding of MTSQL-R1 against this run: the rate the paper expects higher first, then the other "
        "(EX, %, [95 % interval], k/n), their difference in points with its 95 % interval (Newcombe), and "
        f"the verdict: *{SUPPORTED}* when the interval lies above 0, *{CONTRADICTED}* when it lies below, "
        f"*{NOT_SHOWN}* when it holds 0. Long against short horizon compares the short-horizon SFT model "
        "with the long-horizon one trained on the same items with the same budget (round 1, else the last "
        "round). Verification, self-correction and execution failures are counted in the last phase's "
        "evaluation (RL, else SFT). *n needed*: turns per evaluation (for the self-correction row, "
        "revisions that changed correctness) at which the same rates would clear 0.",
        "",
        *table(
            ["finding", "slice", "measured", "difference (points)", "verdict", "n needed"],
            body,
            numeric_from=3,
        ),
    ]
    return lines + _closing(rows, evals_pace(arts), settings.dev_turns)


def _points(difference: tuple[float, float, float] | None) -> str | None:
    return None if difference is None else "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * x for x in difference))


def evals_pace(arts: dict[str, Artifact]) -> float | None:
    """Seconds per evaluated turn over every evaluation of the run (wall time, server starts included)."""
    evals = evaluations(arts).values()
    turns = sum(block.turns for art in evals for block in evaluation_of(art).datasets.values())
    seconds = sum(art.manifest.get("duration_s") or 0.0 for art in evals)
    return seconds / turns if turns and seconds else None


def _closing(rows: list[Finding], pace: float | None, dev_turns: dict[str, int]) -> list[str]:
    counts = {v: sum(row.verdict == v for row in rows) for v in (SUPPORTED, NOT_SHOWN, CONTRADICTED)}
    lines = [
        f"Rows: {counts[SUPPORTED]} supported, {counts[NOT_SHOWN]} not shown at this scale, "
        f"{counts[CONTRADICTED]} contradicted, {len(rows) - sum(counts.values())} without a comparison.",
        "",
    ]
    trends = [row for row in rows if row.needed is not None]
    for row in trends:
        dataset = row.slice.split(",")[0].split(" ")[0]
        whole = dev_turns.get(dataset)
        beyond = (
            f"; more than the {whole:,} turns of {dataset} dev: only a larger difference (more training) "
            "can show it"
            if whole and row.needed > whole
            else ""
        )
        lines.append(
            f"* {row.claim} ({row.slice}): the measured {_points(row.difference)} would clear 0 with about "
            f"{row.needed:,} per evaluation (this run: {row.n}){beyond}."
        )
    flat = sum(row.verdict == NOT_SHOWN and row.needed is None for row in rows)
    if flat:
        lines.append(
            f"* Rows not shown that measured no difference in the paper's direction: {flat}; no budget "
            "follows from them."
        )
    if trends and pace:
        lines.append(
            f"* At this run's pace ({pace:.2f} s per evaluated turn, all its evaluations together, on "
            "its machine), an evaluation of N turns takes about N x that."
        )
    return [*lines, ""]
