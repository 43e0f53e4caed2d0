"""`mtsql report RUN`: a markdown report with PNG plots, built only from a run's manifests and metrics.

Writes ``<run>/report/report.md`` and ``<run>/report/plots/*.png`` (replaced as a whole, atomically).
Evaluations are the artifacts labelled ``eval-*``; their order base → sft → rl follows the label.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mtsql.artifacts import Artifact, Store
from mtsql.errors import UsageError
from mtsql.paper import PAPER_BREAKDOWN_4B, PAPER_RESULTS
from mtsql.sql.hardness import HARDNESS_LEVELS
from mtsql.sql.metrics import TURN_BUCKETS

PHASES = ("base", "sft", "rl")


def latest_artifacts(run: Path) -> dict[str, Artifact]:
    """The newest complete artifact of each label (what ``latest`` points to)."""
    found: dict[str, Artifact] = {}
    for artifact in Store(run).artifacts():
        found[artifact.label] = artifact  # artifacts() is oldest first
    return found


def eval_order(label: str) -> tuple[int, str]:
    phase = label.removeprefix("eval-").split("-")[0]
    return (PHASES.index(phase) if phase in PHASES else len(PHASES), label)


def build_report(run: Path) -> Path:
    """Build the report of ``run``; returns the path of report.md."""
    if not Path(run).is_dir():
        raise UsageError(f"no run folder {run}")
    arts = latest_artifacts(Path(run))
    if not arts:
        raise UsageError(f"{run}: no complete artifacts to report on")
    evals = {label: a for label, a in sorted(arts.items(), key=lambda kv: eval_order(kv[0])) if label.startswith("eval-")}
    rl_curve = _rl_curve(arts)
    out = Path(run) / "report"
    tmp = Path(run) / ".report.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "plots").mkdir(parents=True)
    lines = [f"# mtsql report: {Path(run).name}", ""]
    lines += _eval_tables(evals)
    plots = []
    main = {label: a for label, a in evals.items() if label.removeprefix("eval-") in PHASES}
    if main:
        plots.append(_breakdown_plot(main, "by_hardness", HARDNESS_LEVELS, tmp / "plots" / "ex_by_hardness.png", "hardness"))
        plots.append(_breakdown_plot(main, "by_turn", TURN_BUCKETS, tmp / "plots" / "ex_by_turn.png", "turn"))
        plots.append(_protocol_plot(main, tmp / "plots" / "protocol.png"))
    if rl_curve:
        plots.append(_curve_plot(rl_curve, tmp / "plots" / "rl_curves.png"))
    lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    lines += _sft_rounds(arts) + _paper_table(evals, arts) + _cost_table(arts)
    (tmp / "report.md").write_text("\n".join(lines) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out / "report.md"


def _datasets(artifact: Artifact) -> dict[str, dict]:
    return artifact.metrics.get("datasets", {})


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _eval_tables(evals: dict[str, Artifact]) -> list[str]:
    lines = ["## Evaluation (official metrics, % of dev turns)", "",
             "| evaluation | mode | memory | dataset | turns | EX | EM | interaction EX | interaction EM | unscorable EX |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, art in evals.items():
        m = art.metrics
        for name, d in _datasets(art).items():
            lines.append(f"| {label} | {m.get('mode')} | {m.get('memory')} | {name} | {d.get('turns')} | {_pct(d.get('ex'))} | "
                         f"{_pct(d.get('em'))} | {_pct(d.get('interaction_ex'))} | {_pct(d.get('interaction_em'))} | "
                         f"{d.get('unscorable_ex', 0)} |")
    lines += ["", "Protocol ability (long-horizon evaluations):", "",
              "| evaluation | dataset | protocol-valid | tool calls / turn | verification accuracy | self-correction rate | self-correction success |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, art in evals.items():
        for name, d in _datasets(art).items():
            p = d.get("protocol", {})
            lines.append(f"| {label} | {name} | {_pct(p.get('protocol_valid'))} | {p.get('tool_calls_per_turn', 0):.2f} | "
                         f"{_pct(p.get('verification_accuracy'))} | {_pct(p.get('self_correction_rate'))} | "
                         f"{_pct(p.get('self_correction_success'))} |")
    return lines + [""]


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(ncols: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4), squeeze=False)
    return plt, fig, axes[0]


def _breakdown_plot(evals: dict[str, Artifact], key: str, buckets: tuple[str, ...], path: Path, what: str) -> Path:
    names = sorted({n for a in evals.values() for n in _datasets(a)})
    plt, fig, axes = _figure(len(names))
    width = 0.8 / max(1, len(evals))
    for ax, name in zip(axes, names, strict=True):
        for i, (label, art) in enumerate(evals.items()):
            block = _datasets(art).get(name, {}).get(key, {})
            values = [100 * block.get(b, {}).get("ex", 0.0) for b in buckets]
            ax.bar([x + i * width for x in range(len(buckets))], values, width, label=label.removeprefix("eval-"))
        ax.set_xticks([x + width * (len(evals) - 1) / 2 for x in range(len(buckets))], buckets)
        ax.set_xlabel(what)
        ax.set_ylabel("execution accuracy (%)")
        ax.set_title(f"{name} dev: EX by {what}")
        ax.set_ylim(0, 100)
        ax.legend()
    return _save(plt, fig, path)


def _protocol_plot(evals: dict[str, Artifact], path: Path) -> Path:
    keys = ("protocol_valid", "verification_accuracy", "self_correction_success")
    plt, fig, axes = _figure(1)
    ax = axes[0]
    stages = list(evals)
    for key in keys:
        values = []
        for art in evals.values():
            blocks = [d.get("protocol", {}).get(key) for d in _datasets(art).values()]
            blocks = [b for b in blocks if b is not None]
            values.append(100 * sum(blocks) / len(blocks) if blocks else 0.0)
        ax.plot(stages, values, marker="o", label=key.replace("_", " "))
    ax.set_xlabel("training stage")
    ax.set_ylabel("% of turns (mean over eval datasets)")
    ax.set_title("protocol ability")
    ax.set_ylim(0, 100)
    ax.legend()
    return _save(plt, fig, path)


def _rl_curve(arts: dict[str, Artifact]) -> list[dict]:
    rows = []
    for label in sorted(name for name in arts if name.startswith("rl-c")):
        path = arts[label].path / "metrics.jsonl"
        if path.exists():
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for i, row in enumerate(rows, 1):
        row["global_step"] = i
    return rows


def _curve_plot(rows: list[dict], path: Path) -> Path:
    plt, fig, axes = _figure(2)
    steps = [r["global_step"] for r in rows]
    for ax, key, label in ((axes[0], "reward_mean", "mean reward"), (axes[1], "response_length", "response length (tokens)")):
        ax.plot(steps, [r[key] for r in rows], marker=".")
        for boundary in [r["global_step"] for r in rows if r["step"] == 1][1:]:
            ax.axvline(boundary - 0.5, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("RL step (dashed: next curriculum stage)")
        ax.set_ylabel(label)
        ax.set_title(f"GRPO {label}")
    return _save(plt, fig, path)


def _sft_rounds(arts: dict[str, Artifact]) -> list[str]:
    rounds = sorted((a.manifest.get("round") or 0, a) for name, a in arts.items() if name.startswith("sft-r"))
    if not rounds:
        return []
    lines = ["## Self-taught SFT rounds", "", "| round | kept examples | train loss | over cutoff | wall s |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for k, art in rounds:
        m = art.metrics
        loss = m.get("train_loss")
        lines.append(f"| {k} | {m.get('examples')} | {'–' if loss is None else f'{loss:.4f}'} | {m.get('over_cutoff')} | "
                     f"{art.manifest.get('duration_s')} |")
    return lines + [""]


def _paper_table(evals: dict[str, Artifact], arts: dict[str, Artifact]) -> list[str]:
    model = next((a.metrics.get("model_name") for a in evals.values() if a.metrics.get("model_name")), "this run's model")
    lines = ["## Against the paper (EX / EM, %, full dev sets)", "",
             f"This run: {model}; its numbers are on the eval slices of its profile, not comparable in size.", "",
             "| model | recipe | dataset | EX | EM |", "| --- | --- | --- | ---: | ---: |"]
    for (paper_model, recipe, dataset), (ex, em) in PAPER_RESULTS.items():
        lines.append(f"| {paper_model} (paper) | {recipe} | {dataset} | {ex:.1f} | {em:.1f} |")
    for label, art in evals.items():
        for name, d in _datasets(art).items():
            lines.append(f"| {model} (this run, {d.get('turns')} turns) | {label} | {name} | {_pct(d.get('ex'))} | {_pct(d.get('em'))} |")
    lines += ["", "Paper, Qwen3-4B EX by hardness and turn (base → warm-start → RL):", ""]
    for kind, rows in PAPER_BREAKDOWN_4B.items():
        lines.append(f"* {kind}: " + "; ".join(f"{k} {' → '.join(f'{v:.1f}' for v in vals)}" for k, vals in rows.items()))
    return lines + [""]


def _cost_table(arts: dict[str, Artifact]) -> list[str]:
    lines = ["## Cost of each stage", "", "| artifact | wall time (s) | generated tokens | fingerprint |", "| --- | ---: | ---: | --- |"]
    for label, art in sorted(arts.items(), key=lambda kv: kv[1].manifest.get("created_at", "")):
        m = art.metrics
        tokens = m.get("generated_tokens") or sum(d.get("generated_tokens", 0) for d in m.get("datasets", {}).values())
        lines.append(f"| {label} | {art.manifest.get('duration_s')} | {tokens or '–'} | {art.fingerprint[:12]} |")
    return lines + [""]
