"""The `mtsql` command line: thin wrappers that parse, load the config and call a stage or pipeline."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

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

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="Profile YAML (configs/profiles/*.yaml).")]
Overrides = Annotated[Optional[list[str]], typer.Argument(help="Config overrides: section.key=value ...", show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Rerun even when a complete artifact exists.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan (and commands), run nothing.")]


def _not_yet(command: str) -> None:
    raise UsageError(f"'mtsql {command}' is not available yet: its stage is not built in this version")


@app.command()
def sample(config: ConfigOpt = None, overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Roll out trajectories with a model or a scripted policy (writes trajectories.jsonl)."""
    _not_yet("sample")


@app.command()
def reject(config: ConfigOpt = None, overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Difficulty-aware reject sampling: keep correct, diverse trajectories for SFT."""
    _not_yet("reject")


@app.command()
def sft(config: ConfigOpt = None, overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Fine-tune with LLaMA-Factory on kept tool-integrated trajectories (tool outputs masked)."""
    _not_yet("sft")


@app.command("sft-iterate")
def sft_iterate(config: ConfigOpt = None, overrides: Overrides = None,
                rounds: Annotated[Optional[int], typer.Option(help="Number of self-taught rounds.")] = None,
                force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Self-taught warm-start: sample -> reject -> sft, repeated for several rounds."""
    _not_yet("sft-iterate")


@app.command()
def curriculum(config: ConfigOpt = None, overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Partition the RL pool into ordered difficulty stages."""
    from mtsql.config import load_config

    load_config(config, overrides or [])
    _not_yet("curriculum")


@app.command()
def rl(config: ConfigOpt = None, overrides: Overrides = None,
       use_curriculum: Annotated[bool, typer.Option("--curriculum", help="Train stage by stage on the curriculum.")] = False,
       engine: Annotated[Optional[str], typer.Option(help="verl (GPU, Ray) or local (CPU / one GPU).")] = None,
       force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Multi-turn GRPO with outcome + process rewards (verl on GPUs, a local engine on CPU)."""
    _not_yet("rl")


@app.command()
def evaluate(
    dataset: Annotated[str, typer.Option(help="sparc or cosql (picks the default gold and tables).")],
    pred: Annotated[Path, typer.Option(help="Predictions in the official format (one SQL per line, blank line between interactions).")],
    out: Annotated[Path, typer.Option(help="Folder for items.jsonl and summary.json.")],
    gold: Annotated[Optional[Path], typer.Option(help="Gold file (default: <data>/<dataset>/dev_gold.txt).")] = None,
    db_dir: Annotated[Optional[Path], typer.Option(help="Databases folder (default: <data>/database).")] = None,
    tables: Annotated[Optional[Path], typer.Option(help="tables.json (default: <data>/<dataset>/tables.json).")] = None,
    etype: Annotated[str, typer.Option(help="all, match (exact set match) or exec (execution).")] = "all",
    exec_semantics: Annotated[Optional[str], typer.Option(help="testsuite (default) or sparc.")] = None,
    semantics: Annotated[Optional[str], typer.Option(help="official (default) or strict parser.")] = None,
    allow_mismatch: Annotated[bool, typer.Option(help="Score gold turns without a prediction as 0 instead of failing.")] = False,
    config: ConfigOpt = None, overrides: Overrides = None,
) -> None:
    """Score predictions with the official metrics (exact set match, execution, question/interaction)."""
    from mtsql.config import load_config
    from mtsql.stages.evaluate import EvaluateOptions, run_evaluate

    sql = load_config(config, overrides or []).sql
    options = EvaluateOptions.from_config(sql, etype=etype, exec_semantics=exec_semantics, semantics=semantics)
    run_evaluate(dataset, pred, out, console=console, gold_path=gold, db_dir=db_dir, tables_path=tables,
                 options=options, allow_mismatch=allow_mismatch)


@app.command()
def report(run: Annotated[str, typer.Argument(help="Run name under runs/ or a run folder.")]) -> None:
    """Build a markdown report with plots from a run's manifests and metrics."""
    _not_yet("report")


@app.command("run")
def run_pipeline(pipeline: Annotated[Path, typer.Argument(help="pipelines/*.yaml")], config: ConfigOpt = None,
                 overrides: Overrides = None, force: ForceOpt = False, dry_run: DryRunOpt = False) -> None:
    """Run a whole pipeline (e.g. pipelines/reproduce.yaml), skipping stages already done."""
    _not_yet("run")


@app.command()
def status(run: Annotated[Optional[str], typer.Argument(help="Run name under runs/ or a run folder.")] = None,
           runs_dir: Annotated[Path, typer.Option(help="Where runs live.")] = Path("runs")) -> None:
    """Table of a run's artifacts: stage, round, fingerprint, state, created, key metrics."""
    from mtsql.status import run_folder, status_rows

    if run is None:
        runs = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
        if not runs:
            console.print(f"no runs under {runs_dir}/")
            return
        for name in runs:
            console.print(name)
        return
    table = Table(title=str(run_folder(run, runs_dir)))
    for column in ("stage", "round", "fingerprint", "state", "created", "key metrics"):
        table.add_column(column)
    for row in status_rows(run_folder(run, runs_dir)):
        table.add_row(*row)
    console.print(table)


@data_app.command("check")
def data_check(dataset: Annotated[str, typer.Option(help="sparc or cosql")],
               split: Annotated[str, typer.Option(help="dev or train")] = "dev",
               root: Annotated[Optional[Path], typer.Option(help="Data folder (default $MTSQL_DATA, else the fixture).")] = None) -> None:
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
def models_pull(name: Annotated[str, typer.Argument(help="smollm2-135m")]) -> None:
    """Fetch and convert an offline model into the cache ($MTSQL_HOME/models)."""
    _not_yet("models pull")


def _existing_run(run: str, runs_dir: Path) -> Path:
    from mtsql.status import run_folder

    return run_folder(run, runs_dir)


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
