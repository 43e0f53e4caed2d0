"""Typed evaluation metrics for the report's fabricated runs: every field an evaluation writes, with
neutral defaults for the measures a test does not look at."""

from __future__ import annotations

from mtsql.core.measures.cost import cost_per_turn
from mtsql.core.measures.propagation import propagation
from mtsql.core.measures.revisions import revisions
from mtsql.core.measures.verdicts import verdict_calibration
from mtsql.core.results import Budgets, DatasetBlock, EvaluationResult


def block(turns: int, correct: int, **fields) -> DatasetBlock:
    """A dataset of ``turns`` turns, ``correct`` of them right (EM: half as many); ``fields`` replace the
    rest."""

    def unscored(row, sql):
        return None

    values = {
        "turns": turns,
        "interactions": None,
        "ex": correct / turns,
        "em": (correct // 2) / turns,
        "interaction_ex": None,
        "interaction_em": None,
        "scored_ex": turns,
        "scored_em": turns,
        "unscorable_ex": 0,
        "by_hardness": {},
        "by_turn": {},
        "protocol": {},
        "generated_tokens": 100,
        "verdict_calibration": verdict_calibration([], unscored),
        "ex_non_empty_gold": {"correct": correct, "scored": turns, "vacuous": 0},
        "propagation": propagation([]),
        "revisions": revisions([], unscored),
        "cost": cost_per_turn([], turns),
    }
    return DatasetBlock(**values | fields)


def metrics(
    datasets: dict[str, DatasetBlock],
    *,
    mode: str = "long",
    memory: str = "gold",
    decoding: str = "greedy",
    max_messages: int = 4,
) -> dict:
    """An evaluate artifact's metrics, as the stage returns them."""
    budgets = Budgets(
        max_messages=max_messages,
        max_new_tokens=512,
        max_response_tokens=None,
        prompt_filter_tokens=None,
        observation_chars=2000,
    )
    return EvaluationResult(
        model="m",
        model_name="smollm2-135m",
        mode=mode,
        protocol="mtsql",
        memory=memory,
        max_messages=max_messages,
        decoding=decoding,
        budgets=budgets,
        datasets=datasets,
    ).to_dict()
