"""Evaluating a *model*: roll it out on every eval dataset, then score its answers officially.

Decoding is greedy; with ``evaluate.vote = n > 1`` the model is also scored with SQL-R1's
self-consistency: n samples at ``sample.temperature``, each final query executed, and the query whose
result most samples share wins (``vote``). Both are reported side by side (EX@greedy, EX@vote-n); the
vote is the headline. The chosen queries are scored by the same code as `mtsql evaluate` on a
prediction file, so the numbers are the official ones.

Reads: the ``model`` input (a training artifact; none: the base model); the eval slices of config
section ``data``; config sections ``sql``, ``env``, ``model``, ``sample``, ``reward``, ``evaluate``, ``seed``.
One rollout covers every dataset's turns (``_split`` parts them again).

Writes, per dataset: ``<dataset>/items.jsonl``, ``summary.json`` and ``trajectories.jsonl`` (with
voting, the greedy ones in ``<dataset>/greedy/``); the
stage metrics hold, per dataset, EX / EM (question and interaction), the breakdowns by hardness
and turn, and the protocol abilities (tool calls, verification accuracy, self-correction).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

from rich.console import Console

from mtsql.artifacts import Artifact, StageContext
from mtsql.config import ConfigView
from mtsql.data import eval_turns
from mtsql.errors import UsageError
from mtsql.files import write_jsonl
from mtsql.models import stage_model
from mtsql.rollout import RolloutEngine
from mtsql.sql import score_turn
from mtsql.sql.evaluation import EvaluateOptions, render, score_pairs, write_outputs
from mtsql.trajectories import scorer, summarize_trajectories, vote

SECTIONS = ("data", "sql", "env", "reward", "model", "sample", "evaluate", "seed")
INPUTS = {"model": None}


def verification_accuracy(rows: list[dict], cfg: ConfigView) -> float | None:
    """How often an exec_verify verdict agrees with whether the executed query was right (EX)."""
    agree = total = 0
    root = cfg.data_root
    for row in rows:
        for step in row["trajectory"]["steps"]:
            if step.get("tool") == "exec_sql" and step.get("sql") and step.get("verdict") in ("pass", "no_pass"):
                ex = score_turn(row["turn"]["gold_sql"], step["sql"], row["turn"]["db_id"], data_root=root,
                                exec_semantics=cfg.sql.exec_semantics).execution
                if ex is not None:
                    total += 1
                    agree += int((step["verdict"] == "pass") == (ex == 1))
    return agree / total if total else None


def dataset_block(summary: dict, rows: list[dict], cfg: ConfigView) -> dict:
    """The official summary reshaped for reports, plus protocol abilities of the chosen samples
    (single-turn datasets have no interaction match and no turn buckets: those are None and empty)."""
    def acc(metric, *path):
        node = summary[metric]
        for key in path:
            node = node.get(key) if node is not None else None
        return node["accuracy"] if node is not None else None

    def breakdown(key: str) -> dict:
        table = summary["exact"].get(key, {})
        return {bucket: {"count": table[bucket]["count"], "ex": acc("execution", key, bucket) or 0.0,
                         "em": acc("exact", key, bucket) or 0.0} for bucket in table}

    protocol = summarize_trajectories(rows)
    return {
        "turns": summary["turns"], "interactions": summary.get("interactions"),
        "ex": acc("execution", "question"), "em": acc("exact", "question"),
        "interaction_ex": acc("execution", "interaction"), "interaction_em": acc("exact", "interaction"),
        "scored_ex": summary["execution"]["question"]["scored"], "scored_em": summary["exact"]["question"]["scored"],
        "unscorable_ex": summary["execution"]["question"]["unscorable"],
        "by_hardness": breakdown("by_hardness"),
        "by_turn": breakdown("by_turn"),
        "protocol": {key: protocol[key] for key in ("protocol_valid", "answered", "tool_calls_per_turn",
                                                    "self_correction_rate", "self_correction_success")}
        | {"verification_accuracy": verification_accuracy(rows, cfg)},
        "generated_tokens": protocol["generated_tokens"],
    }


def check(cfg: ConfigView, *, model=None) -> None:
    """Every eval slice has turns, and the base model exists when no trained one is given."""
    for name in cfg.data.eval_datasets:
        if not eval_turns(cfg.data, name, cfg.data_root, with_hardness=False):
            raise UsageError(f"evaluate: {name} {cfg.data.eval_split} of {cfg.data_root} has no turn to evaluate "
                             "(with data.eval_pick=spread, only dialogues whose database has a file count)")
    if model is None:
        stage_model(cfg.model.name, resolve=False)


def run(ctx: StageContext, cfg: ConfigView, *, model: Artifact | None = None) -> dict:
    root, n = cfg.data_root, cfg.evaluate.vote
    greedy = RolloutEngine.from_config(cfg.replace(sample={"temperature": 0.0}), data_root=root, policy="model",
                                       model=stage_model(cfg.model.name, model))
    sampler = (RolloutEngine.from_config(cfg, data_root=root, policy="model", backend=greedy.backend)
               if n > 1 else None)
    out = {"model": model.label if model else "base", "model_name": cfg.model.name, "mode": cfg.env.mode,
           "memory": cfg.env.memory, "decoding": f"vote@{n}" if sampler else "greedy", "datasets": {}}
    by_dataset = {name: eval_turns(cfg.data, name, root) for name in cfg.data.eval_datasets}
    every_turn = [turn for turns in by_dataset.values() for turn in turns]
    greedy_rows = _split(_rollout(greedy, every_turn, 1, cfg, ctx.out / "greedy-rollout"), by_dataset)
    sampled = (_split(_rollout(sampler, every_turn, n, cfg, ctx.out / "vote-rollout"), by_dataset)
               if sampler else {})
    for name, turns in by_dataset.items():
        folder, rows = ctx.out / name, greedy_rows[name]
        block = _score(cfg, name, turns, rows, rows, folder / "greedy" if sampler else folder)
        if sampler:
            by_uid: dict[str, list[dict]] = defaultdict(list)
            for row in sampled[name]:
                by_uid[row["uid"]].append(row)
            chosen = [vote(by_uid[t.uid], root, cfg.sql.timeout_s) for t in turns]
            greedy_block, block = block, _score(cfg, name, turns, chosen, sampled[name], folder)
            block["decodings"] = {"greedy": _headline(greedy_block), f"vote@{n}": _headline(block)}
        out["datasets"][name] = block
    return out


def _rollout(engine: RolloutEngine, turns, n: int, cfg: ConfigView, shards: Path) -> list[dict]:
    """Roll out and score; the resumable shards are removed once every record is scored."""
    rows = engine.run(turns, n=n, seed=cfg.seed, out_dir=shards,
                      score=scorer(cfg, cfg.data_root))
    shutil.rmtree(shards)
    return rows


def _split(rows: list[dict], by_dataset: dict[str, list]) -> dict[str, list[dict]]:
    """The records of one rollout over every dataset, back by dataset (in each dataset's turn order).

    All datasets go through one rollout so that the batches stay full until the last turn: run one
    after the other, each dataset's last turns would decode in a batch of a few rows."""
    dataset_of = {turn.uid: name for name, turns in by_dataset.items() for turn in turns}
    split: dict[str, list[dict]] = {name: [] for name in by_dataset}
    for row in rows:
        split[dataset_of[row["uid"]]].append(row)
    return split


def _score(cfg: ConfigView, name: str, turns, chosen: list[dict], rows: list[dict], folder: Path) -> dict:
    """Score the chosen final queries officially; write items, summary and every trajectory into ``folder``."""
    evaluation = score_pairs([(t, row["final_sql"] or "") for t, row in zip(turns, chosen, strict=True)],
                             data_root=cfg.data_root, options=EvaluateOptions.from_config(cfg.sql))
    evaluation.summary["dataset"] = name
    write_outputs(folder, evaluation)
    write_jsonl(folder / "trajectories.jsonl", rows)
    render(evaluation.summary, Console(stderr=True))
    return dataset_block(evaluation.summary, chosen, cfg)


def _headline(block: dict) -> dict:
    return {key: block[key] for key in ("turns", "ex", "em", "interaction_ex", "interaction_em")}
