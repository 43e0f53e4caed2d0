"""Report sections on training: the self-taught SFT rounds, the curriculum and the GRPO steps."""

from __future__ import annotations

from mtsql.app.report.markdown import number, table
from mtsql.app.report.rl_change import reward_change_line
from mtsql.app.report.runs import numbered, rl_steps, stage_config
from mtsql.app.report.stats import Rate
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.core.results import RlStageResult, TrainingStep

STEP_ROWS = 12  # at most this many step rows per curriculum stage; the rest stay in metrics.jsonl
STEP_COLUMNS = {
    "reward_mean": "reward mean",
    "reward_std": "reward std",
    "pg_loss": "pg_loss",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "response_length": "response length (tokens)",
}
CURVES = {
    "reward_mean": ("mean reward (whisker: ± std over the step's samples)", None),
    "groups_with_signal": ("share of groups with signal", (-0.05, 1.05)),
    "response_length": ("mean response length (tokens)", None),
}
BEHAVIOUR = {
    "tool_calls_per_turn": ("tool calls per turn", (0, None)),
    "memory_calls_per_turn": ("memory calls per turn", (0, None)),
    "self_correction_rate": ("self-correction rate", (-0.05, 1.05)),
    "invalid_message_rate": ("invalid-message rate", (-0.05, 1.05)),
    "messages_per_turn": ("assistant messages per turn", (0, None)),
}


def share(value: float | None, n: int) -> Rate | None:
    """A logged share of ``n`` things back as a count (the metrics store shares, not counts)."""
    return None if value is None or not n else Rate(round(value * n), n)


def sft_rounds_section(arts: dict[str, Artifact]) -> list[str]:
    """One row per round: what sampling produced, what reject sampling kept, what SFT trained on."""
    samples, rejects, sfts = numbered(arts, "sample"), numbered(arts, "reject"), numbered(arts, "sft")
    rounds = sorted(set(samples) | set(rejects) | set(sfts))
    if not rounds:
        return []
    rows = []
    for k in rounds:
        s = samples[k].metrics if k in samples else {}
        r = rejects[k].metrics if k in rejects else {}
        t = sfts[k].metrics if k in sfts else {}
        solved = Rate(r["solved"], r["items"]) if "items" in r else None
        held = t.get("heldout") or {}
        heldout = share(held.get("ex"), held.get("count", 0))
        rows.append(
            [
                k,
                s.get("policy"),
                s.get("count"),
                solved.cell() if solved else None,
                r.get("kept"),
                t.get("examples"),
                t.get("over_cutoff"),
                number(t.get("train_loss"), 4),
                t.get("steps"),
                heldout.cell() if heldout else None,
            ]
        )
    return [
        "## Self-taught SFT rounds",
        "",
        "Round k samples the pool (round 1 with the profile's first-round policy, later rounds with the "
        "previous model), keeps correct and diverse trajectories, and fine-tunes on them. *Solved*: items "
        "with at least one correct sample (%, [95 % interval], k/n).",
        "",
        *table(
            [
                "round",
                "policy",
                "trajectories",
                "items solved",
                "kept",
                "SFT examples",
                "over cutoff",
                "train loss",
                "optimizer steps",
                "held-out EX",
            ],
            rows,
            numeric_from=2,
        ),
    ]


def curriculum_section(arts: dict[str, Artifact]) -> list[str]:
    """Turns per curriculum stage, by hardness and by turn position (the curriculum's ``table``)."""
    art = arts.get("curriculum")
    if art is None or not art.metrics.get("table"):
        return []
    cfg = stage_config(art).get("curriculum", {})
    groups = cfg.get("stages") or []
    stage_table = art.metrics["table"]
    columns = list(next(iter(stage_table.values())))
    rows = [
        [name, ", ".join(groups[i]) if i < len(groups) else None, *(row[c] for c in columns)]
        for i, (name, row) in enumerate(stage_table.items())
    ]
    dropped = art.metrics.get("dropped") or {}
    note = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in dropped.items() if v) or "none"
    return [
        "## Curriculum",
        "",
        f"The RL pool of {art.metrics.get('pool')} turns split by {cfg.get('by', '?')} into stages trained "
        f"in order; turns per stage (dropped: {note}).",
        "",
        *table(["stage", cfg.get("by", "labels"), *columns], rows, numeric_from=2),
    ]


def rl_stages(arts: dict[str, Artifact], variant: str | None = None) -> dict[str, list[TrainingStep]]:
    """``{'stage k (labels)': step rows}`` of every RL stage of ``variant`` that logged steps, in curriculum
    order."""
    groups = (
        stage_config(arts["curriculum"]).get("curriculum", {}).get("stages", [])
        if "curriculum" in arts
        else []
    )
    out = {}
    for k, art in numbered(arts, "rl", variant).items():
        steps = rl_steps(art)
        if steps:
            names = ", ".join(groups[k - 1]) if k - 1 < len(groups) else ""
            out[f"stage {k}" + (f" ({names})" if names else "")] = steps
    return out


def rl_section(
    arts: dict[str, Artifact], figures: dict[str | None, tuple[str | None, str | None]]
) -> list[str]:
    """The GRPO curves, the agent's behaviour per step and a table of the logged step metrics, for each RL
    variant (``figures``: variant -> (curve plot, behaviour plot), the main chain first)."""
    chains = {variant: numbered(arts, "rl", variant) for variant in figures}
    chains = {variant: stages for variant, stages in chains.items() if stages}
    if not chains:
        return []
    lines = [
        "## Curriculum GRPO",
        "",
        "One curve per curriculum stage; steps are numbered on through the stages, and each stage starts "
        "from the previous stage's model. A group is the samples of one question; it has *signal* when "
        "their rewards differ (equal rewards give no policy gradient). EX here is over the step's "
        "training samples; *engine* is the one that trained the stage (verl's main_ppo or mtsql's local "
        "GRPO).",
        "",
    ]
    if any(behaviour for _, behaviour in figures.values()):
        lines += [
            "The behaviour plots follow the agent over the steps, over each step's training samples "
            "(`trajectories.step_behaviour`): tool and memory calls per turn, the share of turns with a "
            "self-correction (a query revised after its no_pass verdict), the share of assistant messages "
            "that could not be parsed, and messages per turn. A collapse of tool calls shows there.",
            "",
        ]
    steps = {art.label: rl_steps(art) for stages in chains.values() for art in stages.values()}
    rows = []
    for variant, stages in chains.items():
        plot, behaviour_plot = figures[variant]
        name = ArtifactKey("rl", variant=variant).label
        family = stage_config(next(iter(stages.values()))).get("reward", {}).get("family")
        if len(chains) > 1:
            lines += [f"### {name}" + (f" ({family} reward)" if family else ""), ""]
        if plot:
            lines += [f"![GRPO curves, {name}](plots/{plot})", ""]
        if behaviour_plot:
            lines += [f"![Agent behaviour per GRPO step, {name}](plots/{behaviour_plot})", ""]
        for art in stages.values():
            rl_cfg = stage_config(art).get("rl", {})
            groups = rl_cfg.get("batch_size", 0)
            samples = groups * rl_cfg.get("n", 0)
            for row in thin(steps[art.label], STEP_ROWS):
                signal = share(row.groups_with_signal, groups)
                ex = share(row.ex, samples)
                rows.append(
                    [
                        art.label,
                        art.metrics.get("engine"),
                        row.step,
                        *(number(getattr(row, key)) for key in STEP_COLUMNS),
                        signal.cell() if signal else None,
                        ex.cell() if ex else None,
                    ]
                )
    if any(len(logged) > STEP_ROWS for logged in steps.values()):
        lines += [
            f"At most {STEP_ROWS} evenly spaced steps per stage are listed; every step is in the stage's "
            "`metrics.jsonl`.",
            "",
        ]
    changes = [
        line
        for variant, stages in chains.items()
        if (line := reward_change_line(ArtifactKey("rl", variant=variant).label, stages))
    ]
    if changes:
        lines += [
            "Reward change over each chain (`rl_change`: first quarter of the steps against the last):",
            "",
            *changes,
            "",
        ]
    if len(chains) > 1:
        lines += ["### Steps of every chain", ""]
    return (
        lines
        + table(["stage", "engine", "step", *STEP_COLUMNS.values(), "groups with signal", "EX"], rows)
        + _validation_lines(steps, chains)
    )


def _validation_lines(
    steps: dict[str, list[TrainingStep]], chains: dict[str | None, dict[int, Artifact]]
) -> list[str]:
    """The dev validations of each stage (``rl.val_every``; ``steps``: its logged rows by label) and the
    step whose model the stage kept."""
    lines = []
    for art in (art for stages in chains.values() for art in stages.values()):
        validated = [row for row in steps[art.label] if row.val_reward_mean is not None]
        if validated:
            shown = "; ".join(
                f"step {row.step}: reward {row.val_reward_mean:.3f}"
                + (f", EX {100 * row.val_ex:.1f} %" if row.val_ex is not None else "")
                for row in validated
            )
            lines.append(f"* {art.label} dev validation: {shown}; model kept: {_kept_step(art)}")
    return ["", *lines, ""] if lines else []


def _kept_step(art: Artifact) -> str:
    """The step whose model an rl stage kept, from its typed result (an artifact whose metrics another
    mtsql wrote in another shape says so instead of failing the report)."""
    try:
        return f"step {RlStageResult.from_dict(art.metrics).picked_step}"
    except ValueError:
        return "not recorded (metrics in another shape)"


def thin(rows: list, limit: int) -> list:
    """At most ``limit`` rows, evenly spaced, always the first and the last."""
    if len(rows) <= limit:
        return rows
    picks = sorted({round(i * (len(rows) - 1) / (limit - 1)) for i in range(limit)})
    return [rows[i] for i in picks]
