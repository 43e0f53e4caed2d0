"""The `mtsql` command line: thin wrappers that parse, load the config and call a stage or pipeline."""

from __future__ import annotations

import errno
import inspect
import io
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from mtsql.app import pipeline
from mtsql.app.config import Config, load_config
from mtsql.app.evaluate_command import run_evaluate
from mtsql.app.export import FORMATS, export_run
from mtsql.app.report import build_report
from mtsql.app.runner import STAGES, latest_input, run_stage, runs_root, store_for
from mtsql.app.status import run_folder, status_table
from mtsql.app.trajectory_text import find_trajectory, render_trajectory
from mtsql.base.artifacts import PARTIAL, Artifact, StageInterrupted, Store, verify
from mtsql.base.config import replace, to_dict
from mtsql.base.errors import MtsqlError, UsageError
from mtsql.base.paths import home_dir, user_path
from mtsql.base.progress import track
from mtsql.base.run_folders import strays
from mtsql.base.slices import CURRICULUM_LABELS
from mtsql.core.data import data_root
from mtsql.core.data.check import check_split
from mtsql.core.sql.evaluation import EvaluateOptions
from mtsql.engines.models import registry

console = Console()
err_console = Console(stderr=True)


INTERRUPTED = 130  # the exit code of Ctrl-C (128 + SIGINT); SIGTERM's is 143
_stopped_by = [signal.SIGINT]  # the signal that interrupted the command
_MAIN_PID = os.getpid()


def _terminate(signum, frame) -> None:
    """SIGTERM (``kill``, a batch system's time limit) stops a command as Ctrl-C does: the stage records
    the attempt as interrupted and keeps its ``.partial`` folder, and one line says so. A forked worker
    (a scoring pool's) that inherited this handler ends as SIGTERM ends it by default."""
    if os.getpid() != _MAIN_PID:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _stopped_by[0] = signal.Signals(signum)
    raise KeyboardInterrupt


def _interrupted_code() -> int:
    return 128 + _stopped_by[0]


def _how() -> str:
    return "interrupted" if _stopped_by[0] == signal.SIGINT else f"stopped by {_stopped_by[0].name}"


class InterruptibleGroup(TyperGroup):
    """The top command group: Ctrl-C (or SIGTERM) says what it left behind before exiting 130 (143)
    (Typer itself turns ``KeyboardInterrupt`` into a silent exit 130 before ``main`` could see it)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StageInterrupted as exc:
            how = _how()
            err_console.print(
                f"{how}: {exc.label} left as {exc.partial}; rerun to resume",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(_interrupted_code()) from None
        except KeyboardInterrupt:
            how = _how()
            err_console.print(
                f"{how}: finished stages are kept; rerun the same command to resume",
                markup=False,
                highlight=False,
            )
            raise typer.Exit(_interrupted_code()) from None


app = typer.Typer(
    cls=InterruptibleGroup,
    help="Reproduce MTSQL-R1: long-horizon multi-turn text-to-SQL with self-taught SFT and curriculum RL.\n\n"
    "Stages: sample -> reject -> sft (sft-iterate) -> curriculum -> rl -> evaluate -> report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
data_app = typer.Typer(help="Datasets: check a split, verify a run's artifacts.", no_args_is_help=True)
models_app = typer.Typer(
    help="Offline models: pull SmolLM2, make a tiny Qwen3, list the cache.", no_args_is_help=True
)
app.add_typer(data_app, name="data")
app.add_typer(models_app, name="models")

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Profile YAML (configs/profiles/*.yaml).")
]
Overrides = Annotated[
    list[str] | None, typer.Argument(help="Config overrides: section.key=value ...", show_default=False)
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Rerun even when a complete artifact exists.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan (and commands), run nothing.")]


ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="base, sft, rl (this run's last round/stage), a label (sft-r2, rl-c1) or auto (the newest "
        "trained model; for curriculum and rl the last SFT round).",
    ),
]
LabelOpt = Annotated[str | None, typer.Option(help="Artifact label (default: the stage name).")]


def _cfg(config: Path | None, overrides: list[str] | None) -> Config:
    return load_config(config, overrides or [])


RunArg = Annotated[
    str | None,
    typer.Argument(
        help="Run name under runs_dir, or a run folder (default: the profile's run).", show_default=False
    ),
]


def _split_run(run: str | None, overrides: list[str] | None) -> tuple[str | None, list[str]]:
    """RUN and the overrides: a first argument such as ``runs_dir=x`` is an override, not a run name."""
    if run is not None and "=" in run and not Path(run).is_dir():
        return None, [run, *(overrides or [])]
    return run, list(overrides or [])


def _run_folder(run: str | None, config: Path | None, overrides: list[str] | None) -> Path:
    """The run folder a reading command works on, addressed as the stage commands address it: RUN (a
    folder, or a name under the profile's ``runs_dir``), else the profile's ``run``."""
    run, overrides = _split_run(run, overrides)
    cfg = _cfg(config, overrides)
    return run_folder(run or cfg.run, user_path(cfg.runs_dir))


def _print_table(title: str, artifact) -> None:
    """A stage's ``table`` metric (counts by bucket), when it has one."""
    if isinstance(artifact, Artifact) and "table" in artifact.metrics:
        console.print(counts_table(title, artifact.metrics["table"]))


@app.command()
def sample(
    config: ConfigOpt = None,
    overrides: Overrides = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="model, gold, gold_with_correction, gold_grounded or own_mistakes (default: sample.policy)."
        ),
    ] = None,
    dataset: Annotated[
        str | None, typer.Option(help="Dataset to sample (default: data.train_dataset).")
    ] = None,
    split: Annotated[str | None, typer.Option(help="train (the training pool) or dev.")] = None,
    attempts: Annotated[
        str | None,
        typer.Option(
            help="own_mistakes: label of a sample artifact of the model whose first queries to keep."
        ),
    ] = None,
    model: ModelOpt = "auto",
    label: LabelOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Roll out trajectories with a model or a scripted policy (writes trajectories.jsonl)."""
    cfg = _cfg(
        config,
        [
            *(overrides or []),
            *([f"data.train_dataset={dataset}"] if dataset else []),
            *([f"data.train_split={split}"] if split else []),
            *([f"sample.policy={policy}"] if policy else []),
        ],
    )
    store = store_for(cfg)
    pipeline.sample(
        cfg,
        label=label,
        model=store.model(model),
        force=force,
        dry_run=dry_run,
        attempts=latest_input(store, attempts, dry_run=dry_run) if attempts else None,
    )


@app.command()
def sft(
    config: ConfigOpt = None,
    overrides: Overrides = None,
    source: Annotated[
        str, typer.Option("--from", help="Label of the reject artifact to train on.")
    ] = "reject",
    model: ModelOpt = "base",
    label: LabelOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Fine-tune with LLaMA-Factory on kept tool-integrated trajectories (tool outputs masked)."""
    cfg = _cfg(config, overrides)
    store = store_for(cfg)
    run_stage(
        "sft",
        cfg,
        label=label,
        inputs={"reject": latest_input(store, source, dry_run=dry_run), "model": store.model(model)},
        force=force,
        dry_run=dry_run,
    )


@app.command("sft-iterate")
def sft_iterate(
    config: ConfigOpt = None,
    overrides: Overrides = None,
    rounds: Annotated[
        int | None, typer.Option(help="Number of self-taught rounds (default: sft.rounds).")
    ] = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Self-taught warm-start: sample -> reject -> sft, repeated for several rounds."""
    cfg = _cfg(config, [*(overrides or []), *([f"sft.rounds={rounds}"] if rounds is not None else [])])
    pipeline.sft_iterate(cfg, force=force, dry_run=dry_run)


@app.command()
def curriculum(
    config: ConfigOpt = None,
    overrides: Overrides = None,
    model: ModelOpt = "auto",
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Partition the RL pool into ordered difficulty stages."""
    cfg = _cfg(config, overrides)
    done = pipeline.curriculum(
        cfg, model=store_for(cfg).model(model, auto=("sft",)), force=force, dry_run=dry_run
    )
    _print_table("curriculum stages", done)


@app.command()
def rl(
    config: ConfigOpt = None,
    overrides: Overrides = None,
    use_curriculum: Annotated[
        bool,
        typer.Option(
            "--curriculum",
            help="Train stage by stage on the curriculum (else one stage with the whole pool).",
        ),
    ] = False,
    engine: Annotated[
        str | None, typer.Option(help="verl (GPU, Ray) or local (CPU / one GPU); default rl.engine.")
    ] = None,
    model: ModelOpt = "auto",
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Multi-turn GRPO with outcome + process rewards (verl on GPUs, a local engine on CPU)."""
    extra = [f"rl.engine={engine}"] if engine else []
    cfg = _cfg(config, [*(overrides or []), *extra])
    if not use_curriculum:
        cfg = replace(cfg, curriculum={"stages": (CURRICULUM_LABELS[cfg.curriculum.by],)})
    start = store_for(cfg).model(model, auto=("sft",))
    plan = pipeline.curriculum(cfg, model=start, force=force, dry_run=dry_run)
    pipeline.rl(cfg, curriculum_art=plan, model=start, force=force, dry_run=dry_run)


@app.command()
def evaluate(
    dataset: Annotated[
        str | None,
        typer.Option(
            help="sparc, cosql, spider or bird (picks the gold and tables; "
            "bird: BIRD's EX by difficulty, docs/bird.md)."
        ),
    ] = None,
    pred: Annotated[
        Path | None,
        typer.Option(
            help="Predictions, official format: one SQL a line, a blank line "
            "between interactions (none for spider); bird: BIRD's prediction "
            "JSON too."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for items.jsonl and summary.json.")] = None,
    gold: Annotated[
        Path | None,
        typer.Option(
            help="Gold file (default: dev_gold.txt in <data>/<dataset>); bird: "
            "a BIRD split folder (default <data>/bird/dev)."
        ),
    ] = None,
    db_dir: Annotated[Path | None, typer.Option(help="Databases folder (default: <data>/database).")] = None,
    tables: Annotated[
        Path | None, typer.Option(help="tables.json (default: the one in <data>/<dataset>).")
    ] = None,
    etype: Annotated[str, typer.Option(help="all, match (exact set match) or exec (execution).")] = "all",
    exec_semantics: Annotated[str | None, typer.Option(help="testsuite (default) or sparc.")] = None,
    semantics: Annotated[str | None, typer.Option(help="official (default) or strict parser.")] = None,
    allow_mismatch: Annotated[
        bool, typer.Option("--allow-mismatch", help="Score gold turns without a prediction as 0.")
    ] = False,
    workers: Annotated[int, typer.Option(help="Scoring processes (0: one per core).")] = 0,
    gold_cache: Annotated[
        bool, typer.Option(help="Keep gold parses and results in $MTSQL_HOME/cache/gold.")
    ] = True,
    model: ModelOpt = None,
    label: Annotated[str | None, typer.Option(help="Artifact label (with --model).")] = None,
    config: ConfigOpt = None,
    overrides: Overrides = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Score with the official metrics: exact set match, execution, question and interaction.

    With --pred: score an official-format prediction file. Without: evaluate a model of the run
    (--model) on the profile's eval datasets, greedy or with evaluate.vote samples
    (evaluate.samples: pass@k)."""
    cfg = _cfg(config, overrides)
    if pred is None:
        pipeline.evaluate(
            cfg, label=label, model=store_for(cfg).model(model or "auto"), force=force, dry_run=dry_run
        )
        return
    if dataset is None or out is None:
        raise UsageError("evaluate --pred needs --dataset and --out")
    options = EvaluateOptions.from_config(
        cfg.sql,
        etype=etype,
        exec_semantics=exec_semantics,
        semantics=semantics,
        workers=workers,
        gold_cache=gold_cache,
    )
    run_evaluate(
        dataset,
        pred,
        out,
        console=console,
        runs_dir=runs_root(cfg),
        data_root=data_root(cfg.data),
        gold_path=gold,
        db_dir=db_dir,
        tables_path=tables,
        options=options,
        allow_mismatch=allow_mismatch,
    )


@app.command()
def report(
    run: RunArg = None,
    overrides: Overrides = None,
    config: ConfigOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Report folder (default: <run>/report; elsewhere for a read-only run)."),
    ] = None,
    steps: Annotated[
        Path | None,
        typer.Option(
            "--pipeline",
            help="The pipeline file that made the run: its report key adds the experiment's sections.",
        ),
    ] = None,
) -> None:
    """Build a markdown report with plots from a run's manifests and metrics."""
    sections = pipeline.load_pipeline(steps).report if steps is not None else None
    folder = _run_folder(run, config, overrides)
    runs_dir = runs_root(_cfg(config, _split_run(run, overrides)[1]))
    console.print(f"report: {build_report(folder, out, runs_dir, sections)}", markup=False)


@app.command()
def export(
    run: RunArg = None,
    overrides: Overrides = None,
    config: ConfigOpt = None,
    out: Annotated[Path | None, typer.Option(help="Export folder (default: <run>/export).")] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"{' or '.join(FORMATS)}.")] = "parquet",
) -> None:
    """Every evaluation of a run as two tables (per official item, per trajectory), Parquet or CSV."""
    for name, path in export_run(_run_folder(run, config, overrides), out, fmt).items():
        console.print(f"{name}: {path}", markup=False, highlight=False)


@app.command("run")
def run_steps(
    steps: Annotated[Path, typer.Argument(metavar="PIPELINE", help="pipelines/*.yaml")],
    config: ConfigOpt = None,
    overrides: Overrides = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Run a whole pipeline (e.g. pipelines/reproduce.yaml), skipping stages already done."""
    pipeline.run_pipeline(steps, config, overrides or [], force=force, dry_run=dry_run)


@app.command()
def status(run: RunArg = None, overrides: Overrides = None, config: ConfigOpt = None) -> None:
    """A run's artifacts in pipeline order: state, fingerprint, created, wall time, what each holds.
    Without RUN, --config or run=: the runs under runs_dir."""
    run, overrides = _split_run(run, overrides)
    if run is None and config is None and not any(o.startswith("run=") for o in overrides):
        runs_dir = runs_root(_cfg(None, overrides))
        runs = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
        if not runs:
            console.print(f"no runs under {runs_dir}/", markup=False)
            return
        for name in runs:
            console.print(name, markup=False, highlight=False)
        return
    console.print(status_table(_run_folder(run, config, overrides)))


def stage_command(name: str):
    """A command for stage ``name`` built from its module: one ``--<input>`` label option per entry of
    its ``INPUTS`` (default: the label it names), plus the options every stage command has."""
    module = STAGES[name]
    common = [
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigOpt),
        inspect.Parameter("overrides", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Overrides),
        inspect.Parameter("label", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=LabelOpt),
        inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=ForceOpt),
        inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=DryRunOpt),
    ]
    inputs = [
        inspect.Parameter(
            key,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[
                str | None, typer.Option(f"--{key}", help=f"Label of the {key} artifact to read.")
            ],
        )
        for key, default in module.INPUTS.items()
    ]

    def command(*, config, overrides, label, force, dry_run, **labels) -> None:
        cfg = _cfg(config, overrides)
        store = store_for(cfg)
        found = {key: latest_input(store, value, dry_run=dry_run) for key, value in labels.items() if value}
        _print_table(
            f"{label or name}", run_stage(name, cfg, label=label, inputs=found, force=force, dry_run=dry_run)
        )

    command.__signature__ = inspect.Signature(common + inputs)
    command.__doc__ = (module.__doc__ or name).split("\n\n")[0].strip()
    return command


app.command("reject")(stage_command("reject"))
for _name in STAGES.keys() - {
    c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands
}:
    app.command(_name)(stage_command(_name))  # a stage without a command of its own gets the generic one


@data_app.command("check")
def data_check(
    dataset: Annotated[str, typer.Option(help="sparc, cosql, spider or bird")],
    split: Annotated[str, typer.Option(help="dev or train")] = "dev",
    root: Annotated[
        Path | None, typer.Option(help="Data folder (default $MTSQL_DATA, else the fixture).")
    ] = None,
) -> None:
    """Counts, missing databases, gold queries that fail or return nothing (vacuous), as a table."""
    report_ = check_split(
        dataset, split, root, progress=lambda xs: track(xs, "executing gold", console=err_console)
    )
    if dataset == "bird":
        console.print(bird_check_table(report_))
        return
    table = Table(title=escape(f"{dataset} {split} ({report_['root']})"), show_header=False)
    unit = report_["unit"]
    for key in (
        "interactions",
        unit,
        "databases",
        f"{unit}_without_database",
        "gold_fail_as_written",
        "gold_vacuous",
    ):
        if key in report_:
            table.add_row(key.replace("_", " "), str(report_[key]))
    missing = ", ".join(f"{db} ({n} {unit})" for db, n in report_["missing_databases"].items())
    table.add_row("missing databases", escape(missing) or "none")
    unreadable = report_["unreadable_databases"]
    table.add_row("unreadable databases", str(len(unreadable)) if unreadable else "none")
    for db, found in unreadable.items():
        table.add_row("", escape(f"{db} ({found[unit]} {unit}): {found['why']}"))
    differing = report_["schema_differences"]
    table.add_row("tables.json differs from database", escape(", ".join(differing)) or "none")
    for db_id, differences in differing.items():
        table.add_row("", escape(f"{db_id}: {'; '.join(differences)}"))
    failing = report_["gold_fail_after_joining_operators"]
    table.add_row("gold fail after joining '> ='", str(len(failing)))
    for item in failing:
        table.add_row("", escape(f"{item['where']} ({item['db_id']}): {item['message']}"))
    if "turns_per_interaction" in report_:
        table.add_row(
            "turns per interaction",
            ", ".join(f"{k}: {v}" for k, v in report_["turns_per_interaction"].items()),
        )
    console.print(table)


def bird_check_table(report_: dict) -> Table:
    table = Table(title=escape(f"bird {report_['split']} ({report_['root']})"), show_header=False)
    for key in ("questions", "databases", "questions_without_database", "with_evidence"):
        table.add_row(key.replace("_", " "), str(report_[key]))
    table.add_row("difficulty", ", ".join(f"{k}: {v}" for k, v in report_["difficulty"].items()))
    missing = ", ".join(f"{db} ({n} questions)" for db, n in report_["missing_databases"].items())
    table.add_row("missing databases", escape(missing) or "none")
    for key, label in (
        ("gold_fail", "gold fail"),
        ("gold_empty", "gold return nothing"),
        ("gold_slow", f"gold slower than {report_['slow_s']:g} s"),
    ):
        table.add_row(label, str(len(report_[key])))
        for item in report_[key][:20]:
            detail = item.get("message") or (f"{item['seconds']} s" if "seconds" in item else "")
            table.add_row("", escape(f"question {item['question_id']} ({item['db_id']}) {detail}".strip()))
    return table


@data_app.command("verify")
def data_verify(run: RunArg = None, overrides: Overrides = None, config: ConfigOpt = None) -> None:
    """Check every artifact's files against the hashes in its manifest."""
    folder = _run_folder(run, config, overrides)
    problems: list[str] = []  # damaged manifests first, then files or metrics that differ from theirs
    artifacts = Store(folder).artifacts(problems)
    unfinished = sorted(str(p.relative_to(folder)) for p in folder.glob(f"*/*{PARTIAL}"))
    if not artifacts and not problems:
        why = (
            f"only unfinished stage folder(s) {', '.join(unfinished)}: rerun their stages to finish them"
            if unfinished
            else "not a run folder? A run holds <label>/<fingerprint>/manifest.json"
        )
        raise UsageError(f"{folder}: no complete artifact to verify ({why})")
    problems += [p for artifact in artifacts for p in verify(artifact)]
    problems += Store(folder).link_problems()
    problems += strays(folder)
    for problem in problems:
        err_console.print(problem, markup=False, highlight=False, soft_wrap=True)
    if problems:
        raise UsageError(
            f"{folder}: {len(problems)} problem(s) above: damaged manifests, files or metrics "
            "that differ from their manifest, or files no stage wrote"
        )
    skipped = f"; not checked: {len(unfinished)} unfinished .partial folder(s)" if unfinished else ""
    console.print(f"{folder}: all {len(artifacts)} artifacts intact{skipped}", markup=False, highlight=False)


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="smollm2-135m")],
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
) -> None:
    """Fetch and convert an offline model into the cache ($MTSQL_HOME/models)."""
    console.print(f"{name}: {registry.pull(name, force=force)}", markup=False)


@models_app.command("make-tiny")
def models_make_tiny(
    family: Annotated[str, typer.Argument(help="qwen3, qwen25, llama3 or smollm2")] = "qwen3",
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
) -> None:
    """Build the seeded random-init tiny model (on the real tokenizer) used by fast tests."""
    console.print(f"tiny-{family}: {registry.make_tiny(family, force=force)}", markup=False)


@models_app.command("list")
def models_list() -> None:
    """The known model aliases and whether they are in the cache."""
    table = Table("alias", "cached", "size", "path")
    for row in registry.list_models():
        size = f"{row['bytes'] / 1e6:,.0f} MB" if row["present"] else "-"
        table.add_row(escape(row["alias"]), "yes" if row["present"] else "no", size, escape(str(row["path"])))
    console.print(table)


def counts_table(title: str, table: dict[str, dict[str, int | float]]) -> Table:
    """A rich table of {row label: {column: value}} (a stage's ``table`` metric)."""
    columns = list(next(iter(table.values()), {}))
    out = Table(title=title)
    out.add_column("bucket")
    for column in columns:
        out.add_column(column, justify="right")
    for label, row in table.items():
        out.add_row(label, *(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns))
    return out


@app.command()
def show(
    run: Annotated[str, typer.Argument(help="Run name under runs_dir, or a run folder.")],
    stage: Annotated[str, typer.Argument(help="Artifact label with trajectories: sample-r1, eval-sft, ...")],
    overrides: Overrides = None,
    config: ConfigOpt = None,
    dataset: Annotated[
        str | None, typer.Option(help="Dataset of an evaluation (default: its first).")
    ] = None,
    item: Annotated[
        str | None, typer.Option(help="Item uid, e.g. cosql-dev-0003/1 (default: the first).")
    ] = None,
    sample: Annotated[int | None, typer.Option(help="Sample number when items have several.")] = None,
) -> None:
    """One trajectory as the model saw and wrote it: messages, tool calls, results, verdicts, rewards."""
    row, where = find_trajectory(
        _run_folder(run, config, overrides), stage, dataset=dataset, item=item, sample=sample
    )
    err_console.print(f"from {where}", markup=False, highlight=False)
    typer.echo(render_trajectory(row), nl=False)


config_app = typer.Typer(help="Profiles: print the resolved configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(config: ConfigOpt = None, overrides: Overrides = None) -> None:
    """Print the resolved config (profile, its bases and the overrides) as YAML."""
    typer.echo(yaml.safe_dump(to_dict(_cfg(config, overrides)), sort_keys=False), nl=False)


DISK_ERRORS = {  # errno: how to fix; any other OSError is a bug to report, with its traceback
    errno.ENOSPC: "free some space and rerun (a stage resumes from its .partial folder)",
    errno.EDQUOT: "free some of your quota and rerun (a stage resumes from its .partial folder)",
    errno.EROFS: "the folder is read-only: write elsewhere (runs_dir=, report --out) or remount it",
    errno.EACCES: "check the folder's permissions, or write elsewhere (runs_dir=, --out)",
}
HOME_ERRORS = (errno.EROFS, errno.EACCES)  # under MTSQL_HOME, the fix is another MTSQL_HOME, not runs_dir=


def _disk_fix(exc: OSError) -> str:
    """How to fix a disk error: under MTSQL_HOME (caches, models), set MTSQL_HOME to a writable folder."""
    if exc.errno in HOME_ERRORS and exc.filename:
        try:
            home = home_dir()
        except UsageError:
            home = None
        if home is not None and Path(os.fsdecode(exc.filename)).resolve().is_relative_to(home):
            return (
                f"it is under MTSQL_HOME ({home}), where mtsql keeps its caches and models: "
                "set MTSQL_HOME to a writable folder"
            )
    return DISK_ERRORS[exc.errno]


def main() -> None:
    """Console-script entry: known errors become one line and an exit code (2 usage, 1 failure)."""
    level = os.environ.get("MTSQL_LOG", "WARNING").upper()
    logging.basicConfig(level=level, format="%(message)s")
    # transformers draws its own bars for loading and writing weights; mtsql's bars say what is happening
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    signal.signal(signal.SIGTERM, _terminate)
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show a character (LC_ALL=C) gets \xe9
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
    except SystemExit as exc:
        if exc.code in (INTERRUPTED, 128 + signal.SIGTERM):
            # Ctrl-C, already reported. Leave now: under `python -m`, the interpreter's shutdown would
            # still see the KeyboardInterrupt and end the process by SIGINT instead of exit code 130.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exc.code)
        raise
    except MtsqlError as exc:
        if os.environ.get("MTSQL_DEBUG") == "1":
            raise
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno not in DISK_ERRORS or os.environ.get("MTSQL_DEBUG") == "1":
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(
            f"error: {where}{exc.strerror}; {_disk_fix(exc)}", markup=False, highlight=False, soft_wrap=True
        )
        sys.exit(1)
    except KeyboardInterrupt:  # before a command started (imports, argument parsing)
        err_console.print("interrupted: finished stages are kept; rerun the same command to resume")
        sys.exit(INTERRUPTED)
