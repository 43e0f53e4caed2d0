"""What a decoding costs per turn, to set beside its EX.

Per trajectory: ``generated_tokens`` (model tokens), ``prompt_tokens`` (the context each model call
read, summed over its messages: what a backend without a prefix cache computes), ``sql_executions``
(each ``exec_sql`` call that ran, plus one per remembered query a ``memory_retrieve`` call ran),
and ``messages`` (assistant messages). A decoding's cost per turn sums its trajectories (vote@n:
every sample) and divides by the turns; ``wall_s`` is the rollout's wall time per turn when known
(episodes run side by side in batches, so an episode's own duration, waits included, is no cost).
"""

from __future__ import annotations

FIELDS = ("generated_tokens", "prompt_tokens", "sql_executions", "messages")


def trajectory_cost(row) -> dict[str, float]:
    """The ``FIELDS`` of one scored row (``trajectories.ScoredRow``)."""
    trajectory = row.trajectory
    remembered = sum(1 for entry in trajectory.memory if entry.sql)
    executions = sum(1 for s in trajectory.steps if s.tool == "exec_sql" and s.result_kind)
    executions += sum(
        remembered for s in trajectory.steps if s.tool == "memory_retrieve" and s.observation is not None
    )
    return {
        "generated_tokens": row.generated_tokens or 0,
        "prompt_tokens": sum(g.get("prompt_tokens", 0) for g in row.generations or []),
        "sql_executions": executions,
        "messages": len(trajectory.steps),
    }


def cost_per_turn(rows: list, turns: int, wall_s: float | None = None) -> dict[str, float | None]:
    """Each field summed over ``rows``, divided by ``turns``, plus ``wall_s`` per turn (None if unknown)."""
    costs = [trajectory_cost(row) for row in rows]
    out = {key: sum(c[key] for c in costs) / turns if turns else None for key in FIELDS}
    return out | {"wall_s": wall_s / turns if wall_s is not None and turns else None}
