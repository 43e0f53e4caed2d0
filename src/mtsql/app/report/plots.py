"""The report's PNG plots: EX by hardness and by turn with their n, and the GRPO curves per stage.

A bar is EX with its 95 % Wilson interval as a whisker and ``correct/scored`` above it, so 0/12
(a measured zero, with a whisker) looks different from a bucket without turns (no bar, "n=0").
"""

from __future__ import annotations

from pathlib import Path

from mtsql.app.report.stats import Rate
from mtsql.core.results import TrainingStep

DPI = 110
NO_ITEMS_HEIGHT = 6  # the hatched stub that marks a bucket without turns
COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def _figure(ncols: int, width: float = 6.0, height: float = 4.2):
    """A figure outside pyplot (no GUI backend, no global state): it is freed with its last reference."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height))
    return fig, fig.subplots(1, ncols, squeeze=False)


def save(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def breakdown_figure(rates: dict[str, dict[str, dict[str, Rate]]], buckets: tuple[str, ...], what: str):
    """``rates[dataset][series][bucket]``: one panel per dataset, one bar per series in each bucket."""
    fig, axes = _figure(len(rates))
    for ax, (dataset, series) in zip(axes[0], rates.items(), strict=True):
        width = 0.8 / max(1, len(series))
        for i, (name, by_bucket) in enumerate(series.items()):
            for j, bucket in enumerate(buckets):
                x = j - 0.4 + width * (i + 0.5)
                _bar(
                    ax,
                    x,
                    width,
                    by_bucket.get(bucket, Rate(0, 0)),
                    COLOURS[i % len(COLOURS)],
                    label=name if j == 0 else None,
                )
        ax.set_xticks(range(len(buckets)), buckets)
        ax.set_xlim(-0.6, len(buckets) - 0.4)
        ax.set_ylim(0, 112)
        ax.set_yticks(range(0, 101, 20))
        ax.set_xlabel(what)
        ax.set_ylabel("execution accuracy (%)")
        ax.set_title(
            f"{dataset}: EX by {what}\n(whisker: 95% Wilson interval; label: correct/scored)", fontsize=10
        )
        _no_items_key(ax)
    return fig


def _bar(ax, x: float, width: float, rate: Rate, colour: str, label: str | None) -> None:
    if not rate.n:
        ax.bar(x, NO_ITEMS_HEIGHT, width, color="none", edgecolor="#999999", hatch="///", linewidth=0.6)
        ax.text(
            x,
            NO_ITEMS_HEIGHT + 1.5,
            "n=0",
            ha="center",
            va="bottom",
            fontsize=7,
            color="#666666",
            rotation=90,
        )
        if label:
            ax.bar(x, 0, width, color=colour, label=label)
        return
    low, high = rate.interval
    value = 100 * rate.value
    ax.bar(x, value, width, color=colour, edgecolor=colour, linewidth=1.5, label=label)
    ax.errorbar(
        x,
        value,
        yerr=[[max(0.0, value - 100 * low)], [max(0.0, 100 * high - value)]],
        color="black",
        capsize=2,
        linewidth=0.8,
        marker="o",
        markersize=3,
    )
    ax.text(x, 100 * high + 1.5, f"{rate.k}/{rate.n}", ha="center", va="bottom", fontsize=7, rotation=90)


def _no_items_key(ax) -> None:
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor="none", edgecolor="#999999", hatch="///", label="no turns (n=0)"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )  # below the axes: inside, it would hide the labels of high whiskers


def rl_figure(stages: dict[str, list[TrainingStep]], metrics: dict[str, tuple[str, tuple | None]]):
    """One curve per curriculum stage, steps numbered on through the stages; a panel per metric
    (``metrics``: key -> (title, y limits or None))."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = _figure(len(metrics), width=5.0)
    offset = 0
    spans = []
    for i, (name, rows) in enumerate(stages.items()):
        steps = [offset + row.step for row in rows]
        colour = COLOURS[i % len(COLOURS)]
        for ax, key in zip(axes[0], metrics, strict=True):
            points = [
                (s, getattr(row, key))
                for s, row in zip(steps, rows, strict=True)
                if getattr(row, key) is not None
            ]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            spread = [getattr(row, f"{key.removesuffix('_mean')}_std", None) for row in rows]
            if key.endswith("_mean") and None not in spread:
                ax.errorbar(xs, ys, yerr=spread, marker="o", color=colour, capsize=3, label=name)
            else:
                ax.plot(xs, ys, marker="o", color=colour, label=name)
        if steps:
            spans.append((offset + 0.5, max(steps) + 0.5))
            offset = max(steps)
    for ax, (title, limits) in zip(axes[0], metrics.values(), strict=True):
        for k, (start, end) in enumerate(spans):
            if k % 2:
                ax.axvspan(start, end, color="#eeeeee", zorder=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(0.5, offset + 0.5)
        ax.set_xlabel("GRPO step (curriculum stages in order)")
        ax.set_title(title, fontsize=10)
        if limits:
            ax.set_ylim(*limits)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this engine", ha="center", va="center", transform=ax.transAxes)
    return fig


def curve_figure(rates: dict[str, dict[str, dict[int, Rate]]], xlabel: str):
    """``rates[dataset][series][x]``: one panel per dataset, EX against ``x`` with 95 % Wilson whiskers and
    ``correct/scored`` at each point, one line per series."""
    fig, axes = _figure(len(rates), width=5.0)
    for ax, (dataset, series) in zip(axes[0], rates.items(), strict=True):
        xs_all = sorted({x for points in series.values() for x in points})
        for i, (name, points) in enumerate(series.items()):
            xs = [x for x in points if points[x].n]
            ys = [100 * points[x].value for x in xs]
            low = [y - 100 * points[x].interval[0] for x, y in zip(xs, ys, strict=True)]
            high = [100 * points[x].interval[1] - y for x, y in zip(xs, ys, strict=True)]
            ax.errorbar(
                xs, ys, yerr=[low, high], marker="o", capsize=3, color=COLOURS[i % len(COLOURS)], label=name
            )
            for x, y in zip(xs, ys, strict=True):
                ax.annotate(
                    f"{points[x].k}/{points[x].n}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                )
        ax.set_xticks(xs_all, [str(x) for x in xs_all])
        ax.set_ylim(0, 105)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("execution accuracy (%)")
        ax.set_title(
            f"{dataset}: EX against {xlabel}\n(whisker: 95% Wilson interval; label: correct/scored)",
            fontsize=10,
        )
        ax.legend(fontsize=8)
    return fig
