"""The papers' published numbers, for the report's section on them (kept apart from this run's).

MTSQL-R1 (SParC / CoSQL dev, docs/method.md): (model, recipe, dataset) -> (EX, EM), in percent.
SQL-R1 (single-turn, execution accuracy in percent): model -> {benchmark: EX}.
"""

from __future__ import annotations

from mtsql.app.report.markdown import table
from mtsql.core.results import EvaluationResult

PAPER_RESULTS: dict[tuple[str, str, str], tuple[float, float]] = {
    ("Qwen3-4B", "untrained, long-horizon", "cosql"): (60.3, 45.6),
    ("Qwen3-4B", "untrained, long-horizon", "sparc"): (57.6, 44.1),
    ("Qwen3-4B", "short-horizon SFT", "cosql"): (73.1, 64.8),
    ("Qwen3-4B", "short-horizon SFT", "sparc"): (78.3, 71.5),
    ("Qwen3-4B", "warm-start SFT round 3", "cosql"): (75.2, 63.0),
    ("Qwen3-4B", "warm-start SFT round 3", "sparc"): (75.1, 65.6),
    ("Qwen3-4B", "+ curriculum RL (outcome+process)", "cosql"): (79.9, 65.2),
    ("Qwen3-4B", "+ curriculum RL (outcome+process)", "sparc"): (79.0, 68.7),
    ("Qwen3-1.7B", "short-horizon SFT", "cosql"): (68.1, 59.3),
    ("Qwen3-1.7B", "short-horizon SFT", "sparc"): (74.3, 69.2),
    ("Qwen3-1.7B", "+ curriculum RL (outcome+process)", "cosql"): (77.3, 63.5),
    ("Qwen3-1.7B", "+ curriculum RL (outcome+process)", "sparc"): (76.2, 66.1),
}

# Qwen3-4B EX by hardness and by turn: base → warm-start SFT → RL (the paper's figures).
PAPER_BREAKDOWN_4B = {
    "hardness": {
        "easy": (80.8, 89.0, 89.9),
        "medium": (56.9, 74.4, 77.5),
        "hard": (52.1, 75.5, 77.3),
        "extra": (26.2, 43.0, 52.3),
    },
    "turn": {
        "1": (62.1, 78.8, 81.2),
        "2": (67.0, 80.4, 82.8),
        "3": (63.9, 74.6, 76.6),
        "4": (57.0, 73.7, 78.9),
        ">4": (53.5, 73.2, 76.1),
    },
}


SQL_R1_RESULTS: dict[str, dict[str, float]] = {
    "Qwen2.5-Coder-7B (base)": {"Spider dev": 77.4, "Spider test": 79.4, "BIRD dev": 58.2},
    "SQL-R1-7B (Qwen2.5-Coder-7B + GRPO)": {"Spider dev": 87.6, "Spider test": 88.7, "BIRD dev": 66.6},
    "SQL-R1-3B (Qwen2.5-Coder-3B + GRPO)": {"Spider dev": 78.1},
}


RELEASE_SETTINGS = (
    "release protocol (exec_sql(code), memory_retrieve(code)), gold memory, greedy, 8,000 "
    "response tokens per turn, prompts over 4,000 tokens dropped (verl validation)"
)


def published_section(datasets: set[str], settings: dict[str, EvaluationResult] | None = None) -> list[str]:
    """The papers' own numbers for the datasets this run evaluates: MTSQL-R1 for SParC / CoSQL,
    SQL-R1 for Spider. ``settings``: each evaluation's metrics (by label), whose protocol,
    memory, decoding and budgets are listed next to the paper's, so that numbers obtained under
    different settings are not compared unknowingly."""
    lines = []
    if datasets & {"sparc", "cosql"}:
        lines += _mtsql_r1() + _settings(settings or {})
    if "spider" in datasets:
        benchmarks = ["Spider dev", "Spider test", "BIRD dev"]
        rows = [
            [model, *(f"{scores[b]:.1f}" if b in scores else "–" for b in benchmarks)]
            for model, scores in SQL_R1_RESULTS.items()
        ]
        lines += [
            "## Published numbers from the SQL-R1 paper (not this run)",
            "",
            "Execution accuracy in % as the paper reports it (its final answers by self-consistency voting "
            "over 8 samples); this run's model, training data and budgets differ.",
            "",
            *table(["model", *benchmarks], rows, numeric_from=1),
        ]
    return lines


def _mtsql_r1() -> list[str]:
    rows = [
        [model, recipe, dataset, f"{ex:.1f}", f"{em:.1f}"]
        for (model, recipe, dataset), (ex, em) in PAPER_RESULTS.items()
    ]
    lines = [
        "## Published numbers from the MTSQL-R1 paper (not this run)",
        "",
        "EX / EM in % on the full SParC and CoSQL dev sets, as the paper reports them, for scale: this run's "
        "model, data slices and budgets differ, so its numbers above are not comparable to these.",
        "",
        *table(["model", "recipe", "dataset", "EX", "EM"], rows, numeric_from=3),
        "The paper's Qwen3-4B EX by hardness and by turn (base → warm-start SFT → RL):",
        "",
    ]
    for kind, buckets in PAPER_BREAKDOWN_4B.items():
        lines.append(
            f"* {kind}: "
            + "; ".join(f"{k} {' → '.join(f'{v:.1f}' for v in values)}" for k, values in buckets.items())
        )
    return lines + [""]


def _settings(evals: dict[str, EvaluationResult]) -> list[str]:
    lines = [
        "Settings of the published numbers (the release's evaluation scripts, docs/paper.md): "
        f"{RELEASE_SETTINGS}. This run's evaluations:",
        "",
    ]
    for label, result in evals.items():
        budgets = result.budgets
        per_turn, cap = budgets.max_response_tokens, budgets.observation_chars
        parts = [
            f"{result.protocol} protocol",
            f"{result.mode} mode",
            f"{result.memory} memory",
            result.decoding,
            f"{budgets.max_new_tokens} tokens per message",
            f"{per_turn:,} per turn" if per_turn else "no cap per turn",
            f"observations cut at {cap:,} characters" if cap else "observations uncut",
        ]
        for name, block in result.datasets.items():
            kept = block.prompt_filter
            if kept:
                without = kept["kept"] or {}
                parts.append(
                    f"{name}: {kept['dropped']} of {kept['turns']} turns have a prompt over "
                    f"{kept['limit']:,} tokens; without them EX {_pct(without.get('ex'))} / EM "
                    f"{_pct(without.get('em'))} (with them {_pct(block.ex)} / {_pct(block.em)})"
                )
        lines.append(f"* {label}: " + "; ".join(parts))
    return lines + [""]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"
