"""`mtsql sft`: fine-tune with LLaMA-Factory on the trajectories a reject artifact kept.

Exports the kept trajectories as sharegpt tool conversations (observations masked from the loss),
writes ``dataset_info.json`` and the training YAML here, runs ``llamafactory-cli train`` (and
``export`` to merge LoRA) with its log streamed to ``log.txt``, and leaves the model in ``model/``.
With ``sft.heldout`` > 0 it then scores the new model greedily on that many turns of the first eval
dataset, for the round summary.

Reads: the ``reject`` input's ``kept.jsonl``; the ``model`` input to start from (a training
artifact; none: the base model); config sections ``model``, ``sft``, ``env`` (the tools of the
protocol), ``seed``, and for the held-out check ``data``, ``sample``, ``sql``, ``reward``: the
fingerprint covers those four only with ``sft.heldout`` > 0, and then not the sampling settings the
greedy check overrides (``hashed``), so a change of sample.temperature or sample.n reruns no SFT.
Writes: ``data/`` (the exported dataset), ``train.yaml`` (+ ``merge.yaml`` with LoRA), ``model/``.
Logs (``trackers.*``): the HF Trainer's own loggers as it trains (``report_to``), then ``sft/loss`` per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtsql.base.artifacts import Artifact, StageContext
from mtsql.base.errors import StageFailed
from mtsql.base.trackers import Trackers
from mtsql.core.agent.tools import env_tools
from mtsql.core.data import eval_turns
from mtsql.core.data.records import Turn
from mtsql.core.trajectories import read_rows, scorer, summarize_trajectories
from mtsql.engines import backends
from mtsql.engines.llamafactory import SftPlan, export_sharegpt, plan_sft, run_sft, training_curve
from mtsql.engines.llamafactory.settings import SftConfig
from mtsql.engines.models.registry import stage_model
from mtsql.engines.rollout import SERVER_LOG, RolloutEngine
from mtsql.engines.views import RolloutView


@dataclass(frozen=True)
class SftView(RolloutView):
    sft: SftConfig


VIEW = SftView
INPUTS = {"reject": "reject", "model": None}
check = None  # hooks this stage has not (app/runner.Stage)


def hashed(cfg: SftView) -> dict:
    """What the fingerprint covers: model, sft, env and the seed; with a held-out check, also the
    data, SQL, reward and sampling settings of that check as it runs (``heldout_view``: greedy, once)."""
    if not cfg.sft.heldout:
        return cfg.hashed(("env", "model", "sft", "seed"))
    return heldout_view(cfg).hashed()


def heldout_view(cfg: SftView) -> SftView:
    """The config of the held-out check: the model's greedy answer, once per turn."""
    return cfg.replace(sample={"policy": "model", "n": 1, "temperature": 0.0})


def engine_identity(cfg: SftView) -> dict:
    """The generation engine of the held-out check, for the fingerprint (none without one)."""
    return backends.engine_identity(cfg) if cfg.sft.heldout else {}


def run(ctx: StageContext, cfg: SftView, *, reject: Artifact, model: Artifact | None = None) -> dict:
    rows = read_rows(reject.path / "kept.jsonl")
    if not rows:
        raise StageFailed(
            f"sft: the reject set {reject.path} kept no trajectory; "
            "sample more (sample.n, a scripted first round) or relax reject.require"
        )
    base = stage_model(cfg.model.name, model)
    stats = export_sharegpt(
        ({"messages": r.trajectory.messages} for r in rows),
        ctx.out / "data",
        tokenizer_path=base,
        template=cfg.model.template,
        cutoff_len=cfg.sft.cutoff_len,
        tools=env_tools(cfg.env),
    )
    sft_plan = _plan(cfg, ctx.out, base, ctx.trackers)
    result = run_sft(sft_plan, log_path=ctx.log_path, expected_examples=stats.examples)
    for step, logged in training_curve(sft_plan.trainer_dir):  # the HF Trainer's loggers used their own names
        ctx.trackers.log_metrics(step, {f"sft/{name}": value for name, value in logged.items()})
    metrics = {
        "examples": stats.examples,
        "dropped": stats.dropped,
        "over_cutoff": stats.over_cutoff,
        "max_tokens": stats.max_tokens,
        "mean_tokens": stats.mean_tokens,
        "rewritten": stats.rewritten,
        "train_loss": result.train_loss,
        "steps": result.steps,
        "train_runtime_s": result.runtime_s,
    }
    if cfg.sft.heldout:
        heldout = eval_turns(cfg.data, cfg.data.eval_datasets[0], cfg.data_root)[: cfg.sft.heldout]
        metrics["heldout"] = heldout_scores(
            cfg, heldout, str(sft_plan.model_dir), log_path=ctx.out / SERVER_LOG
        )
    return metrics


def plan(cfg: SftView, out: Path, *, reject: Artifact, model: Artifact | None = None) -> str:
    """The files and commands this stage would write and run (``--dry-run``)."""
    trackers = Trackers.for_folder(cfg.trackers, run=cfg.run, folder=out)
    return _plan(cfg, out, stage_model(cfg.model.name, model, resolve=False), trackers).describe()


def _plan(cfg: SftView, out: Path, base: str, trackers: Trackers) -> SftPlan:
    return plan_sft(
        cfg.sft, model_path=base, template=cfg.model.template, work_dir=out, seed=cfg.seed, trackers=trackers
    )


def heldout_scores(cfg: SftView, turns: list[Turn], model: str, log_path: Path | None = None) -> dict:
    """Greedy EX / EM / protocol-valid rate of ``model`` on ``turns`` (no artifact: a quick check)."""
    greedy = heldout_view(cfg)
    with RolloutEngine.from_config(
        greedy, data_root=cfg.data_root, policy=greedy.sample.policy, model=model, log_path=log_path
    ) as engine:
        rows = engine.run(turns, n=1, seed=cfg.seed, progress=False, score=scorer(cfg, cfg.data_root))
    summary = summarize_trajectories(rows)
    return {k: summary[k] for k in ("count", "ex", "em", "protocol_valid", "tool_calls_per_turn")}
