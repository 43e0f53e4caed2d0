"""Report sections on the measures of ``mtsql.core.measures`` that each evaluation wrote into its metrics:
pass@k, verdict calibration, EX without vacuous golds, gold against predicted memory with error
propagation, and cost against accuracy (with EX plotted against ``env.max_messages`` and vote n)."""

from __future__ import annotations

from mtsql.app.report.markdown import number, table
from mtsql.app.report.runs import (
    PHASE_NAMES,
    datasets,
    decodings,
    evaluation_of,
    is_long_horizon,
    official_summary,
    phase_of,
    tally_rate,
)
from mtsql.app.report.stats import Rate
from mtsql.base.artifacts import Artifact
from mtsql.core.measures.verdicts import calibration_counts
from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import TURN_BUCKETS

COST_COLUMNS = {
    "generated_tokens": "generated tokens",
    "prompt_tokens": "prompt tokens",
    "sql_executions": "SQL executions",
    "messages": "messages",
    "wall_s": "wall s",
}


def blocks(evals: dict[str, Artifact], key: str):
    """(label, artifact, dataset, measure) of every evaluation and dataset whose metrics hold ``key``."""
    for label, art in evals.items():
        for dataset, block in evaluation_of(art).datasets.items():
            if getattr(block, key) is not None:
                yield label, art, dataset, getattr(block, key)


def _counts(tally: dict) -> Rate:
    return Rate(tally["correct"], tally["scored"])


def pass_at_k_section(evals: dict[str, Artifact]) -> list[str]:
    """pass@k next to greedy and vote@n EX, overall and per hardness and turn bucket with turns."""
    rows, ks = [], []
    for label, art, dataset, measured in blocks(evals, "pass_at_k"):
        ks = sorted(set(ks) | set(measured["ks"]))
        shown = {
            decoding: tally_rate(summary["execution"]["question"]).cell()
            for decoding, summary in decodings(art, dataset)
        }
        slices = (
            [("all", measured["all"])]
            + [(level, measured["by_hardness"][level]) for level in HARDNESS_LEVELS]
            + [(f"turn {b}", measured["by_turn"][b]) for b in TURN_BUCKETS if b in measured["by_turn"]]
        )
        for name, cell in slices:
            if not cell["turns"]:
                continue
            first = name == "all"
            passes = [number(cell["pass"].get(str(k))) if str(k) in cell["pass"] else None for k in ks]
            rows.append(
                [
                    label,
                    dataset,
                    name,
                    cell["turns"],
                    shown.get("greedy") if first else "",
                    next((v for d, v in shown.items() if d != "greedy"), None) if first else "",
                    *passes,
                ]
            )
    if not rows:
        return []
    return [
        "## pass@k",
        "",
        "From n samples of each turn at the sampling temperature (`evaluate.samples`): pass@k is the chance "
        "that at least one of k samples is right (EX 1), by the unbiased estimator 1 − C(n−c, k)/C(n, k) "
        "averaged over the turns whose samples the evaluator could score (a mean over turns, so no "
        "interval); greedy and vote@n EX are the official figures of the same evaluation (%, [95 % "
        "interval], k/n).",
        "",
        *table(
            ["evaluation", "dataset", "slice", "turns", "greedy EX", "vote EX", *(f"pass@{k}" for k in ks)],
            rows,
            numeric_from=3,
        ),
    ]


def calibration_section(evals: dict[str, Artifact]) -> list[str]:
    """The "calibration" table of the long-horizon evaluations (short mode has no verdicts): each verdict
    kind's 2x2 table against EX, its rates, and whether it was followed."""
    rows = []
    for label, art, dataset, measured in blocks(evals, "verdict_calibration"):
        for kind, cell in measured.items() if is_long_horizon(art) else ():
            t = cell["table"]
            a, b, c, d = t["pass"]["right"], t["pass"]["wrong"], t["no_pass"]["right"], t["no_pass"]["wrong"]
            rates = {name: Rate(*kn).cell() for name, kn in calibration_counts(a, b, c, d).items()}
            follow = {
                v: Rate(cell["followed"][v]["followed"], cell["followed"][v]["count"]).cell()
                for v in ("pass", "no_pass")
            }
            rows.append(
                [
                    label,
                    dataset,
                    kind,
                    a,
                    b,
                    c,
                    d,
                    cell["unscored"],
                    rates["precision_pass"],
                    rates["recall_pass"],
                    rates["precision_no_pass"],
                    rates["recall_no_pass"],
                    follow["pass"],
                    follow["no_pass"],
                ]
            )
    if not rows:
        return []
    return [
        "## Verdict calibration",
        "",
        "Every `<exec_verify>` and `<memory_verify>` verdict the agent gave, against whether the judged "
        "query (the executed one; for a memory check the latest executed one) is right by EX against the "
        "gold. Columns: pass said of a right / wrong query, no_pass said of a right / wrong query, verdicts "
        "on queries the evaluator cannot score; *precision pass* = right among pass, *recall pass* = pass "
        "among right, *precision no_pass* = wrong among no_pass, *recall no_pass* = no_pass among wrong. "
        "*Followed*: after pass the next query was the answer and the same query; after no_pass the next "
        "query differed (a revision); n = every verdict of that kind.",
        "",
        *table(
            [
                "evaluation",
                "dataset",
                "verdict",
                "pass/right",
                "pass/wrong",
                "no_pass/right",
                "no_pass/wrong",
                "unscored",
                "precision pass",
                "recall pass",
                "precision no_pass",
                "recall no_pass",
                "followed after pass",
                "followed after no_pass",
            ],
            rows,
            numeric_from=3,
        ),
    ]


def vacuous_section(evals: dict[str, Artifact]) -> list[str]:
    """The official EX next to EX on the turns whose gold result is not empty."""
    rows = [
        [label, dataset, official_rate(art, dataset).cell(), _counts(measured).cell(), measured["vacuous"]]
        for label, art, dataset, measured in blocks(evals, "ex_non_empty_gold")
    ]
    if not rows:
        return []
    return [
        "## Vacuous matches",
        "",
        "A gold whose result is empty (no rows, or only NULLs) is matched by any prediction that returns "
        "nothing. EX on the turns with a non-empty gold result, beside the official EX over the same "
        "counted turns (`mtsql data check` counts such golds; `reward.empty_match_credit: false` gives them "
        "no reward).",
        "",
        *table(
            ["evaluation", "dataset", "official EX", "EX, non-empty gold", "vacuous golds"],
            rows,
            numeric_from=2,
        ),
    ]


def official_rate(art: Artifact, dataset: str) -> Rate:
    """The official EX of an evaluation's headline decoding on one dataset."""
    return tally_rate(official_summary(art, dataset)["execution"]["question"])


def _difference(a: Rate, b: Rate) -> str | None:
    """``b − a`` in points with the 95 % interval of the difference (Newcombe), or None."""
    found = b.minus(a)
    return None if found is None else "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * x for x in found))


def predicted_memory(evals: dict[str, Artifact], phase: str) -> Artifact | None:
    """The newest long-horizon evaluation of ``phase`` with predicted memory."""
    found = [
        art
        for art in evals.values()
        if phase_of(art) == phase and is_long_horizon(art) and evaluation_of(art).memory == "predicted"
    ]
    return max(found, key=lambda art: art.manifest.get("created_at", ""), default=None)


def memory_section(evals: dict[str, Artifact], heads: dict[str, Artifact]) -> list[str]:
    """Gold against predicted memory per phase, and EX of a turn after a right or a wrong previous turn."""
    compared = []
    for phase, gold in heads.items():
        predicted = predicted_memory(evals, phase)
        for dataset in datasets(gold) if predicted is not None and is_long_horizon(gold) else []:
            if dataset in datasets(predicted):
                g, p = official_rate(gold, dataset), official_rate(predicted, dataset)
                compared.append([PHASE_NAMES[phase], dataset, g.cell(), p.cell(), _difference(g, p)])
    propagated = []
    for label, art, dataset, measured in blocks(evals, "propagation"):
        right, wrong = _counts(measured["after_right"]), _counts(measured["after_wrong"])
        if right.n or wrong.n:
            propagated.append(
                [
                    label,
                    evaluation_of(art).memory,
                    dataset,
                    right.cell(),
                    wrong.cell(),
                    _difference(wrong, right),
                ]
            )
    lines = []
    if compared:
        lines += [
            "## Gold against predicted memory",
            "",
            "The same model with the paper's oracle memory (earlier turns' gold SQL) and with its own "
            "earlier answers as memory, EX (%, [95 % interval], k/n); the difference is predicted − gold "
            "with the 95 % interval of the difference (Newcombe).",
            "",
            *table(
                ["phase", "dataset", "gold memory EX", "predicted memory EX", "difference (points)"],
                compared,
                numeric_from=2,
            ),
        ]
    if propagated:
        lines += [
            "## Error propagation",
            "",
            "EX of a turn when the previous turn of its dialogue was right against when it was wrong (turns "
            "whose own and previous EX are both scored). With predicted memory a wrong answer is also the "
            "next turn's memory; the difference is after right − after wrong, with its 95 % interval.",
            "",
            *table(
                [
                    "evaluation",
                    "memory",
                    "dataset",
                    "EX after a right turn",
                    "EX after a wrong turn",
                    "difference (points)",
                ],
                propagated,
                numeric_from=3,
            ),
        ]
    return lines


def cost_section(evals: dict[str, Artifact], plots: list[str]) -> list[str]:
    """Cost per turn next to EX, for every evaluation, dataset and decoding; then the linked plots."""
    rows = []
    for label, art in evals.items():
        result = evaluation_of(art)
        for dataset, block in result.datasets.items():
            costs = (
                {d: head["cost"] for d, head in block.decodings.items()}
                if block.decodings
                else {result.decoding: block.cost}
            )
            for decoding, summary in decodings(art, dataset):
                cost = costs.get(decoding)
                if cost:
                    rows.append(
                        [
                            label,
                            dataset,
                            decoding,
                            tally_rate(summary["execution"]["question"]).cell(),
                            *(_amount(cost[key]) for key in COST_COLUMNS),
                        ]
                    )
    billed = [
        [
            label,
            usage["model"],
            f"{usage['requests']:,}",
            f"{usage['prompt_tokens']:,}",
            f"{usage['completion_tokens']:,}",
            "-" if usage["cost_usd"] is None else f"{usage['cost_usd']:.4f}",
        ]
        for label, usage in ((label, evaluation_of(art).usage) for label, art in evals.items())
        if usage
    ]
    if not rows:
        return []
    lines = [
        "## Cost against accuracy",
        "",
        "Per turn: model tokens generated, prompt tokens (the context each model call read, summed over the "
        "turn's messages), SQL executions (exec_sql calls that ran, plus the remembered queries each "
        "memory_retrieve ran), assistant messages and the rollout's wall seconds (its share for the dataset: "
        "one rollout serves every dataset). vote@n counts all n samples.",
        "",
        *table(["evaluation", "dataset", "decoding", "EX", *COST_COLUMNS.values()], rows, numeric_from=3),
    ]
    if billed:
        lines += [
            "",
            "Chat-API evaluations: requests and tokens as the API counted them, and their cost at the "
            "prices the config gave (sample.chat.price_*_per_mtok; - where none was given).",
            "",
            *table(
                ["evaluation", "model", "requests", "prompt tokens", "completion tokens", "cost USD"],
                billed,
                numeric_from=2,
            ),
        ]
    for path in plots:
        lines += [f"![EX against cost](plots/{path})", ""]
    return lines


def _amount(value: float | None) -> str:
    """A per-turn amount: whole numbers from 100 on (1,600), else 3 significant digits."""
    return number(value) if value is None or abs(value) < 100 else f"{value:,.0f}"


def max_messages_rates(evals: dict[str, Artifact]) -> dict[str, dict[str, dict[int, Rate]]]:
    """Greedy EX by ``env.max_messages``, series of 2+ points:
    ``{dataset: {"phase, memory": {max_messages: Rate}}}``."""
    found: dict[str, dict[str, dict[int, Rate]]] = {}
    for art in evals.values():
        phase, result = phase_of(art), evaluation_of(art)
        if phase is None or not is_long_horizon(art):
            continue
        for dataset in datasets(art):
            summary = dict(decodings(art, dataset)).get("greedy")
            if summary is not None:
                series = found.setdefault(dataset, {}).setdefault(
                    f"{PHASE_NAMES[phase]}, {result.memory} memory", {}
                )
                series.setdefault(result.max_messages, tally_rate(summary["execution"]["question"]))
    return _with_several_points(found)


def vote_rates(evals: dict[str, Artifact]) -> dict[str, dict[str, dict[int, Rate]]]:
    """EX by vote n (greedy as n = 1), series of 2+ points:
    ``{dataset: {"phase, memory, max messages": {n: Rate}}}``."""
    found: dict[str, dict[str, dict[int, Rate]]] = {}
    for art in evals.values():
        phase = phase_of(art)
        if phase is None:
            continue
        result = evaluation_of(art)
        name = f"{PHASE_NAMES[phase]}, {result.memory} memory, {result.max_messages} messages"
        for dataset in datasets(art):
            for decoding, summary in decodings(art, dataset):
                n = 1 if decoding == "greedy" else int(decoding.removeprefix("vote@"))
                found.setdefault(dataset, {}).setdefault(name, {}).setdefault(
                    n, tally_rate(summary["execution"]["question"])
                )
    return _with_several_points(found)


def _with_several_points(found: dict) -> dict:
    kept = {
        d: {name: dict(sorted(points.items())) for name, points in series.items() if len(points) > 1}
        for d, series in found.items()
    }
    return {d: series for d, series in kept.items() if series}


def measure_rows(evals: dict[str, Artifact]) -> list[dict]:
    """One flat row per evaluation and dataset with every measure (the notebook's columns): official EX,
    pass@k, verdict precision / recall / accuracy / followed shares, EX without vacuous golds, EX after
    a right / wrong turn and the headline decoding's cost per turn (None where not measured)."""
    rows = []
    for label, art in evals.items():
        result = evaluation_of(art)
        for dataset, block in result.datasets.items():
            row = {
                "evaluation": label,
                "dataset": dataset,
                "mode": result.mode,
                "memory": result.memory,
                "max_messages": result.max_messages,
                "decoding": result.decoding,
                "ex": official_rate(art, dataset).value,
            }
            for k, value in (block.pass_at_k["all"]["pass"] if block.pass_at_k else {}).items():
                row[f"pass@{k}"] = value
            for kind, cell in block.verdict_calibration.items():
                for name in (
                    "precision_pass",
                    "recall_pass",
                    "precision_no_pass",
                    "recall_no_pass",
                    "accuracy",
                ):
                    row[f"{kind}_{name}"] = cell[name]
                for verdict, counts in cell["followed"].items():
                    row[f"{kind}_followed_after_{verdict}"] = Rate(counts["followed"], counts["count"]).value
            row["ex_non_empty_gold"] = _counts(block.ex_non_empty_gold).value
            row["vacuous_golds"] = block.ex_non_empty_gold["vacuous"]
            for key in ("after_right", "after_wrong"):
                row[f"ex_{key}"] = _counts(block.propagation[key]).value
            row |= {f"{key}_per_turn": value for key, value in block.cost.items()}
            rows.append(row)
    return rows
