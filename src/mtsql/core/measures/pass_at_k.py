"""pass@k: the probability that at least one of k samples of a turn is right (EX 1).

From n ≥ k samples of which c are right, the unbiased estimator (Chen et al., 2021) is the share
of the C(n, k) k-subsets that hold a right sample: ``1 - C(n - c, k) / C(n, k)``, computed here in
exact integer arithmetic. A table averages it over turns, overall, by hardness and by turn
position; turns whose samples the evaluator could not score (EX null on every sample) are left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import mean

from mtsql.core.sql.hardness import HARDNESS_LEVELS
from mtsql.core.sql.metrics import TURN_BUCKETS, turn_bucket


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one turn with ``c`` right samples of ``n``."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks_for(n: int) -> list[int]:
    """The k reported for n samples: 1, 2, 4, ... below n, and n."""
    return sorted({2**i for i in range(n.bit_length()) if 2**i < n} | {n})


def pass_at_k_table(rows: list, samples: int) -> dict:
    """pass@k for every k of ``ks_for(samples)`` over scored rows (``trajectories.ScoredRow``, several per
    turn: their ``uid``, ``execution``, ``hardness``, ``turn["turn_index"]``):
    ``{"samples", "ks", "all", "by_hardness", "by_turn"}``, each cell
    ``{"turns": m, "pass": {"k": mean pass@k}}`` (``pass`` is None where m = 0)."""
    by_uid: dict[str, list] = defaultdict(list)
    for row in rows:
        by_uid[row.uid].append(row)
    ks = ks_for(samples)
    turns = []
    for uid, group in by_uid.items():
        if len(group) != samples:
            raise ValueError(f"{uid}: {len(group)} samples, expected {samples}")
        if all(r.execution is None for r in group):
            continue
        right = sum(r.execution == 1 for r in group)
        turns.append(
            (
                group[0].hardness or "unknown",
                turn_bucket(group[0].turn.turn_index),
                {str(k): pass_at_k(samples, right, k) for k in ks},
            )
        )

    def cell(selected: list[dict]) -> dict:
        return {
            "turns": len(selected),
            "pass": {str(k): mean(t[str(k)] for t in selected) for k in ks} if selected else None,
        }

    return {
        "samples": samples,
        "ks": ks,
        "all": cell([t for _, _, t in turns]),
        "by_hardness": {level: cell([t for h, _, t in turns if h == level]) for level in HARDNESS_LEVELS},
        "by_turn": {bucket: cell([t for _, b, t in turns if b == bucket]) for bucket in TURN_BUCKETS},
    }
