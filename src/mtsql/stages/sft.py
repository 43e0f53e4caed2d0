"""`mtsql sft`: fine-tune with LLaMA-Factory on the trajectories a reject artifact kept.

Exports the kept trajectories as sharegpt tool conversations (observations masked from the loss),
writes ``dataset_info.json`` and the training YAML here, runs ``llamafactory-cli train`` (and
``export`` to merge LoRA) with its log streamed to ``log.txt``, and leaves the model in ``model/``.
With ``heldout`` turns it then scores the new model on them (greedy), for the round summary.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from mtsql.artifacts import StageContext
from mtsql.config import Config
from mtsql.data.records import Turn
from mtsql.errors import StageFailed
from mtsql.files import read_jsonl
from mtsql.paths import data_dir
from mtsql.rollout import RolloutEngine
from mtsql.trajectories import score_record, summarize_trajectories


def plan(ctx_out, cfg: Config, base_model: str):
    from mtsql.integrations.llamafactory import plan_sft

    return plan_sft(cfg.sft, model_path=base_model, template=cfg.model.template, work_dir=ctx_out, seed=cfg.seed)


def run(ctx: StageContext, cfg: Config, *, base_model: str, heldout: list[Turn] = ()) -> dict:
    from mtsql.agent.tools import TOOL_SCHEMAS
    from mtsql.integrations.llamafactory import export_sharegpt, run_sft

    rows = read_jsonl(ctx.inputs["data"].path / "kept.jsonl")
    if not rows:
        raise StageFailed(f"sft: the reject set {ctx.inputs['data'].path} kept no trajectory; "
                          "sample more (sample.n, a scripted first round) or relax reject.require")
    tools = TOOL_SCHEMAS if cfg.env.mode == "long" else ()
    stats = export_sharegpt(({"messages": r["trajectory"]["messages"]} for r in rows), ctx.out / "data",
                            tokenizer_path=base_model, template=cfg.model.template, cutoff_len=cfg.sft.cutoff_len,
                            tools=tools)
    sft_plan = plan(ctx.out, cfg, base_model)
    result = run_sft(sft_plan, log_path=ctx.log_path, expected_examples=stats.examples)
    metrics = {"examples": stats.examples, "dropped": stats.dropped, "over_cutoff": stats.over_cutoff,
               "max_tokens": stats.max_tokens, "mean_tokens": stats.mean_tokens, "rewritten": stats.rewritten,
               "train_loss": result.train_loss, "steps": result.steps, "train_runtime_s": result.runtime_s}
    if heldout:
        metrics["heldout"] = heldout_scores(cfg, list(heldout), str(sft_plan.model_dir))
    return metrics


def heldout_scores(cfg: Config, turns: list[Turn], model: str) -> dict:
    """Greedy EX / EM / protocol-valid rate of ``model`` on ``turns`` (no artifact: a quick check)."""
    greedy = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, n=1, temperature=0.0))
    root = data_dir(cfg.data.root)
    engine = RolloutEngine.from_config(greedy, data_root=root, policy="model", model=model)
    summary = summarize_trajectories(engine.run(turns, n=1, seed=cfg.seed, progress=False, score=partial(
        score_record, reward=cfg.reward, sql=cfg.sql, data_root=root)))
    return {k: summary[k] for k in ("count", "ex", "em", "protocol_valid", "tool_calls_per_turn")}
