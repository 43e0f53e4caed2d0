"""Chaining stages: self-taught SFT rounds, curriculum RL, evaluation, and `mtsql run PIPELINE`.

Each function here decides *which* artifacts feed *which* stage; the stage bodies live in
``mtsql.stages``. Every stage goes through ``run_stage`` so it is fingerprinted, skipped when done
and planned by ``--dry-run``. In a dry run a stage whose input is not built yet is shown as
waiting, and everything after it too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from mtsql.artifacts import Artifact
from mtsql.config import Config, load_config
from mtsql.data import Turn, load_turns
from mtsql.errors import UsageError
from mtsql.files import read_jsonl
from mtsql.paths import data_dir, database_path
from mtsql.stages import curriculum as curriculum_stage
from mtsql.stages import reject as reject_stage
from mtsql.stages.runner import run_stage, waiting

console = Console(stderr=True)
MODEL_DIR = "model"


class Waiting(Exception):
    """Raised in a dry run when a stage's input does not exist yet: the rest of the plan waits on it."""


def model_path(cfg: Config, artifact: Artifact | None, *, resolve: bool = True) -> str:
    """The model a stage should load: a trained artifact's ``model/`` folder, else the base model's
    local folder (an alias or Hub id is fetched or built on first use unless ``resolve`` is off, as
    in a dry run, which shows the folder it will be)."""
    if artifact is not None:
        return str(artifact.path / MODEL_DIR)
    from mtsql.models import model_folder, resolve_model

    return str(resolve_model(cfg.model.name) if resolve else model_folder(cfg.model.name))


def train_pool(cfg: Config) -> list[Turn]:
    """Training turns that can be rewarded: their database exists and their gold SQL parses
    (a gold the official parser rejects has no hardness and can never score exact match)."""
    root = data_dir(cfg.data.root)
    turns = load_turns(cfg.data.train_dataset, cfg.data.train_split, root=root, limit=cfg.data.train_limit)
    return [t for t in turns if t.hardness is not None and database_path(t.db_id, root).exists()]


def eval_turns(cfg: Config, dataset: str) -> list[Turn]:
    return load_turns(dataset, cfg.data.eval_split, root=data_dir(cfg.data.root), limit=cfg.data.eval_limit)


def _need(artifact: Artifact | None, label: str, dry_run: bool) -> Artifact | None:
    if artifact is None and dry_run:
        raise Waiting(label)
    return artifact


# ---------------------------------------------------------------------------------------------
# Self-taught warm-start SFT


def sample(cfg: Config, *, label: str, turns: list[Turn], policy: str, model: Artifact | None = None,
           pool: Artifact | None = None, round: int | None = None, force: bool = False, dry_run: bool = False):
    from mtsql.stages import sample as sample_stage

    inputs = {k: v for k, v in {"model": model, "pool": pool}.items() if v is not None}
    if pool is not None:
        pool_uids = {Turn.from_dict(row).uid for row in read_jsonl(pool.path / "pool.jsonl")}
        turns = [t for t in turns if t.uid in pool_uids]
    params = {"policy": policy, "items": [t.uid for t in turns]}
    work = lambda ctx: sample_stage.run(ctx, cfg, turns, policy=policy,  # noqa: E731
                                        model=model_path(cfg, model) if policy == "model" else None)
    return run_stage("sample", cfg, work, label=label, inputs=inputs, params=params, round=round,
                     force=force, dry_run=dry_run)


def reject(cfg: Config, sample_art: Artifact, *, label: str, round: int | None = None, force=False, dry_run=False):
    return run_stage("reject", cfg, lambda ctx: reject_stage.run(ctx, cfg.reject), label=label,
                     inputs={"sample": sample_art}, round=round, force=force, dry_run=dry_run)


def sft(cfg: Config, reject_art: Artifact, *, label: str, model: Artifact | None = None, round: int | None = None,
        force=False, dry_run=False):
    from mtsql.stages import sft as sft_stage

    inputs = {"data": reject_art, **({"model": model} if model else {})}
    heldout = eval_turns(cfg, cfg.data.eval_datasets[0])[: cfg.sft.heldout] if cfg.sft.heldout else []
    base = model_path(cfg, model, resolve=not dry_run)
    done = run_stage("sft", cfg, lambda ctx: sft_stage.run(ctx, cfg, base_model=base, heldout=heldout),
                     label=label, inputs=inputs, round=round, params={"heldout": [t.uid for t in heldout]},
                     force=force, dry_run=dry_run)
    if dry_run and done is None:
        console.print(sft_stage.plan(Path(cfg.runs_dir) / cfg.run / label / "<fingerprint>", cfg, base).describe(),
                      markup=False, highlight=False)
    return done


def sft_iterate(cfg: Config, rounds: int | None = None, *, force=False, dry_run=False) -> Artifact | None:
    """Round k samples the pool with round k-1's model (round 1: ``sft.first_round_policy``),
    keeps correct diverse trajectories, and fine-tunes round k-1's model on them. Items the model
    solved leave the pool (a scripted policy solves nothing by itself: the pool stays). A round
    with nothing kept trains nothing and the previous model carries over."""
    rounds = rounds or cfg.sft.rounds
    turns = train_pool(cfg)
    model: Artifact | None = None
    pool: Artifact | None = None
    summary = []
    for k in range(1, rounds + 1):
        policy = cfg.sft.first_round_policy if k == 1 else "model"
        sampled = _need(sample(cfg, label=f"sample-r{k}", turns=turns, policy=policy, model=model, pool=pool,
                               round=k, force=force, dry_run=dry_run), f"sample-r{k}", dry_run)
        kept = _need(reject(cfg, sampled, label=f"reject-r{k}", round=k, force=force, dry_run=dry_run),
                     f"reject-r{k}", dry_run)
        if policy == "model":
            pool = kept
        if kept.metrics.get("kept", 0) == 0:
            console.print(f"[yellow]round {k}: no correct trajectory kept; the previous model carries over[/]")
            summary.append({"round": k, **_round_row(kept, None)})
            continue
        trained = _need(sft(cfg, kept, label=f"sft-r{k}", model=model, round=k, force=force, dry_run=dry_run),
                        f"sft-r{k}", dry_run)
        model = trained
        summary.append({"round": k, **_round_row(kept, trained)})
    _print_rounds(summary)
    return model


def _round_row(kept: Artifact, trained: Artifact | None) -> dict:
    m = kept.metrics
    t = trained.metrics if trained else {}
    return {"pool": m.get("items"), "solved": m.get("solved"), "kept": m.get("kept"),
            "train_loss": t.get("train_loss"), "heldout_ex": t.get("heldout", {}).get("ex"),
            "heldout_em": t.get("heldout", {}).get("em")}


def _print_rounds(rows: list[dict]) -> None:
    from rich.table import Table

    if not rows:
        return
    table = Table(title="self-taught SFT rounds")
    for column in rows[0]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*("" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(table)


# ---------------------------------------------------------------------------------------------
# Curriculum RL


def curriculum(cfg: Config, *, model: Artifact | None = None, force=False, dry_run=False) -> Artifact | None:
    """Stages of the RL pool; with ``curriculum.by=pass_rate`` or ``drop_solved``, the SFT model is sampled first."""
    turns = train_pool(cfg)
    inputs = {}
    if cfg.curriculum.by == "pass_rate" or (cfg.curriculum.drop_solved and model is not None):
        probe = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, n=max(cfg.sample.n, 2)))
        sampled = _need(sample(probe, label="sample-pool", turns=turns, policy="model", model=model,
                               force=force, dry_run=dry_run), "sample-pool", dry_run)
        inputs["sample"] = sampled
    return run_stage("curriculum", cfg, lambda ctx: curriculum_stage.run(ctx, turns, cfg.curriculum),
                     inputs=inputs, params={"items": [t.uid for t in turns]}, force=force, dry_run=dry_run)


def rl(cfg: Config, *, curriculum_art: Artifact, model: Artifact | None = None, engine: str | None = None,
       force=False, dry_run=False) -> Artifact | None:
    """One RL artifact per curriculum stage (``rl-c1``, ``rl-c2``, ...), each from the previous one's model.
    A dry run with the verl engine also prints every command and file of the stage."""
    from mtsql.stages import rl as rl_stage

    engine = rl_stage.pick_engine(engine or cfg.rl.engine)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, engine=engine))
    for k in range(1, len(cfg.curriculum.stages) + 1):
        turns = curriculum_stage.load_stage(curriculum_art.path, k)
        if not turns:
            console.print(f"[yellow]curriculum stage {k} is empty: skipped[/]")
            continue
        start = model_path(cfg, model, resolve=not dry_run)
        inputs = {"curriculum": curriculum_art, **({"model": model} if model else {})}
        work = lambda ctx, turns=turns, start=start, k=k: rl_stage.run(  # noqa: E731
            ctx, cfg, turns, engine=engine, base_model=start, stage=k)
        done = run_stage("rl", cfg, work, label=f"rl-c{k}", inputs=inputs, params={"stage": k}, round=k,
                         force=force, dry_run=dry_run)
        if done is not None and done.metrics.get("steps_without_signal"):
            console.print(f"[yellow]rl-c{k}: {done.metrics['steps_without_signal']} of {done.metrics['steps']} "
                          "steps had equal rewards in every group, so no policy gradient (raise rl.n, or "
                          "lower rl.temperature if every sample fails the protocol)[/]")
        if dry_run and done is None and engine == "verl":
            rl_stage.print_plan(cfg, turns, base_model=start, out=Path(cfg.runs_dir) / cfg.run / f"rl-c{k}", stage=k)
        model = _need(done, f"rl-c{k}", dry_run)
    return model


# ---------------------------------------------------------------------------------------------
# Evaluation and whole pipelines


def evaluate(cfg: Config, *, label: str, model: Artifact | None = None, force=False, dry_run=False) -> Artifact | None:
    """Score a model (greedy, or voting) on every eval dataset with the official metrics."""
    from mtsql.stages import evaluate as evaluate_stage

    datasets = {name: eval_turns(cfg, name) for name in cfg.data.eval_datasets}
    inputs = {"model": model} if model else {}
    work = lambda ctx: evaluate_stage.run_model(ctx, cfg, datasets, model=model_path(cfg, model))  # noqa: E731
    return run_stage("evaluate", cfg, work, label=label, inputs=inputs,
                     params={"items": {k: len(v) for k, v in datasets.items()}}, force=force, dry_run=dry_run)


@dataclass(frozen=True)
class Step:
    """One line of a pipeline file: a stage, which model it uses, and config overrides."""

    stage: str
    label: str | None = None
    model: str = "latest"  # base | sft | rl | latest (the newest trained model so far)
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    steps: tuple[Step, ...] = field(default_factory=tuple)


STEP_STAGES = ("sft-iterate", "curriculum", "rl", "evaluate", "report")


def load_pipeline(path: Path) -> Pipeline:
    from mtsql.config import build

    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise UsageError(f"cannot read pipeline {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: invalid YAML ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list):
        raise UsageError(f"{path}: a pipeline is a mapping with a 'steps' list")
    unknown = set(raw) - {"steps"}
    if unknown:
        raise UsageError(f"{path}: unknown top-level key(s) {sorted(unknown)}; a pipeline has only 'steps'")
    pipeline = Pipeline(tuple(build(Step, s, source=str(path), prefix=f"steps[{i}].") for i, s in enumerate(raw["steps"])))
    for i, step in enumerate(pipeline.steps):
        if step.stage not in STEP_STAGES:
            raise UsageError(f"{path}: steps[{i}].stage '{step.stage}' is not one of {', '.join(STEP_STAGES)}")
        if step.model not in ("base", "sft", "rl", "latest"):
            raise UsageError(f"{path}: steps[{i}].model must be base, sft, rl or latest")
    return pipeline


def run_pipeline(path: Path, config_path: Path | None, overrides: list[str], *, force=False, dry_run=False) -> None:
    """Run every step in order; finished stages are cache hits. Prints where the report is."""
    pipeline = load_pipeline(path)
    base_cfg = load_config(config_path, overrides)
    models: dict[str, Artifact | None] = {"base": None, "sft": None, "rl": None, "latest": None}
    console.print(f"[bold]{path}[/] with {config_path or 'defaults'}: run '{base_cfg.run}'" + (" (dry run)" if dry_run else ""))
    try:
        for step in pipeline.steps:
            cfg = load_config(config_path, [*overrides, *step.overrides]) if step.overrides else base_cfg
            if step.stage == "sft-iterate":
                models["sft"] = models["latest"] = sft_iterate(cfg, force=force, dry_run=dry_run)
            elif step.stage == "curriculum":
                models["curriculum"] = curriculum(cfg, model=models["sft"], force=force, dry_run=dry_run)
            elif step.stage == "rl":
                curriculum_art = _need(models.get("curriculum"), "curriculum", dry_run)
                if curriculum_art is None:
                    raise UsageError(f"{path}: an rl step needs a curriculum step before it")
                models["rl"] = models["latest"] = rl(cfg, curriculum_art=curriculum_art, model=models["sft"],
                                                     force=force, dry_run=dry_run)
            elif step.stage == "evaluate":
                evaluate(cfg, label=step.label or f"eval-{step.model}", model=models[step.model],
                         force=force, dry_run=dry_run)
            elif step.stage == "report" and not dry_run:
                from mtsql.report import build_report

                report_path = build_report(Path(cfg.runs_dir) / cfg.run)
                console.print(f"[bold green]report:[/] {report_path}")
    except Waiting as exc:
        waiting("(rest of the pipeline)", str(exc))


def find_model(cfg: Config, ref: str | None, *, auto: tuple[str, ...] = ("rl", "sft")) -> Artifact | None:
    """A ``--model`` reference: ``base``; ``sft`` / ``rl`` (the last round or stage of this run);
    an artifact label such as ``sft-r2``; or ``auto``/None: the first of ``auto`` this run has, else base
    (RL starts from ``auto=("sft",)``, so a rerun never starts from its own output)."""
    from mtsql.stages.runner import store_for

    store = store_for(cfg)
    labels = sorted((p.name for p in store.root.iterdir() if p.is_dir()), key=_label_order) if store.root.exists() else []
    if ref in (None, "auto"):
        ref = next((kind for kind in auto if any(name.startswith(f"{kind}-") for name in labels)), "base")
    if ref == "base":
        return None
    if ref in ("sft", "rl"):
        matching = [name for name in labels if name.startswith(f"{ref}-")]
        if not matching:
            raise UsageError(f"run '{cfg.run}' has no {ref} model yet; run `mtsql {'sft-iterate' if ref == 'sft' else 'rl'}` first")
        ref = matching[-1]
    artifact = store.latest(ref)
    if artifact is None or not (artifact.path / MODEL_DIR).is_dir():
        raise UsageError(f"run '{cfg.run}' has no model artifact '{ref}' (see `mtsql status {cfg.run}`)")
    return artifact


def _label_order(label: str) -> tuple[str, int]:
    stem, _, number = label.rpartition("-")
    return (stem, int(number[1:])) if number[1:].isdigit() else (label, 0)


def find_artifact(cfg: Config, label: str) -> Artifact:
    from mtsql.stages.runner import store_for

    artifact = store_for(cfg).latest(label)
    if artifact is None:
        raise UsageError(f"run '{cfg.run}' has no complete '{label}' artifact (see `mtsql status {cfg.run}`)")
    return artifact
