"""Rates with their sample size and a 95 % Wilson score interval; differences of two rates.

The Wilson interval stays inside [0, 1] and is honest at 0/n and n/n, where the normal
approximation collapses to a zero-width interval; that matters for the small slices a CPU run scores.
Two rates are compared through the 95 % interval of their difference, built from the two Wilson
intervals (Newcombe 1998, the hybrid score interval for independent proportions): asking instead
whether the two intervals overlap tests at about the 0.5 % level, not 5 %. Phases scored on the same
turns are positively correlated, which makes this interval conservative for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

CONFIDENCE = 0.95
Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.959964...


def wilson(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials (n > 0)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson interval needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if k == 0 else max(0.0, centre - half)  # exact at the ends, where rounding could stray
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n``; ``n = 0`` means there was nothing to measure (not a rate of 0)."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.k, self.n) if self.n else None

    def cell(self) -> str:
        """``12.5 [5.4, 26.2] (5/40)`` in percent; ``– (0/0)`` when there was nothing to measure."""
        if not self.n:
            return "– (n=0)"
        low, high = self.interval
        return f"{100 * self.value:.1f} [{100 * low:.1f}, {100 * high:.1f}] ({self.k}/{self.n})"

    def minus(self, other: Rate) -> tuple[float, float, float] | None:
        """This rate minus ``other`` with the 95 % interval of the difference (None if either is empty)."""
        if not (self.n and other.n):
            return None
        (p1, (l1, u1)), (p2, (l2, u2)) = (self.value, self.interval), (other.value, other.interval)
        difference = p1 - p2
        return (
            difference,
            difference - math.hypot(p1 - l1, u2 - p2),
            difference + math.hypot(u1 - p1, p2 - l2),
        )

    def above(self, other: Rate) -> bool:
        """The 95 % interval of this rate minus ``other`` lies wholly above 0 (a difference the data show)."""
        difference = self.minus(other)
        return difference is not None and difference[1] > 0


def rate_of(flags) -> Rate:
    """The rate of true values among ``flags``."""
    flags = [bool(f) for f in flags]
    return Rate(sum(flags), len(flags))


@dataclass(frozen=True)
class Mean:
    """The mean of ``n`` values with their (population) standard deviation ``std``."""

    mean: float
    std: float
    n: int

    @classmethod
    def pooled(cls, groups: list[Mean]) -> Mean:
        """One mean over several groups of values, from each group's mean, std and n."""
        n = sum(g.n for g in groups)
        if not n:
            return cls(0.0, 0.0, 0)
        mean = sum(g.mean * g.n for g in groups) / n
        variance = sum(g.n * (g.std**2 + (g.mean - mean) ** 2) for g in groups) / n
        return cls(mean, math.sqrt(variance), n)

    def minus(self, other: Mean) -> tuple[float, float, float] | None:
        """This mean minus ``other`` with the 95 % normal interval of the difference (each mean's standard
        error from its values' sample variance); None when either has fewer than 2 values."""
        if self.n < 2 or other.n < 2:
            return None
        difference = self.mean - other.mean
        half = Z * math.sqrt(_sample_var(self) / self.n + _sample_var(other) / other.n)
        return difference, difference - half, difference + half


def n_to_clear(n: int, difference: tuple[float, float, float]) -> int | None:
    """The size per group at which a positive ``difference`` (value, low, high: a 95 % interval measured with
    ``n`` per group) would clear 0, its lower half-width shrinking as 1/sqrt(n): n x (half-width / value)^2.
    None where it already clears 0, is not above 0, or has no interval (NaN)."""
    value, low, _ = difference
    if not value > 0 or not low <= 0:
        return None
    return math.ceil(n * ((value - low) / value) ** 2)


def _sample_var(m: Mean) -> float:
    return m.std**2 * m.n / (m.n - 1)
