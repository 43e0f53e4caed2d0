"""Evaluating a *model*: roll it out on every eval dataset, then score its answers officially.

Decoding is greedy, or with ``evaluate.vote > 1`` SQL-R1's self-consistency: that many samples at
``sample.temperature``, each final query executed, and the query whose result most samples share
wins (among those that run; ties go to the earliest sample). The chosen queries are scored by the
same code as `mtsql evaluate` on a prediction file, so the numbers are the official ones. Per
dataset it writes ``<dataset>/items.jsonl``, ``summary.json`` and ``trajectories.jsonl``; the
stage metrics hold, per dataset, EX / EM (question and interaction), the breakdowns by hardness
and turn, and the protocol abilities (tool calls, verification accuracy, self-correction).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path

from mtsql.artifacts import StageContext
from mtsql.config import Config
from mtsql.data.records import Turn
from mtsql.files import write_jsonl
from mtsql.paths import data_dir, database_path
from mtsql.rollout import RolloutEngine
from mtsql.sql.evaluation import EvaluateOptions, render, score_pairs, write_outputs
from mtsql.trajectories import score_record, summarize_trajectories


def vote(rows: list[dict], root: Path, timeout_s: float) -> dict:
    """The sample whose final query's result (a multiset of rows) most samples share."""
    from mtsql.sql.executor import execute_cached

    results = {}
    for row in rows:
        sql = row["final_sql"]
        if sql:
            result = execute_cached(database_path(row["turn"]["db_id"], root), sql, timeout_s=timeout_s)
            if result.ok:
                results[row["sample"]] = frozenset(Counter(map(repr, result.rows)).items())
    if not results:
        return rows[0]
    counts = Counter(results.values())
    best = max(counts.values())
    return next(r for r in rows if r["sample"] in results and counts[results[r["sample"]]] == best)


def verification_accuracy(rows: list[dict], cfg: Config) -> float | None:
    """How often an exec_verify verdict agrees with whether the executed query was right (EX)."""
    from mtsql.sql import score_turn

    agree = total = 0
    root = data_dir(cfg.data.root)
    for row in rows:
        for step in row["trajectory"]["steps"]:
            if step.get("tool") == "exec_sql" and step.get("sql") and step.get("verdict") in ("pass", "no_pass"):
                ex = score_turn(row["turn"]["gold_sql"], step["sql"], row["turn"]["db_id"], data_root=root,
                                exec_semantics=cfg.sql.exec_semantics).execution
                if ex is not None:
                    total += 1
                    agree += int((step["verdict"] == "pass") == (ex == 1))
    return agree / total if total else None


def dataset_block(summary: dict, rows: list[dict], cfg: Config) -> dict:
    """The official summary reshaped for reports, plus protocol abilities of the chosen samples."""
    def acc(metric, *path):
        node = summary[metric]
        for key in path:
            node = node[key]
        return node["accuracy"]

    protocol = summarize_trajectories(rows)
    return {
        "turns": summary["turns"], "interactions": summary["interactions"],
        "ex": acc("execution", "question"), "em": acc("exact", "question"),
        "interaction_ex": acc("execution", "interaction"), "interaction_em": acc("exact", "interaction"),
        "unscorable_ex": summary["execution"]["question"]["unscorable"],
        "by_hardness": {level: {"count": summary["exact"]["by_hardness"][level]["count"],
                                "ex": acc("execution", "by_hardness", level) or 0.0,
                                "em": acc("exact", "by_hardness", level) or 0.0}
                        for level in summary["exact"]["by_hardness"]},
        "by_turn": {bucket: {"count": summary["exact"]["by_turn"][bucket]["count"],
                             "ex": acc("execution", "by_turn", bucket) or 0.0,
                             "em": acc("exact", "by_turn", bucket) or 0.0}
                    for bucket in summary["exact"]["by_turn"]},
        "protocol": {key: protocol[key] for key in ("protocol_valid", "answered", "tool_calls_per_turn",
                                                    "self_correction_rate", "self_correction_success")}
        | {"verification_accuracy": verification_accuracy(rows, cfg)},
        "generated_tokens": protocol["generated_tokens"],
    }


def run_model(ctx: StageContext, cfg: Config, datasets: dict[str, list[Turn]], *, model: str) -> dict:
    """Stage body: roll out ``model`` on each dataset's turns and score the answers."""
    voting = cfg.evaluate.vote > 1
    decoding = cfg if voting else dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, temperature=0.0))
    root = data_dir(cfg.data.root)
    engine = RolloutEngine.from_config(decoding, data_root=root, policy="model", model=model)
    options = EvaluateOptions.from_config(cfg.sql)
    out = {"model": model, "model_name": cfg.model.name, "mode": cfg.env.mode, "memory": cfg.env.memory,
           "decoding": f"vote@{cfg.evaluate.vote}" if voting else "greedy", "datasets": {}}
    for name, turns in datasets.items():
        folder = ctx.out / name
        rows = engine.run(turns, n=cfg.evaluate.vote, seed=cfg.seed, out_dir=folder / "rollout",
                          score=partial(score_record, reward=cfg.reward, sql=cfg.sql, data_root=root))
        by_uid: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            by_uid[row["uid"]].append(row)
        chosen = [vote(by_uid[t.uid], root, cfg.sql.timeout_s) if voting else by_uid[t.uid][0] for t in turns]
        evaluation = score_pairs([(t, row["final_sql"] or "") for t, row in zip(turns, chosen, strict=True)], data_root=root,
                                 options=options)
        evaluation.summary["dataset"] = name
        write_outputs(folder, evaluation)
        write_jsonl(folder / "trajectories.jsonl", rows)
        render(evaluation.summary, _console())
        out["datasets"][name] = dataset_block(evaluation.summary, chosen, cfg)
        for shard in (folder / "rollout").glob("*"):
            shard.unlink()
        (folder / "rollout").rmdir()
    return out


def _console():
    from rich.console import Console

    return Console(stderr=True)
