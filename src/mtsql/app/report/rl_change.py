"""The training reward's change over an RL chain: the first steps' samples against the last steps'.

A chain of N logged steps (every curriculum stage, in order) is split into its first and its last
max(1, N // 4) steps; each block's reward is the mean over its training samples (each step logs the
mean and std of its ``batch_size x n`` samples), and the change is last minus first with the 95 %
normal interval of a difference of means (``stats.Mean``). The samples of one group share a question,
so the interval is, if anything, too narrow; a change whose interval holds 0 is not shown. The
curriculum moves to harder stages as it goes, which pulls the last steps' reward down. A rise whose
interval holds 0 comes with the chain length at which a rise of that size would clear 0 (``stats.n_to_clear``
on the steps per block, times 4): what an RL stage has to be sized to for its change to be read.
"""

from __future__ import annotations

import math

from mtsql.app.report.runs import rl_steps, stage_config
from mtsql.app.report.stats import Mean, n_to_clear
from mtsql.base.artifacts import Artifact


def step_means(stages: dict[int, Artifact]) -> list[Mean]:
    """The reward of every logged step of a chain, in order, as (mean, std, samples); the std of a step
    that logged no spread is NaN, so no interval is drawn from it."""
    out = []
    for art in stages.values():
        rl_cfg = stage_config(art).get("rl", {})
        samples = rl_cfg.get("batch_size", 0) * rl_cfg.get("n", 0)
        out += [
            Mean(row.reward_mean, math.nan if row.reward_std is None else row.reward_std, samples)
            for row in rl_steps(art)
            if row.reward_mean is not None
        ]
    return out


def reward_change(steps: list[Mean]) -> tuple[int, Mean, Mean, tuple[float, float, float] | None] | None:
    """(steps per block, first block, last block, last − first with its 95 % interval); None under 2 steps."""
    if len(steps) < 2:
        return None
    block = max(1, len(steps) // 4)
    first, last = Mean.pooled(steps[:block]), Mean.pooled(steps[-block:])
    return block, first, last, last.minus(first)


def reward_change_line(name: str, stages: dict[int, Artifact]) -> str | None:
    """One sentence on a chain's reward change, None when it logged fewer than 2 steps."""
    return change_sentence(name, step_means(stages))


def change_sentence(name: str, steps: list[Mean]) -> str | None:
    """The sentence of ``reward_change_line`` from a chain's step rewards."""
    found = reward_change(steps)
    if found is None:
        return None
    block, first, last, difference = found
    shown = (
        "no interval (under 2 samples a block)"
        if difference is None
        else f"{difference[0]:+.3f}, no interval (a step logged no reward spread)"
        if math.isnan(difference[1])
        else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*difference)
        + (": the interval holds 0, no change shown" if difference[1] <= 0 <= difference[2] else "")
    )
    needed = n_to_clear(block, difference) if difference is not None else None
    if needed is not None:
        shown += (
            f"; a rise this size would clear 0 with about {4 * needed} steps in all (blocks of {needed}, "
            f"each step as large as these)"
        )
    return (
        f"* {name}: training reward of the first {block} of {len(steps)} steps {first.mean:.3f} ({first.n} "
        f"samples), of the last {block} {last.mean:.3f} ({last.n} samples); change {shown} (95 % interval)."
    )
