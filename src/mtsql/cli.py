"""The `mtsql` command line: thin wrappers that parse, load the config and call a stage or pipeline."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from mtsql.errors import MtsqlError, UsageError

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    help="Reproduce MTSQL-R1: long-horizon multi-turn text-to-SQL with self-taught SFT and curriculum RL.\n\n"
    "Stages: sample -> reject -> sft (sft-iterate) -> curriculum -> rl -> evaluate -> report.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich",
)
data_app = typer.Typer(help="Datasets: check a split, verify a run's artifacts.", no_args_is_help=True)
models_app = typer.Typer(help="Offline models: pull SmolLM2, make a tiny Qwen3, list the cache.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(models_app, name="models")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Profile YAML (configs/profiles/*.yaml).")]
Overrides = Annotated[list[str] | None, typer.Argument(help="Config overrides: section.key=value ...", show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Rerun even when a complete artifact exists.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan (and commands), run nothing.")]


ModelOpt = Annotated[str | None, typer.Option(
    "--model", help="base, sft, rl (this run's last round/stage), an artifact label (sft-r2, rl-c1) or auto "
    "(the newest trained model; for curriculum and rl the last SFT round).")]


def _cfg(config: Path | None, overrides: list[str] | None):
    from mtsql.config import load_config

    return load_config(config, overrides or [])


@app.command()
def sample(config: ConfigOpt = None, overrides: Overrides = None,
           policy: Annotated[str | None, typer.Option(help="model, gold or gold_with_correction (default: sample.policy).")] = None,
           dataset: Annotated[str | None, typer.Option(help="Dataset to sample (default: data.train_dataset).")] = None,
           split: Annotated[str | None, typer.Option(help="train (the training pool) or dev (the eval slice).")] = None,
           model: ModelOpt = "auto", label: Annotated[str, typer.Option(help="Artifact label.")] = "sample",
           force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Roll out trajectories with a model or a scripted policy (writes trajectories.jsonl)."""
    import dataclasses

    from mtsql import pipeline
    from mtsql.data import load_turns
    from mtsql.paths import data_dir

    cfg = _cfg(config, overrides)
    if dataset or split:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(
            cfg.data, train_dataset=dataset or cfg.data.train_dataset, train_split=split or cfg.data.train_split))
    turns = (pipeline.train_pool(cfg) if cfg.data.train_split == "train" else
             load_turns(cfg.data.train_dataset, cfg.data.train_split, root=data_dir(cfg.data.root), limit=cfg.data.eval_limit))
    pipeline.sample(cfg, label=label, turns=turns, policy=policy or cfg.sample.policy,
                    model=pipeline.find_model(cfg, model), force=force, dry_run=dry_run)


@app.command()
def reject(config: ConfigOpt = None, overrides: Overrides = None,
           source: Annotated[str, typer.Option("--from", help="Label of the sample artifact to filter.")] = "sample",
           label: Annotated[str, typer.Option(help="Artifact label.")] = "reject",
           force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Difficulty-aware reject sampling: keep correct, diverse trajectories for SFT."""
    from mtsql import pipeline

    cfg = _cfg(config, overrides)
    done = pipeline.reject(cfg, pipeline.find_artifact(cfg, source), label=label, force=force, dry_run=dry_run)
    if done is not None:
        console.print(counts_table(f"reject sampling ({label})", done.metrics["table"]))


@app.command()
def sft(config: ConfigOpt = None, overrides: Overrides = None,
        source: Annotated[str, typer.Option("--from", help="Label of the reject artifact to train on.")] = "reject",
        model: ModelOpt = "base", label: Annotated[str, typer.Option(help="Artifact label.")] = "sft",
        force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Fine-tune with LLaMA-Factory on kept tool-integrated trajectories (tool outputs masked)."""
    from mtsql import pipeline

    cfg = _cfg(config, overrides)
    pipeline.sft(cfg, pipeline.find_artifact(cfg, source), label=label, model=pipeline.find_model(cfg, model),
                 force=force, dry_run=dry_run)


@app.command("sft-iterate")
def sft_iterate(config: ConfigOpt = None, overrides: Overrides = None,
                rounds: Annotated[int | None, typer.Option(help="Number of self-taught rounds (default: sft.rounds).")] = None,
                force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Self-taught warm-start: sample -> reject -> sft, repeated for several rounds."""
    from mtsql import pipeline

    pipeline.sft_iterate(_cfg(config, overrides), rounds, force=force, dry_run=dry_run)


@app.command()
def curriculum(config: ConfigOpt = None, overrides: Overrides = None, model: ModelOpt = "auto",
               force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Partition the RL pool into ordered difficulty stages."""
    from mtsql import pipeline

    cfg = _cfg(config, overrides)
    done = pipeline.curriculum(cfg, model=pipeline.find_model(cfg, model, auto=("sft",)), force=force, dry_run=dry_run)
    if done is not None:
        console.print(counts_table("curriculum stages", done.metrics["table"]))


@app.command()
def rl(config: ConfigOpt = None, overrides: Overrides = None,
       use_curriculum: Annotated[bool, typer.Option("--curriculum", help="Train stage by stage on the curriculum "
                                                    "(else one stage with the whole pool).")] = False,
       engine: Annotated[str | None, typer.Option(help="verl (GPU, Ray) or local (CPU / one GPU); default rl.engine.")] = None,
       model: ModelOpt = "auto", force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Multi-turn GRPO with outcome + process rewards (verl on GPUs, a local engine on CPU)."""
    import dataclasses

    from mtsql import pipeline
    from mtsql.stages.curriculum import LABELS

    cfg = _cfg(config, overrides)
    if not use_curriculum:
        single = (LABELS[cfg.curriculum.by],)
        cfg = dataclasses.replace(cfg, curriculum=dataclasses.replace(cfg.curriculum, stages=single))
    start = pipeline.find_model(cfg, model, auto=("sft",))
    plan = pipeline.curriculum(cfg, model=start, force=force, dry_run=dry_run)
    if plan is None:
        return
    pipeline.rl(cfg, curriculum_art=plan, model=start, engine=engine, force=force, dry_run=dry_run)


@app.command()
def evaluate(
    dataset: Annotated[str | None, typer.Option(help="sparc or cosql (picks the default gold and tables).")] = None,
    pred: Annotated[Path | None, typer.Option(help="Predictions in the official format (one SQL per line, blank line between interactions).")] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for items.jsonl and summary.json.")] = None,
    gold: Annotated[Path | None, typer.Option(help="Gold file (default: <data>/<dataset>/dev_gold.txt).")] = None,
    db_dir: Annotated[Path | None, typer.Option(help="Databases folder (default: <data>/database).")] = None,
    tables: Annotated[Path | None, typer.Option(help="tables.json (default: <data>/<dataset>/tables.json).")] = None,
    etype: Annotated[str, typer.Option(help="all, match (exact set match) or exec (execution).")] = "all",
    exec_semantics: Annotated[str | None, typer.Option(help="testsuite (default) or sparc.")] = None,
    semantics: Annotated[str | None, typer.Option(help="official (default) or strict parser.")] = None,
    allow_mismatch: Annotated[bool, typer.Option(help="Score gold turns without a prediction as 0 instead of failing.")] = False,
    model: ModelOpt = None, label: Annotated[str | None, typer.Option(help="Artifact label (model mode).")] = None,
    config: ConfigOpt = None, overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False,
) -> None:
    """Score predictions with the official metrics (exact set match, execution, question/interaction).

    With --pred: score an official-format prediction file. Without it: evaluate a model of the run
    (--model) on the profile's eval datasets, greedy or with evaluate.vote samples."""
    from mtsql.sql.evaluation import EvaluateOptions, run_evaluate

    cfg = _cfg(config, overrides)
    if pred is None:
        from mtsql import pipeline

        ref = model or "auto"
        artifact = pipeline.find_model(cfg, ref)
        pipeline.evaluate(cfg, label=label or f"eval-{artifact.label if artifact else 'base'}", model=artifact,
                          force=force, dry_run=dry_run)
        return
    if dataset is None or out is None:
        raise UsageError("evaluate --pred needs --dataset and --out")
    sql = cfg.sql
    options = EvaluateOptions.from_config(sql, etype=etype, exec_semantics=exec_semantics, semantics=semantics)
    run_evaluate(dataset, pred, out, console=console, gold_path=gold, db_dir=db_dir, tables_path=tables,
                 options=options, allow_mismatch=allow_mismatch)


@app.command()
def report(run: Annotated[str, typer.Argument(help="Run name under runs/ or a run folder.")],
           runs_dir: Annotated[Path, typer.Option(help="Where runs live.")] = Path("runs")) -> None:
    """Build a markdown report with plots from a run's manifests and metrics."""
    from mtsql.report import build_report
    from mtsql.status import run_folder

    console.print(f"report: {build_report(run_folder(run, runs_dir))}")


@app.command("run")
def run_pipeline(pipeline: Annotated[Path, typer.Argument(help="pipelines/*.yaml")], config: ConfigOpt = None,
                 overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Run a whole pipeline (e.g. pipelines/reproduce.yaml), skipping stages already done."""
    from mtsql.pipeline import run_pipeline as run_steps

    run_steps(pipeline, config, overrides or [], force=force, dry_run=dry_run)


@app.command()
def status(run: Annotated[str | None, typer.Argument(help="Run name under runs/ or a run folder.")] = None,
           runs_dir: Annotated[Path, typer.Option(help="Where runs live.")] = Path("runs")) -> None:
    """A run's artifacts in pipeline order: state, fingerprint, created, wall time, what each holds."""
    from mtsql.status import run_folder, status_table

    if run is None:
        runs = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
        if not runs:
            console.print(f"no runs under {runs_dir}/")
            return
        for name in runs:
            console.print(name)
        return
    console.print(status_table(run_folder(run, runs_dir)))


@data_app.command("check")
def data_check(dataset: Annotated[str, typer.Option(help="sparc or cosql")],
               split: Annotated[str, typer.Option(help="dev or train")] = "dev",
               root: Annotated[Path | None, typer.Option(help="Data folder (default $MTSQL_DATA, else the fixture).")] = None) -> None:
    """Counts, missing databases and gold queries that fail to execute, as a table."""
    from rich.progress import track

    from mtsql.data.check import check_split

    report_ = check_split(dataset, split, root, progress=lambda xs: track(xs, description="executing gold", console=err_console))
    table = Table(title=f"{dataset} {split} ({report_['root']})", show_header=False)
    for key in ("interactions", "turns", "databases", "turns_without_database", "gold_fail_as_written"):
        table.add_row(key.replace("_", " "), str(report_[key]))
    table.add_row("missing databases", ", ".join(f"{db} ({n} turns)" for db, n in report_["missing_databases"].items()) or "none")
    failing = report_["gold_fail_after_joining_operators"]
    table.add_row("gold fail after joining '> ='", str(len(failing)))
    for item in failing:
        table.add_row("", f"interaction {item['interaction']} turn {item['turn']} ({item['db_id']}): {item['message']}")
    table.add_row("turns per interaction", ", ".join(f"{k}: {v}" for k, v in report_["turns_per_interaction"].items()))
    console.print(table)


@data_app.command("verify")
def data_verify(run: Annotated[str, typer.Argument(help="Run name under runs/ or a run folder.")],
                runs_dir: Annotated[Path, typer.Option(help="Where runs live.")] = Path("runs")) -> None:
    """Check every artifact's files against the hashes in its manifest."""
    from mtsql.artifacts import Store, verify

    folder = _existing_run(run, runs_dir)
    problems = [p for artifact in Store(folder).artifacts() for p in verify(artifact)]
    for problem in problems:
        err_console.print(problem)
    if problems:
        raise UsageError(f"{folder}: {len(problems)} file(s) differ from their manifests")
    console.print(f"{folder}: all artifacts intact")


@models_app.command("pull")
def models_pull(name: Annotated[str, typer.Argument(help="smollm2-135m")],
                force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False) -> None:
    """Fetch and convert an offline model into the cache ($MTSQL_HOME/models)."""
    from mtsql import models

    console.print(f"{name}: {models.pull(name, force=force)}")


@models_app.command("make-tiny")
def models_make_tiny(family: Annotated[str, typer.Argument(help="qwen3")] = "qwen3",
                     force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False) -> None:
    """Build the seeded random-init tiny model (on the real tokenizer) used by fast tests."""
    from mtsql import models

    console.print(f"tiny-{family}: {models.make_tiny(family, force=force)}")


@models_app.command("list")
def models_list() -> None:
    """The known model aliases and whether they are in the cache."""
    from mtsql import models

    table = Table("alias", "cached", "size", "path")
    for row in models.list_models():
        size = f"{row['bytes'] / 1e6:,.0f} MB" if row["present"] else "-"
        table.add_row(row["alias"], "yes" if row["present"] else "no", size, row["path"])
    console.print(table)


def _existing_run(run: str, runs_dir: Path) -> Path:
    from mtsql.status import run_folder

    return run_folder(run, runs_dir)


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
def show(run: Annotated[str, typer.Argument(help="Run name under runs/ or a run folder.")],
         stage: Annotated[str, typer.Argument(help="Artifact label with trajectories: sample-r1, eval-sft, ...")],
         dataset: Annotated[str | None, typer.Option(help="Dataset of an evaluation (default: its first).")] = None,
         item: Annotated[str | None, typer.Option(help="Item uid, e.g. cosql-dev-0003/1 (default: the first).")] = None,
         sample: Annotated[int | None, typer.Option(help="Sample number when items have several.")] = None,
         runs_dir: Annotated[Path, typer.Option(help="Where runs live.")] = Path("runs")) -> None:
    """One trajectory as the model saw and wrote it: messages, tool calls, results, verdicts, rewards."""
    from mtsql.status import run_folder
    from mtsql.trajectory_text import find_trajectory, render_trajectory

    row, where = find_trajectory(run_folder(run, runs_dir), stage, dataset=dataset, item=item, sample=sample)
    err_console.print(f"from {where}", highlight=False)
    typer.echo(render_trajectory(row), nl=False)


config_app = typer.Typer(help="Profiles: print the resolved configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(config: ConfigOpt = None, overrides: Overrides = None) -> None:
    """Print the resolved config (profile, its bases and the overrides) as YAML."""
    import yaml

    from mtsql.config import to_dict

    typer.echo(yaml.safe_dump(to_dict(_cfg(config, overrides)), sort_keys=False), nl=False)


def main() -> None:
    """Console-script entry: known errors become one line and an exit code (2 usage, 1 failure)."""
    level = os.environ.get("MTSQL_LOG", "WARNING").upper()
    logging.basicConfig(level=level, format="%(message)s")
    try:
        app()
    except MtsqlError as exc:
        if os.environ.get("MTSQL_DEBUG") == "1":
            raise
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted: finished stages are kept; rerun the same command to resume")
        sys.exit(130)
