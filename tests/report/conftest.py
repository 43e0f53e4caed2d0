"""A small synthetic run, built through the artifact store with the real record types.

Evaluations (long-horizon base / SFT / RL with gold memory, plus a short-mode variant) on cosql
(40 turns: 0, 16, 18 correct) and sparc (3 turns), each with the official summary, a few
trajectories and the measures; SFT variants with 1 and 2 messages and with vote@4 (20/40 on cosql,
pass@k); RL with predicted memory (12/40); one self-taught SFT round; a curriculum of three
stages; two RL stages with step logs, behaviour included.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.core.agent.env import Step, Trajectory
from mtsql.core.data.records import Turn
from mtsql.core.measures.pass_at_k import pass_at_k_table
from mtsql.core.measures.propagation import propagation
from mtsql.core.measures.vacuous import non_empty_gold_ex
from mtsql.core.measures.verdicts import verdict_calibration
from mtsql.core.sql.metrics import summarize
from mtsql.core.trajectories import ScoredRow, write_rows

from .blocks import block, metrics

TOKEN_ID = 9999991  # a token id that must never show up in rendered text
GOLD = "SELECT count(*) FROM singer"
HARDNESS = ("easy", "medium", "hard")  # no "extra" turns: an empty bucket in the plots
DATA = {
    "train_dataset": "cosql",
    "train_split": "train",
    "train_limit": 3,
    "eval_datasets": ["cosql", "sparc"],
    "eval_split": "dev",
    "eval_limit": None,
}


def turn(dataset: str, interaction: int, index: int) -> Turn:
    previous = tuple(f"earlier question {i}" for i in range(index))
    return Turn(
        dataset,
        "dev",
        f"{dataset}-dev-{interaction:04d}",
        interaction,
        index,
        "concert_singer",
        f"question {index} of dialogue {interaction}",
        GOLD,
        previous,
        tuple(GOLD for _ in previous),
        HARDNESS[(interaction + index) % 3],
    )


def summary(dataset: str, turns: int, correct: int) -> dict:
    """The official summary of ``turns`` turns (4 per dialogue) of which the first ``correct`` match."""
    items = [
        {
            "interaction_index": i // 4,
            "turn_index": i % 4,
            "hardness": HARDNESS[(i // 4 + i % 4) % 3],
            "exec_match": int(i < correct),
            "exact_match": int(i < correct // 2),
            "db_id": "concert_singer",
            "error": None,
        }
        for i in range(turns)
    ]
    out = summarize(items)
    out["dataset"] = dataset
    return out


def row(t: Turn, steps: list[Step], final_sql: str | None, execution: int, mode: str = "long") -> ScoredRow:
    """A scored rollout record, as sample and evaluate write them."""
    messages = [
        {"role": "system", "content": "SYSTEM PROMPT: follow the protocol."},
        {"role": "user", "content": f"Database schema: ...\nCurrent question: {t.question}"},
    ]
    for step in steps:
        messages.append({"role": "assistant", "content": step.text})
        if step.observation is not None:
            messages.append({"role": "tool", "content": step.observation})
    valid = final_sql is not None and not any(step.flow_errors for step in steps)
    traj = Trajectory(
        uid=t.uid,
        dataset=t.dataset,
        db_id=t.db_id,
        question=t.question,
        mode=mode,
        memory_source="gold",
        max_messages=6,
        thinking=False,
        memory=[],
        messages=messages,
        steps=steps,
        final_sql=final_sql,
        finish_reason="answer" if final_sql else "max_messages",
        protocol_valid=valid,
    )
    return ScoredRow(
        key=f"{t.uid}#0",
        uid=t.uid,
        sample=0,
        turn=t,
        trajectory=traj,
        truncated=False,
        stop="episode_end",
        generations=[{"tokens": 42, "prompt_tokens": 100, "finish_reason": "stop"}],
        generated_tokens=42,
        prompt_ids=[TOKEN_ID, 1],
        response_ids=[TOKEN_ID],
        response_mask=[1],
        response_logprobs=None,
        elapsed_s=0.5,
        hardness=t.hardness,
        final_sql=final_sql,
        protocol_valid=valid,
        execution=execution,
        exact=execution,
        reward={"score": 1.5 * execution, "outcome": float(execution), "ex": float(execution), "format": 1.0},
        actions=[s.tool if s.action == "tool_call" else s.action for s in steps],
        proposed_sql=[s.sql for s in steps if s.sql],
        tool_calls=sum(s.action == "tool_call" for s in steps),
        self_corrected=any(s.verdict == "no_pass" for s in steps),
        response_tokens=len(steps),
    )


def exec_step(i: int, sql: str, verdict: str | None, stated: str | None = None) -> Step:
    text = (
        f"<exec_verify>{stated}</exec_verify>\n" if stated else ""
    ) + f'<tool_call>{{"name": "exec_sql", "arguments": {{"sql": "{sql}"}}}}</tool_call>'
    return Step(
        index=i,
        text=text,
        action="tool_call",
        tool="exec_sql",
        arguments={"sql": sql},
        sql=sql,
        exec_verdict=stated,
        observation=f"Result of {sql}: 3",
        result_kind="ok",
        row_count=1,
        verdict=verdict,
    )


def trajectories(dataset: str, mode: str) -> list[ScoredRow]:
    """Three episodes: a self-correction with a memory check (right), a first turn (right), a miss."""
    if mode == "short":
        step = Step(index=0, text=f"<answer_sql>{GOLD}</answer_sql>", action="answer", sql=GOLD)
        return [row(turn(dataset, 0, 0), [step], GOLD, 1, mode="short")]
    wrong = "SELECT name FROM singer"
    corrected = [
        exec_step(0, wrong, "no_pass"),
        exec_step(1, GOLD, "pass", stated="no_pass"),
        Step(
            index=2,
            text='<exec_verify>pass</exec_verify>\n<tool_call>{"name": "memory_retrieve"}</tool_call>',
            action="tool_call",
            tool="memory_retrieve",
            arguments={},
            exec_verdict="pass",
            observation="Earlier turns: ...",
            checked_sql=GOLD,
            verdict="pass",
        ),
        Step(
            index=3,
            text=f"<memory_verify>pass</memory_verify>\n<answer_sql>{GOLD}</answer_sql>",
            action="answer",
            sql=GOLD,
            memory_verdict="pass",
        ),
    ]
    first = [
        exec_step(0, GOLD, "pass"),
        Step(
            index=1,
            text=f"<exec_verify>pass</exec_verify>\n<answer_sql>{GOLD};</answer_sql>",
            action="answer",
            sql=GOLD + ";",
            exec_verdict="pass",
        ),
    ]
    miss = [
        Step(
            index=0,
            text=f"<answer_sql>{wrong}</answer_sql>",
            action="answer",
            sql=wrong,
            flow_errors=["answered without running a query"],
        )
    ]
    return [
        row(turn(dataset, 1, 1), corrected, GOLD, 1),
        row(turn(dataset, 2, 0), first, GOLD + ";", 1),
        row(turn(dataset, 3, 2), miss, wrong, 0),
    ]


def measured(name: str, turns: int, k: int, mode: str, tokens: float) -> dict:
    """The measures an evaluation writes for one dataset (the cost scales with ``tokens``)."""
    items = [
        {"interaction_index": i // 4, "turn_index": i % 4, "exec_match": int(i < k)} for i in range(turns)
    ]
    return {
        "verdict_calibration": verdict_calibration(
            trajectories(name, mode), lambda row, sql: int(sql == GOLD)
        ),
        "propagation": propagation(items),
        "ex_non_empty_gold": non_empty_gold_ex(items, {(0, 0)}, set()),
        "cost": {
            "generated_tokens": tokens,
            "prompt_tokens": 10 * tokens,
            "sql_executions": 1.5,
            "messages": 3.0,
            "wall_s": 0.5,
        },
    }


def evaluation(
    store: Store,
    label: str,
    scored: ArtifactKey | None,
    mode: str,
    correct: dict[str, tuple[int, int]],
    *,
    memory: str = "gold",
    max_messages: int = 4,
    vote: dict[str, int] | None = None,
) -> None:
    """An evaluation of the model ``scored`` (its key; None: the base model); ``vote``: EX of a vote@4
    decoding per dataset (the greedy one is ``correct``), with pass@k."""

    def work(ctx):
        datasets = {}
        for name, (turns, k) in correct.items():
            (ctx.out / name).mkdir()
            greedy = measured(name, turns, k, mode, 40.0)
            if vote:
                (ctx.out / name / "greedy").mkdir()
                (ctx.out / name / "greedy" / "summary.json").write_text(json.dumps(summary(name, turns, k)))
                k = vote[name]
            (ctx.out / name / "summary.json").write_text(json.dumps(summary(name, turns, k)))
            write_rows(ctx.out / name / "trajectories.jsonl", trajectories(name, mode))
            datasets[name] = block(turns, k, **(measured(name, turns, k, mode, 160.0) if vote else greedy))
            if vote:
                base = trajectories(name, "short")[0]
                samples = [
                    replace(
                        base,
                        uid=f"u{i // 4}",
                        sample=i % 4,
                        hardness=HARDNESS[i // 4 % 3],
                        turn=replace(base.turn, turn_index=i // 4 % 4),
                        execution=int(i % 4 == 0 and i < 8 * k),
                    )
                    for i in range(4 * turns)
                ]
                datasets[name] = replace(
                    datasets[name],
                    pass_at_k=pass_at_k_table(samples, 4),
                    decodings={"greedy": {"cost": greedy["cost"]}, "vote@4": {"cost": datasets[name].cost}},
                )
        return metrics(
            datasets,
            mode=mode,
            memory=memory,
            decoding="vote@4" if vote else "greedy",
            max_messages=max_messages,
        )

    store.run(
        ArtifactKey.evaluation(scored, name=label),
        {"data": DATA, "sample": {"seed": 7}, "env": {"max_messages": max_messages}, "label": label},
        {},
        work,
    )


def build_run(root: Path) -> Path:
    store = Store(root)
    evaluation(store, "eval-base", None, "long", {"cosql": (40, 0), "sparc": (3, 0)})
    evaluation(store, "eval-base-short", None, "short", {"cosql": (40, 1), "sparc": (3, 0)})

    def sample(ctx):
        write_rows(ctx.out / "trajectories.jsonl", trajectories("cosql", "long"))
        return {"policy": "gold_with_correction", "count": 12, "items": 12, "ex": 1.0}

    store.run(ArtifactKey("sample", 1), {"data": DATA, "sample": {"seed": 7}}, {}, sample)
    store.run(
        ArtifactKey("reject", 1),
        {},
        {},
        lambda ctx: {"items": 12, "solved": 9, "sampled": 12, "correct": 9, "kept": 9, "unsolved": 3},
    )
    store.run(
        ArtifactKey("sft", 1),
        {},
        {},
        lambda ctx: {
            "examples": 9,
            "over_cutoff": 1,
            "train_loss": 0.8123,
            "steps": 3,
            "heldout": {"count": 10, "ex": 0.3},
        },
    )
    sft = ArtifactKey("sft", 1)
    evaluation(store, "eval-sft", sft, "long", {"cosql": (40, 16), "sparc": (3, 1)})
    evaluation(store, "eval-sft-messages1", sft, "long", {"cosql": (40, 4), "sparc": (3, 0)}, max_messages=1)
    evaluation(store, "eval-sft-messages2", sft, "long", {"cosql": (40, 10), "sparc": (3, 1)}, max_messages=2)
    evaluation(
        store,
        "eval-sft-vote4",
        sft,
        "long",
        {"cosql": (40, 16), "sparc": (3, 1)},
        vote={"cosql": 20, "sparc": 2},
    )
    table = {
        f"stage {k}": {"easy": e, "medium": m, "hard": h, "extra": x, "total": e + m + h + x}
        for k, (e, m, h, x) in enumerate(((5, 0, 0, 0), (0, 4, 0, 0), (0, 0, 2, 1)), 1)
    }
    store.run(
        ArtifactKey("curriculum"),
        {"curriculum": {"by": "hardness", "stages": [["easy"], ["medium"], ["hard", "extra"]]}},
        {},
        lambda ctx: {"pool": 12, "stages": 3, "dropped": {"solved": 0, "unlabelled": 0}, "table": table},
    )
    for k, steps in ((1, 3), (2, 2)):

        def rl(ctx, k=k, steps=steps):
            (ctx.out / "metrics.jsonl").write_text(
                "".join(
                    json.dumps(
                        {
                            "stage": k,
                            "step": s,
                            "reward_mean": 0.5 * k + 0.1 * s,
                            "reward_std": 0.2,
                            "response_length": 60 + s,
                            "groups_with_signal": 0.5,
                            "ex": 0.25,
                            "pg_loss": -0.01 * s,
                            "kl": 0.001,
                            "grad_norm": 1.5,
                            "clipfrac": 0.0,
                            "tool_calls_per_turn": 3.0 - s,
                            "memory_calls_per_turn": 0.5,
                            "self_correction_rate": 0.25,
                            "invalid_message_rate": 0.1 * s,
                            "messages_per_turn": 4.0 - s,
                        }
                    )
                    + "\n"
                    for s in range(1, steps + 1)
                )
            )
            return {
                "engine": ("local", "verl")[k - 1],
                "items": 4,
                "steps": steps,
                "picked_step": steps,
                "reward_first": 0.5 * k + 0.1,
                "reward_last": 0.5 * k + 0.1 * steps,
            }

        store.run(ArtifactKey("rl", k), {"rl": {"batch_size": 2, "n": 4}, "k": k}, {}, rl)
    evaluation(store, "eval-rl", ArtifactKey("rl", 2), "long", {"cosql": (40, 18), "sparc": (3, 2)})
    evaluation(
        store,
        "eval-rl-predicted-memory",
        ArtifactKey("rl", 2),
        "long",
        {"cosql": (40, 12), "sparc": (3, 1)},
        memory="predicted",
    )
    return root


@pytest.fixture
def run_folder(tmp_path) -> Path:
    """A fresh synthetic run (tests may change it)."""
    return build_run(tmp_path / "tiny")


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory) -> Path:
    """One synthetic run for the tests that only read it."""
    return build_run(tmp_path_factory.mktemp("runs") / "tiny")


@pytest.fixture
def token_id() -> int:
    return TOKEN_ID
