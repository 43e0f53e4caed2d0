"""Chaining stages: self-taught SFT rounds, curriculum RL, evaluation, and `mtsql run PIPELINE`.

Each function here decides *which* artifacts feed *which* stage; the stages themselves are the
modules of ``runner.STAGES``, run through ``runner.run_stage`` (fingerprinted, skipped when done,
planned by ``--dry-run``). In a dry run a stage that would run yields a ``Pending`` placeholder and
the plan goes on: later stages show ``<from LABEL>`` where they would read its outputs, and an
unknown outcome (how many trajectories a round keeps, which curriculum stages are empty) is
assumed to let every later step run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mtsql.app.config import Config, load_config
from mtsql.app.report import build_report
from mtsql.app.report.destination import destination
from mtsql.app.report.sections import report_spec
from mtsql.app.runner import STAGES, Pending, latest_input, run_stage, store_for
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.base.config import build, replace
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.paths import data_dir, label_name
from mtsql.base.user_yaml import read_yaml
from mtsql.core.data import per_dataset_groups
from mtsql.core.data.records import read_turns
from mtsql.core.results import RlStageResult
from mtsql.engines.rl_engines import pick_engine

console = Console(stderr=True)


# ---------------------------------------------------------------------------------------------
# Self-taught warm-start SFT


def sample(
    cfg: Config,
    *,
    key: ArtifactKey | None = None,
    label: str | None = None,
    policy: str | None = None,
    model=None,
    pool=None,
    attempts=None,
    force=False,
    dry_run=False,
) -> Artifact | Pending:
    """Roll out ``policy`` (default ``sample.policy``); a model policy samples ``model`` (None: base),
    ``own_mistakes`` keeps the first queries of the sample artifact ``attempts``. ``key`` / ``label``: as
    ``run_stage`` takes them."""
    if policy is not None:
        cfg = replace(cfg, sample={"policy": policy})
    inputs = {
        "model": model if cfg.sample.policy == "model" else None,
        "pool": pool,
        "attempts": attempts if cfg.sample.policy == "own_mistakes" else None,
    }
    return run_stage("sample", cfg, key=key, label=label, inputs=inputs, force=force, dry_run=dry_run)


def sft_iterate(
    cfg: Config,
    rounds: int | None = None,
    *,
    variant: str | None = None,
    trained: dict | None = None,
    attempts=None,
    force=False,
    dry_run=False,
) -> Artifact | Pending | None:
    """Round k samples the pool with round k-1's model (round 1: ``sft.first_round_policy``),
    keeps correct diverse trajectories, and fine-tunes round k-1's model on them. Items the model
    solved leave the pool (a scripted policy solves nothing by itself: the pool stays); once none is
    left, no round follows. A round with nothing kept trains nothing and the previous model carries over.
    A ``variant`` (a pipeline step's label) names its own labels (``sample-<variant>-r1``, ...); ``trained``,
    when given, receives each round's model by label (``{"sft-r1": ...}``); ``attempts``: the sample artifact
    whose first queries an ``own_mistakes`` first round keeps (``sample_attempts``)."""
    model = pool = None
    summary = []
    for k in range(1, (rounds or cfg.sft.rounds) + 1):
        if isinstance(pool, Artifact) and pool.metrics.get("unsolved") == 0:
            console.print(f"[yellow]round {k - 1} solved every item of its pool: no round {k}[/]")
            break
        policy = cfg.sft.first_round_policy if k == 1 else "model"
        sampled = sample(
            cfg,
            key=ArtifactKey("sample", k, variant),
            policy=policy,
            model=model,
            pool=pool,
            attempts=attempts,
            force=force,
            dry_run=dry_run,
        )
        kept = run_stage(
            "reject",
            cfg,
            key=ArtifactKey("reject", k, variant),
            inputs={"sample": sampled},
            force=force,
            dry_run=dry_run,
        )
        if policy == "model":
            pool = kept
        if isinstance(kept, Artifact) and kept.metrics.get("kept", 0) == 0:
            console.print(
                f"[yellow]round {k}: no correct trajectory kept; the previous model carries over[/]"
            )
            summary.append({"round": k, **_round_row(kept, None)})
            continue
        model = run_stage(
            "sft",
            cfg,
            key=ArtifactKey("sft", k, variant),
            inputs={"reject": kept, "model": model},
            force=force,
            dry_run=dry_run,
        )
        if trained is not None:
            trained[model.label] = model
        summary.append({"round": k, **_round_row(kept, model)})
    if not dry_run:
        _print_rounds(summary)
    return model


def sample_attempts(
    cfg: Config, model, *, variant: str | None, force=False, dry_run=False
) -> Artifact | Pending:
    """``model``'s own first queries on the training items for an ``own_mistakes`` round: one greedy sample
    each (as an evaluation decodes), as ``sample-attempts-<variant>``."""
    greedy = replace(cfg, sample={"n": 1, "temperature": 0.0})
    return sample(
        greedy,
        key=ArtifactKey("sample", variant="-".join(filter(None, ("attempts", variant)))),
        policy="model",
        model=model,
        force=force,
        dry_run=dry_run,
    )


def _round_row(kept: Artifact, trained: Artifact | Pending | None) -> dict:
    m = kept.metrics
    t = trained.metrics if trained is not None else {}
    return {
        "pool": m.get("items"),
        "solved": m.get("solved"),
        "kept": m.get("kept"),
        "train_loss": t.get("train_loss"),
        "heldout_ex": t.get("heldout", {}).get("ex"),
        "heldout_em": t.get("heldout", {}).get("em"),
    }


def _print_rounds(rows: list[dict]) -> None:
    if not rows:
        return
    table = Table(title="self-taught SFT rounds")
    for column in rows[0]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            *("" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values())
        )
    console.print(table)


# ---------------------------------------------------------------------------------------------
# Curriculum RL


def curriculum(cfg: Config, *, model=None, force=False, dry_run=False) -> Artifact | Pending:
    """Stages of the RL pool; with ``curriculum.by=pass_rate`` or ``drop_solved``, the SFT model is sampled
    first."""
    probe = None
    if cfg.curriculum.by == "pass_rate" or (cfg.curriculum.drop_solved and model is not None):
        probe = sample(
            replace(cfg, sample={"n": max(cfg.sample.n, 2)}),
            key=ArtifactKey("sample", variant="pool"),
            policy="model",
            model=model,
            force=force,
            dry_run=dry_run,
        )
    return run_stage("curriculum", cfg, inputs={"sample": probe}, force=force, dry_run=dry_run)


def rl(
    cfg: Config,
    *,
    curriculum_art,
    model=None,
    engine: str | None = None,
    variant: str | None = None,
    force=False,
    dry_run=False,
) -> Artifact | Pending | None:
    """One RL artifact per curriculum stage (``rl-c1``, ``rl-c2``, ...; a ``variant``'s ``rl-<variant>-c1``,
    ...), each from the previous one's model; returns the last one (None when every stage was empty:
    nothing was trained)."""
    cfg = replace(cfg, rl={"engine": pick_engine(engine or cfg.rl.engine)})
    trained = None
    for k in range(1, len(cfg.curriculum.stages) + 1):
        if isinstance(curriculum_art, Artifact) and not read_turns(curriculum_art.path / f"stage-{k}.jsonl"):
            console.print(f"[yellow]curriculum stage {k} is empty: skipped[/]")
            continue
        key = ArtifactKey("rl", k, variant)
        done = run_stage(
            "rl",
            cfg,
            key=key,
            inputs={"curriculum": curriculum_art, "model": model},
            params={"stage": k},
            force=force,
            dry_run=dry_run,
        )
        if isinstance(done, Artifact) and (result := rl_result_of(done)).steps_without_signal:
            console.print(
                f"[yellow]{key.label}: {result.steps_without_signal} of {result.steps} "
                "steps had equal rewards in every group, so no policy gradient (raise rl.n, or "
                "lower rl.temperature if every sample fails the protocol)[/]"
            )
        model = trained = done
    return trained


def rl_result_of(art: Artifact) -> RlStageResult:
    """The typed metrics of an rl artifact, either engine's; one written in another shape is refused in
    one line."""
    try:
        return RlStageResult.from_dict(art.metrics)
    except ValueError as exc:
        raise UsageError(
            f"{art.path}: {exc} (written by another mtsql); delete that folder and rerun its stage"
        ) from None


# ---------------------------------------------------------------------------------------------
# Evaluation and whole pipelines


def evaluate(
    cfg: Config, *, label: str | None = None, model=None, force=False, dry_run=False
) -> Artifact | Pending:
    """Score a model (greedy, or voting) on every eval dataset with the official metrics, as the artifact
    ``eval-<the model's label>`` (``label``: another name); its key records which model it scores."""
    key = ArtifactKey.evaluation(model.key if model is not None else None, name=label)
    return run_stage("evaluate", cfg, key=key, inputs={"model": model}, force=force, dry_run=dry_run)


MODEL_REFS = ("base", "sft", "rl", "latest")  # latest: the newest trained model so far
COMPOSITE_STEPS = ("sft-iterate", "rl", "report")


@dataclass(frozen=True)
class Step:
    """One line of a pipeline file: a stage, which model it uses, and config overrides.

    ``model``: ``base``, ``sft``, ``rl``, ``latest``, one round's model of an earlier ``sft-iterate`` step
    (``sft-r1``), or a variant's model. ``label``: the artifact's label; on an ``sft-iterate`` or ``rl``
    step, a variant name (a word) that gives its artifacts labels of their own (``sft-<label>-r1``,
    ``rl-<label>-c1``) and its model the reference ``sft-<label>`` / ``rl-<label>``. A variant does not
    replace the pipeline's ``sft``, ``rl`` or ``latest`` model (an RL variant starts from ``sft``, as
    ``rl`` does).
    ``attempts`` (``sft-iterate`` only): the model whose own first queries on the training items an
    ``own_mistakes`` first round keeps; the step samples them first (``sample_attempts``)."""

    stage: str
    label: str | None = None
    model: str = "latest"
    overrides: tuple[str, ...] = ()
    attempts: str | None = None


@dataclass(frozen=True)
class Pipeline:
    """The steps of a pipeline file, and the experiment sections its report adds (``report``: section name ->
    its settings, from the file's ``report`` key; ``report.sections.report_spec``)."""

    steps: tuple[Step, ...] = field(default_factory=tuple)
    report: dict = field(default_factory=dict)


def load_pipeline(path: Path) -> Pipeline:
    """The steps of a pipeline file, checked as a whole: known stages, models that an earlier step trains,
    distinct variant labels, a curriculum step before any rl step (``step_configs`` checks each step's
    config); and its ``report`` key, the experiment sections the report adds (``report_spec``)."""
    try:
        raw = read_yaml(Path(path)) or {}
    except OSError as exc:
        raise UsageError(f"cannot read pipeline {path}: {exc.strerror}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list) or not raw["steps"]:
        raise UsageError(f"{path}: a pipeline is a mapping with a 'steps' list of one or more steps")
    unknown = set(raw) - {"steps", "report"}
    if unknown:
        raise UsageError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}; a pipeline has 'steps' and "
            "optionally 'report'"
        )
    pipeline = Pipeline(
        tuple(build(Step, s, source=str(path), prefix=f"steps[{i}].") for i, s in enumerate(raw["steps"])),
        report_spec(raw.get("report"), str(path)),
    )
    variants: list[str] = []  # the models of the variant steps so far
    rounds = False  # an sft-iterate step (not a variant) came before: its rounds' models may be named
    curriculum = False  # a curriculum step came before: an rl step trains on its stages
    for i, step in enumerate(pipeline.steps):
        if step.stage not in (*COMPOSITE_STEPS, *STAGES):
            raise UsageError(
                f"{path}: steps[{i}].stage '{step.stage}' is not one of "
                f"{', '.join((*COMPOSITE_STEPS, *STAGES))}"
            )
        if step.stage == "rl" and not curriculum:
            raise UsageError(f"{path}: steps[{i}] (rl) needs a curriculum step before it")
        curriculum = curriculum or step.stage == "curriculum"
        if step.model not in (*MODEL_REFS, *variants) and not (rounds and ROUND_REF.fullmatch(step.model)):
            raise UsageError(
                f"{path}: steps[{i}].model must be one of {', '.join((*MODEL_REFS, *variants))}"
                + (", sft-r<k>" if rounds else "")
                + " (a round's or a variant's model after the "
                "step that trains it)"
            )
        if step.attempts is not None and (
            step.stage != "sft-iterate" or step.attempts not in (*MODEL_REFS, *variants)
        ):
            raise UsageError(
                f"{path}: steps[{i}].attempts names the model whose first queries an sft-iterate step "
                f"keeps: one of {', '.join((*MODEL_REFS, *variants))}, on an sft-iterate step"
            )
        rounds = rounds or (step.stage == "sft-iterate" and step.label is None)
        if step.stage in TRAINS and step.label is not None:
            if not VARIANT.fullmatch(step.label):
                raise UsageError(
                    f"{path}: steps[{i}].label '{step.label}' of a {step.stage} step names a variant: "
                    "one word of lower-case letters and digits, such as short or outcome"
                )
            ref = f"{TRAINS[step.stage]}-{step.label}"
            if ref in variants:
                raise UsageError(
                    f"{path}: steps[{i}]: a second {step.stage} step labelled '{step.label}'; "
                    "give each variant its own label"
                )
            variants.append(ref)
    return pipeline


TRAINS = {"sft-iterate": "sft", "rl": "rl"}  # the pipeline steps that train a model, and its kind
ROUND_REF = re.compile(r"sft-r[1-9][0-9]*")  # one self-taught round's model
VARIANT = re.compile(
    r"[a-z][a-z0-9]*"
)  # a variant label: one word, so sft-<variant>-r1 reads back unambiguously
STORAGE_KEYS = ("run", "runs_dir")  # what a step may not change: its artifacts belong to the pipeline's run


def step_configs(
    pipeline: Pipeline, path: Path, config_path: Path | None, overrides: list[str]
) -> list[Config]:
    """Each step's config (the profile, ``overrides``, then the step's own), all loaded and checked before
    the first step runs: a step's invalid override or label is refused naming the step, a step may not send
    its artifacts outside the pipeline's run, and no two steps write the same label (the second would
    replace the first's artifact as that label's latest). Every step's ``run`` and ``runs_dir`` are the
    pipeline's."""
    base_cfg = load_config(config_path, overrides)
    configs, writers = [], {}
    for i, step in enumerate(pipeline.steps):
        where = f"{path}: steps[{i}] ({step.stage})"
        moved = [item for item in step.overrides if item.partition("=")[0].strip() in STORAGE_KEYS]
        if moved:
            raise UsageError(
                f"{where}: override {moved[0]!r} would put this step's artifacts outside run "
                f"'{base_cfg.run}'; set run / runs_dir for the whole pipeline, or run this step as a "
                "pipeline of its own"
            )
        try:
            cfg = load_config(config_path, [*overrides, *step.overrides]) if step.overrides else base_cfg
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        for label in _labels_written(step, cfg):
            try:
                label_name(label)
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            if label in writers:
                raise UsageError(
                    f"{where} writes label '{label}', which steps[{writers[label]}] writes too, so it "
                    "would replace that step's artifact: give each step a label of its own"
                )
            writers[label] = i
        configs.append(cfg)
    return configs


def _labels_written(step: Step, cfg: Config) -> list[str]:
    """The labels of the artifacts a step makes (as the functions above key them)."""
    if step.stage == "sft-iterate":
        attempts = [ArtifactKey("sample", variant="-".join(filter(None, ("attempts", step.label)))).label]
        return [
            *(attempts if step.attempts else []),
            *(
                ArtifactKey(stage, k, step.label).label
                for k in range(1, cfg.sft.rounds + 1)
                for stage in ("sample", "reject", "sft")
            ),
        ]
    if step.stage == "rl":
        return [ArtifactKey("rl", k, step.label).label for k in range(1, len(cfg.curriculum.stages) + 1)]
    if step.stage == "curriculum":
        return ["curriculum"]
    if step.stage == "evaluate":
        return [step.label or f"eval-{step.model}"]
    return [] if step.stage == "report" else [step.label or step.stage]


def _check_model_refs(pipeline: Pipeline, path: Path, cfg: Config) -> None:
    """Before anything runs: every evaluation of ``sft`` or ``rl`` follows a step that trains that
    model, or the run already has one."""
    store = store_for(cfg)
    have = {kind for kind in TRAINS.values() if store.latest_of(kind) is not None}
    for i, step in enumerate(pipeline.steps):
        if step.stage == "evaluate" and step.model in TRAINS.values() and step.model not in have:
            _missing_model(f"{path}: steps[{i}] (evaluate)", step.model, cfg)
        if (
            step.label is None or step.stage not in TRAINS
        ):  # a variant does not make the pipeline's sft or rl model
            have.add(TRAINS.get(step.stage, "base"))


def _missing_model(where: str, ref: str, cfg: Config):
    trainer = "an sft-iterate step" if ref == "sft" else "curriculum and rl steps"
    raise UsageError(
        f"{where} uses model '{ref}', but no step before it trains one and run '{cfg.run}' has none: "
        f"add {trainer} before it, or use model: base"
    )


def _model(models: dict, ref: str, cfg: Config, where: str, *, required: bool = False):
    """The model a step uses: the one an earlier step of this pipeline trained, else (for ``sft`` and
    ``rl``) the run's latest, as the stage commands pick it. A curriculum or RL step without an SFT
    model starts from the base model, as ``mtsql rl`` does; an evaluation of ``sft`` or ``rl`` must
    find that model, so that its label never names a model it did not score."""
    if ref not in MODEL_REFS:  # a round's or a variant's model, trained by an earlier step of this pipeline
        if models.get(ref) is None and required:
            raise StageFailed(
                f"{where}: no earlier step trained model '{ref}' (its round did not run or kept no "
                "trajectory, or its curriculum stages were empty), so there is no model to use"
            )
        return models.get(ref)
    if models[ref] is not None or ref not in ("sft", "rl"):
        return models[ref]
    store = store_for(cfg)
    if store.latest_of(ref) is not None:
        return store.model(ref)
    return _missing_model(where, ref, cfg) if required else None


def _keep_model(models: dict, kind: str, variant: str | None, trained) -> None:
    """Record what a training step made: the pipeline's ``kind`` and ``latest`` model, or a variant's."""
    if variant:
        models[f"{kind}-{variant}"] = trained
    else:
        models[kind] = models["latest"] = trained


def run_pipeline(
    path: Path, config_path: Path | None, overrides: list[str], *, force=False, dry_run=False
) -> None:
    """Run every step in order; finished stages are cache hits. Prints where the report is.

    ``sft-iterate`` runs the SFT rounds, ``curriculum`` (with the SFT model) and ``rl`` the curriculum
    RL stages (a labelled one: a variant, see ``Step``), ``evaluate`` a model picked by the step's
    ``model``, ``report`` builds the report; any other stage of ``runner.STAGES`` runs on the latest
    artifacts of its ``INPUTS``' default labels (the ones this pipeline made first). With
    ``data.per_dataset`` and more than one group of ``data.per_dataset_groups``, the whole pipeline runs
    once per group, as run ``<run>-<train dataset>``.
    Every step of every group is checked (``step_configs``, ``_check_model_refs``, the report's folder) before
    the first runs."""
    pipeline = load_pipeline(path)
    base_cfg = load_config(config_path, overrides)
    groups = (
        per_dataset_groups(base_cfg.data, data_dir(base_cfg.data.root)) if base_cfg.data.per_dataset else []
    )
    runs = (
        [(None, overrides)]
        if len(groups) < 2
        else [
            (
                f"[bold]{train}[/]: a model trained on {train}, scored on {', '.join(evals)}",
                [
                    *overrides,
                    f"run={base_cfg.run}-{train}",
                    f"data.train_dataset={train}",
                    f"data.eval_datasets=[{', '.join(evals)}]",
                    "data.per_dataset=false",
                ],
            )
            for train, evals in groups
        ]
    )
    checked = [(title, step_configs(pipeline, path, config_path, group)) for title, group in runs]
    for _, configs in checked:
        _check_model_refs(pipeline, path, configs[0])
        if any(step.stage == "report" for step in pipeline.steps):
            destination(
                store_for(configs[0]).root, None
            )  # a report it could not write is refused before any work
    for title, configs in checked:
        if title:
            console.print(title)
        _run_steps(pipeline, path, config_path, configs, force=force, dry_run=dry_run)


def _run_steps(
    pipeline: Pipeline,
    path: Path,
    config_path: Path | None,
    configs: list[Config],
    *,
    force: bool,
    dry_run: bool,
) -> None:
    models: dict[str, object] = dict.fromkeys(MODEL_REFS)
    made: dict[str, object] = {}
    what = f"with {config_path or 'defaults'}: run '{configs[0].run}'" + (" (dry run)" if dry_run else "")
    console.print(f"[bold]{escape(str(path))}[/] {escape(what)}", soft_wrap=True)
    for i, (step, cfg) in enumerate(zip(pipeline.steps, configs, strict=True)):
        where = f"{path}: steps[{i}] ({step.stage})"
        if step.stage == "sft-iterate":
            rounds: dict = {}
            attempts = (
                sample_attempts(
                    cfg,
                    _model(models, step.attempts, cfg, where, required=True),
                    variant=step.label,
                    force=force,
                    dry_run=dry_run,
                )
                if step.attempts
                else None
            )
            trained = sft_iterate(
                cfg, variant=step.label, trained=rounds, attempts=attempts, force=force, dry_run=dry_run
            )
            _keep_model(models, "sft", step.label, trained)
            if step.label is None:
                models.update(rounds)
        elif step.stage == "curriculum":
            made["curriculum"] = curriculum(
                cfg, model=_model(models, "sft", cfg, where), force=force, dry_run=dry_run
            )
        elif step.stage == "rl":
            trained = rl(
                cfg,
                curriculum_art=made["curriculum"],
                model=_model(models, "sft", cfg, where),
                variant=step.label,
                force=force,
                dry_run=dry_run,
            )
            _keep_model(models, "rl", step.label, trained)
        elif step.stage == "evaluate":
            evaluate(
                cfg,
                label=step.label or f"eval-{step.model}",
                model=_model(models, step.model, cfg, where, required=True),
                force=force,
                dry_run=dry_run,
            )
        elif step.stage == "report":
            if dry_run:
                built = store_for(cfg).root / "report" / "report.md"
                console.print(
                    f"  {'report':<18} {'':12}  will be built: {built}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            else:
                built = build_report(store_for(cfg).root, sections=pipeline.report)
                console.print(f"[bold green]report:[/] {escape(str(built))}")
        else:
            store = store_for(cfg)
            inputs = {
                name: made.get(default) or latest_input(store, default, dry_run=dry_run)
                for name, default in STAGES[step.stage].INPUTS.items()
                if default is not None
            }
            made[step.label or step.stage] = run_stage(
                step.stage, cfg, label=step.label, inputs=inputs, force=force, dry_run=dry_run
            )
