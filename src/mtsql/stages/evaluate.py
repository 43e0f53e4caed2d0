"""Evaluating a *model*: roll it out on every eval dataset, then score its answers officially.

Decoding is greedy; with ``evaluate.vote = n > 1`` the model is also scored with SQL-R1's
self-consistency: n samples at ``sample.temperature``, each final query executed, and the query whose
result most samples share wins (``vote``). Both are reported side by side (EX@greedy, EX@vote-n); the
vote is the headline. The chosen queries are scored by the same code as `mtsql evaluate` on a
prediction file, so the numbers are the official ones.
With ``evaluate.samples = n > 1`` the n samples of each turn also give pass@k (``measures.pass_at_k``);
vote and pass@k share one sampled rollout of max(vote, samples) samples, each using the first ones.

Reads: the ``model`` input (a training artifact; none: the base model); the eval slices of config
section ``data``; config sections ``sql``, ``env``, ``model``, ``sample``, ``reward``, ``evaluate``, ``seed``.
One rollout covers every dataset's turns (``_split`` parts them again).

Writes, per dataset: ``<dataset>/items.jsonl``, ``summary.json`` and ``trajectories.jsonl`` (with
voting, the greedy ones in ``<dataset>/greedy/``; with samples but no vote, the samples in
``<dataset>/samples/``); the stage metrics (``results.EvaluationResult``) hold, per dataset (a
``results.DatasetBlock``), EX / EM (question and interaction), the
breakdowns by hardness and turn, the protocol abilities (tool calls, verification accuracy,
self-correction) and the measures of ``mtsql.core.measures``: ``verdict_calibration``, ``revisions``,
``pass_at_k``, ``ex_non_empty_gold``, ``propagation`` and ``cost`` (per decoding too, in ``decodings``); the
settings the numbers depend on: the protocol (``env.protocol``), memory, decoding and ``budgets``; and,
for a billed chat API (``sample.backend: chat``), its ``usage``: requests, tokens and cost.
Logs (``trackers.*``): each dataset's headline and protocol validity as ``eval/<dataset>/<name>``.

Budgets: ``sample.max_new_tokens`` per message and ``evaluate.max_response_tokens`` for a whole
turn. ``evaluate.prompt_filter_tokens``: nothing is dropped, but the items whose prompt (the system
and user messages in the chat template, without the tool schemas, as verl's
``filter_overlong_prompts`` counts) is longer are counted, and each dataset's headline is given again
without them (``prompt_filter``), the way a verl validation pass would have scored it.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.config import Samples, Tokens, result
from mtsql.base.errors import UsageError
from mtsql.base.paths import bird_databases, database_path
from mtsql.core.bird_evaluation import render_bird, score_bird_pairs
from mtsql.core.data import eval_dataset_names, eval_turns
from mtsql.core.evaluation_files import render, score_pairs, write_outputs
from mtsql.core.measures.cost import cost_per_turn
from mtsql.core.measures.pass_at_k import pass_at_k_table
from mtsql.core.measures.propagation import propagation
from mtsql.core.measures.revisions import revisions
from mtsql.core.measures.vacuous import non_empty_gold_ex
from mtsql.core.measures.verdicts import verdict_calibration
from mtsql.core.results import Budgets, DatasetBlock, EvaluationResult
from mtsql.core.sql import score_turn
from mtsql.core.sql.bird_exec import bird_exec_match
from mtsql.core.sql.evaluation import EvaluateOptions
from mtsql.core.sql.vacuous import is_vacuous
from mtsql.core.trajectories import ScoredRow, scorer, summarize_trajectories, vote, write_rows
from mtsql.engines import backends
from mtsql.engines.models.registry import stage_model
from mtsql.engines.rollout import SERVER_LOG, RolloutEngine
from mtsql.engines.views import RolloutView


@dataclass(frozen=True)
class EvaluateConfig:
    """Scoring a model on the eval sets."""

    vote: Samples = result(1)  # >1: self-consistency voting over this many samples by execution result
    max_response_tokens: Tokens | None = result(None)  # tokens one turn may generate over all its messages
    # (release: 8000)
    prompt_filter_tokens: Tokens | None = result(
        None
    )  # also report the metrics without the items whose prompt
    # is longer, as verl's filter_overlong_prompts drops them
    # (release: 4000)
    samples: Samples = result(
        1
    )  # >1: pass@k (k = 1, 2, 4, ..., samples) from this many samples per turn (shared
    # with vote)


@dataclass(frozen=True)
class EvaluateView(RolloutView):
    evaluate: EvaluateConfig


VIEW = EvaluateView
INPUTS = {"model": None}


def judge(cfg: EvaluateView) -> Callable[[ScoredRow, str], int | None]:
    """The EX (1, 0 or None) of a query against a scored row's gold, with ``cfg``'s SQL settings."""

    def ex(row: ScoredRow, sql: str) -> int | None:
        if row.turn.dataset == "bird":  # BIRD's own EX (its databases are in BIRD's folder)
            return bird_exec_match(row.turn.gold_sql, sql, database_path(row.turn.db_id, cfg.data_root))[0]
        return score_turn(
            row.turn.gold_sql,
            sql,
            row.turn.db_id,
            data_root=cfg.data_root,
            exec_semantics=cfg.sql.exec_semantics,
            semantics=cfg.sql.semantics,
            timeout_s=cfg.sql.timeout_s,
        ).execution

    return ex


def accuracy(summary: dict, metric: str, *path: str) -> float | None:
    """One accuracy of an official summary (``accuracy(summary, "execution", "question")``), None if
    absent."""
    node = summary[metric]
    for key in path:
        node = node.get(key) if node is not None else None
    return node["accuracy"] if node is not None else None


def dataset_block(summary: dict, rows: list[ScoredRow], calibration: dict, measures: dict) -> DatasetBlock:
    """The official summary reshaped for reports, plus protocol abilities of the chosen samples
    (single-turn datasets have no interaction match and no turn buckets: those are None and empty),
    the verdict ``calibration`` and the other ``measures`` (ex_non_empty_gold, propagation, revisions,
    cost)."""

    def acc(metric, *path):
        return accuracy(summary, metric, *path)

    def breakdown(key: str) -> dict:
        table = (summary["exact"] or {}).get(key, {})
        return {
            bucket: {
                "count": table[bucket]["count"],
                "ex": acc("execution", key, bucket) or 0.0,
                "em": acc("exact", key, bucket) or 0.0,
            }
            for bucket in table
        }

    protocol = summarize_trajectories(rows)
    return DatasetBlock(
        turns=summary["turns"],
        interactions=summary.get("interactions"),
        ex=acc("execution", "question"),
        em=acc("exact", "question"),
        interaction_ex=acc("execution", "interaction"),
        interaction_em=acc("exact", "interaction"),
        scored_ex=summary["execution"]["question"]["scored"],
        scored_em=summary["exact"]["question"]["scored"] if summary["exact"] else 0,
        unscorable_ex=summary["execution"]["question"]["unscorable"],
        by_hardness=breakdown("by_hardness"),
        by_turn=breakdown("by_turn"),
        protocol={
            key: protocol[key]
            for key in (
                "protocol_valid",
                "answered",
                "tool_calls_per_turn",
                "self_correction_rate",
                "self_correction_success",
            )
        }
        | {"verification_accuracy": calibration["exec_verify"]["accuracy"]},
        generated_tokens=protocol["generated_tokens"],
        verdict_calibration=calibration,
        by_difficulty={
            level: {"count": cell["count"], "ex": cell["accuracy"]}
            for level, cell in summary["execution"]["by_difficulty"].items()
        }
        if "by_difficulty" in summary["execution"]
        else None,
        **measures,
    )


def hashed(cfg: EvaluateView) -> dict:
    """What the fingerprint covers: the declared sections, with the sampling settings as the stage uses
    them: the model, max(vote, samples) samples, and greedy decoding alone (temperature 0) when that is 1."""
    sampled = max(cfg.evaluate.vote, cfg.evaluate.samples) > 1
    return (cfg if sampled else cfg.replace(sample={"temperature": 0.0})).hashed(
        without=("sample.policy", "sample.n")
    )


def engine_identity(cfg: EvaluateView) -> dict:
    """The generation engine, for the fingerprint."""
    return backends.engine_identity(cfg)


def check(cfg: EvaluateView, *, model=None) -> None:
    """Every eval slice has turns, the base model exists when no trained one is given, and a chat API is
    asked for nothing it cannot do (a trained artifact, prompt lengths in the model's tokens)."""
    for name in eval_dataset_names(cfg.data, cfg.data_root):
        if not eval_turns(cfg.data, name, cfg.data_root, with_hardness=False):
            raise UsageError(
                f"evaluate: {name} {cfg.data.eval_split} of {cfg.data_root} has no turn to evaluate "
                "(with data.eval_pick=spread, only dialogues whose database has a file count)"
            )
    if backends.api_model(cfg, model) is None:
        if model is None:
            stage_model(cfg.model.name, resolve=False)
    elif cfg.evaluate.prompt_filter_tokens is not None:
        raise UsageError(
            "evaluate.prompt_filter_tokens counts prompt tokens with the model's tokenizer, which a "
            f"chat API does not share: leave it unset with sample.backend={cfg.sample.backend}"
        )


def plan(cfg: EvaluateView, out: Path, *, model=None) -> str:
    """What this stage would score (``--dry-run``): each dataset's slice and the decodings."""
    n_vote, n_pass = cfg.evaluate.vote, cfg.evaluate.samples
    names = eval_dataset_names(cfg.data, cfg.data_root)
    sizes = ", ".join(
        f"{name} {cfg.data.eval_split} ({len(eval_turns(cfg.data, name, cfg.data_root, with_hardness=False))}"
        " questions)"
        for name in names
    )
    decodings = (
        "greedy"
        + (f" and vote@{n_vote}" if n_vote > 1 else "")
        + (f", pass@k from {max(n_vote, n_pass)} samples" if n_pass > 1 else "")
    )
    absent = [name for name in cfg.data.eval_if_present if name not in names]
    return f"# scores {sizes}: {decodings}; into {out}/<dataset>/" + (
        f"\n# not in the data folder, so not scored: {', '.join(absent)}" if absent else ""
    )


def run(ctx: StageContext, cfg: EvaluateView, *, model: Artifact | None = None) -> dict:
    with RolloutEngine.from_config(
        cfg.replace(sample={"temperature": 0.0}),
        data_root=cfg.data_root,
        policy="model",
        model=backends.api_model(cfg, model) or stage_model(cfg.model.name, model),
        max_response_tokens=cfg.evaluate.max_response_tokens,
        log_path=ctx.out / SERVER_LOG,
    ) as greedy:
        return _evaluate(ctx, cfg, greedy, model)


def _evaluate(ctx: StageContext, cfg: EvaluateView, greedy: RolloutEngine, model: Artifact | None) -> dict:
    root, n_vote, n_pass = cfg.data_root, cfg.evaluate.vote, cfg.evaluate.samples
    n = max(n_vote, n_pass)  # one sampled rollout serves the vote and pass@k
    budget = cfg.evaluate.max_response_tokens
    sampler = (
        RolloutEngine.from_config(
            cfg, data_root=root, policy="model", backend=greedy.backend, max_response_tokens=budget
        )
        if n > 1
        else None
    )
    blocks: dict[str, DatasetBlock] = {}
    by_dataset = {name: eval_turns(cfg.data, name, root) for name in eval_dataset_names(cfg.data, root)}
    every_turn = [turn for turns in by_dataset.values() for turn in turns]
    greedy_rows, greedy_wall = _rollout(greedy, every_turn, 1, cfg, ctx.out / "greedy-rollout")
    greedy_rows = _split(greedy_rows, by_dataset)
    sampled, sampled_wall = (
        _rollout(sampler, every_turn, n, cfg, ctx.out / "vote-rollout") if sampler else ([], 0.0)
    )
    sampled = _split(sampled, by_dataset)
    for name, turns in by_dataset.items():
        folder, rows = ctx.out / name, greedy_rows[name]
        share = len(turns) / len(every_turn)  # of the rollout's wall time, which served every dataset
        block = _score(
            cfg, name, turns, rows, rows, folder / "greedy" if n_vote > 1 else folder, greedy_wall * share
        )
        first = {k: [r for r in sampled.get(name, []) if r.sample < k] for k in (n_vote, n_pass)}
        if n_vote > 1:
            by_uid: dict[str, list[ScoredRow]] = defaultdict(list)
            for row in first[n_vote]:
                by_uid[row.uid].append(row)
            chosen = [vote(by_uid[t.uid], root, cfg.sql.timeout_s) for t in turns]
            greedy_block, block = (
                block,
                _score(cfg, name, turns, chosen, first[n_vote], folder, sampled_wall * share * n_vote / n),
            )
            block = replace(
                block, decodings={"greedy": greedy_block.headline(), f"vote@{n_vote}": block.headline()}
            )
        elif sampler:
            write_rows(folder / "samples" / "trajectories.jsonl", sampled[name])
        if n_pass > 1:
            block = replace(block, pass_at_k=pass_at_k_table(first[n_pass], n_pass))
        if cfg.evaluate.prompt_filter_tokens is not None:
            block = replace(block, prompt_filter=_prompt_filter(cfg, turns, rows, greedy.chat))
        blocks[name] = block
        ctx.trackers.log_metrics(
            0,
            {
                f"eval/{name}/{key}": value
                for key, value in {  # the dashboards (trackers.*)
                    **block.headline(),
                    "protocol_valid": block.protocol["protocol_valid"],
                }.items()
            },
        )
    budgets = Budgets(
        max_messages=cfg.env.max_messages,
        max_new_tokens=cfg.sample.max_new_tokens,
        max_response_tokens=budget,
        prompt_filter_tokens=cfg.evaluate.prompt_filter_tokens,
        observation_chars=cfg.env.observation_chars,
    )
    return EvaluationResult(
        model=model.label if model else "base",
        model_name=backends.api_model(cfg) or cfg.model.name,
        mode=cfg.env.mode,
        protocol=cfg.env.protocol,
        memory=cfg.env.memory,
        max_messages=cfg.env.max_messages,
        decoding=f"vote@{n_vote}" if n_vote > 1 else "greedy",
        budgets=budgets,
        datasets=blocks,
        usage=greedy.backend.usage(),
    ).to_dict()


def _prompt_filter(cfg: EvaluateView, turns, rows: list[ScoredRow], chat) -> dict:
    """The greedy headline without the turns whose prompt is over ``evaluate.prompt_filter_tokens``,
    and how many those are (the prompt counted as verl's filter counts it: no tool schemas)."""
    limit = cfg.evaluate.prompt_filter_tokens
    lengths = [len(chat.prompt_ids(row.trajectory.messages[:2])) for row in rows]
    kept = [
        (turn, row.final_sql or "")
        for turn, row, length in zip(turns, rows, lengths, strict=True)
        if length <= limit
    ]
    out = {
        "limit": limit,
        "turns": len(turns),
        "dropped": len(turns) - len(kept),
        "longest_prompt": max(lengths),
        "kept": None,
    }
    if not kept:
        return out
    summary = score_pairs(kept, data_root=cfg.data_root, options=EvaluateOptions.from_config(cfg.sql)).summary
    return out | {
        "kept": {
            "turns": summary["turns"],
            "interactions": summary.get("interactions"),
            "ex": accuracy(summary, "execution", "question"),
            "em": accuracy(summary, "exact", "question"),
            "interaction_ex": accuracy(summary, "execution", "interaction"),
            "interaction_em": accuracy(summary, "exact", "interaction"),
        }
    }


def _rollout(
    engine: RolloutEngine, turns, n: int, cfg: EvaluateView, shards: Path
) -> tuple[list[ScoredRow], float]:
    """Roll out and score; the resumable shards are removed once every record is scored. Returns the
    rows and the rollout's wall seconds."""
    rows = engine.run(turns, n=n, seed=cfg.seed, out_dir=shards, score=scorer(cfg, cfg.data_root))
    shutil.rmtree(shards)
    return rows, engine.stats["wall_s"]


def _split(rows: list[ScoredRow], by_dataset: dict[str, list]) -> dict[str, list[ScoredRow]]:
    """The records of one rollout over every dataset, back by dataset (in each dataset's turn order).

    All datasets go through one rollout so that the batches stay full until the last turn: run one
    after the other, each dataset's last turns would decode in a batch of a few rows."""
    dataset_of = {turn.uid: name for name, turns in by_dataset.items() for turn in turns}
    split: dict[str, list[ScoredRow]] = {name: [] for name in by_dataset}
    for row in rows:
        split[dataset_of[row.uid]].append(row)
    return split


def _score(
    cfg: EvaluateView,
    name: str,
    turns,
    chosen: list[ScoredRow],
    rows: list[ScoredRow],
    folder: Path,
    wall_s: float,
) -> DatasetBlock:
    """Score the chosen final queries officially; write items, summary and every trajectory into ``folder``.
    The measures beside the official figures: verdict calibration, revisions and cost over every
    trajectory (``rows``), error propagation and EX without vacuous golds over the official items."""
    pairs = [(t, row.final_sql or "") for t, row in zip(turns, chosen, strict=True)]
    if name == "bird":  # BIRD's official EX by difficulty; no exact match
        evaluation = score_bird_pairs(pairs, bird_databases(cfg.data.eval_split, cfg.data_root))
    else:
        evaluation = score_pairs(pairs, data_root=cfg.data_root, options=EvaluateOptions.from_config(cfg.sql))
    evaluation.summary["dataset"] = name
    write_outputs(folder, evaluation)
    write_rows(folder / "trajectories.jsonl", rows)
    (render_bird if name == "bird" else render)(evaluation.summary, Console(stderr=True))
    ex_of = judge(cfg)
    vacuous = {
        (t.interaction_index, t.turn_index)
        for t in turns
        if is_vacuous(database_path(t.db_id, cfg.data_root), t.gold_sql, cfg.sql.timeout_s)
    }
    left_out = {entry["interaction_index"] for entry in evaluation.summary["execution"]["left_out"]}
    measures = {
        "ex_non_empty_gold": non_empty_gold_ex(evaluation.items, vacuous, left_out),
        "propagation": propagation(evaluation.items),
        "revisions": revisions(rows, ex_of),
        "cost": cost_per_turn(rows, len(turns), wall_s),
    }
    return dataset_block(evaluation.summary, chosen, verdict_calibration(rows, ex_of), measures)
