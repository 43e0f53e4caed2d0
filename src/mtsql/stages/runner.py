"""Running one stage through the artifact store: fingerprint, skip when done, --force, --dry-run.

A stage is a function ``work(ctx) -> metrics`` (ctx: ``artifacts.StageContext``) plus the config
sections that decide its output. Everything that changes the output goes into the fingerprint:
those sections, per-call ``params`` (policy, round, split...), the data folder and the inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from mtsql.artifacts import Artifact, StageContext, Store, fingerprint
from mtsql.config import Config, to_dict
from mtsql.paths import data_dir

console = Console(stderr=True)

SECTIONS = {
    "sample": ("data", "sql", "env", "reward", "model", "sample"),
    "reject": ("reject",),
    "sft": ("model", "sft"),
    "curriculum": ("data", "curriculum"),
    "rl": ("data", "sql", "env", "reward", "model", "rl"),
    "evaluate": ("data", "sql", "env", "model", "sample", "evaluate"),
}


def store_for(cfg: Config) -> Store:
    return Store(Path(cfg.runs_dir).resolve() / cfg.run)


def stage_config(stage: str, cfg: Config, params: dict | None = None) -> dict:
    """What a stage's fingerprint covers: its config sections, call params and the data folder."""
    config = {section: to_dict(getattr(cfg, section)) for section in SECTIONS[stage]}
    config["params"] = params or {}
    config["data_root"] = str(data_dir(cfg.data.root))
    return config


def run_stage(stage: str, cfg: Config, work: Callable[[StageContext], dict], *, label: str | None = None,
              inputs: dict[str, Artifact] | None = None, params: dict | None = None, round: int | None = None,
              force: bool = False, dry_run: bool = False) -> Artifact | None:
    """Run (or skip, or plan) one stage; returns its artifact (None in a dry run that would run it)."""
    label = label or stage
    inputs = inputs or {}
    config = stage_config(stage, cfg, params)
    store = store_for(cfg)
    if dry_run:
        fp = fingerprint(stage, config, inputs)
        done = None if force else store.find(label, fp)
        console.print(f"  {label:<18} {fp[:12]}  {'cached' if done else 'will run'}")
        return done
    artifact, cached = store.run(stage, label, config, inputs, work, force=force, round=round)
    mark = "[dim]cached[/]" if cached else f"done in {artifact.manifest['duration_s']:.1f}s"
    console.print(f"[green]✓[/] {label:<18} {artifact.fingerprint[:12]}  {mark}  {artifact.path}")
    return artifact


def waiting(label: str, missing: str) -> None:
    """Dry-run line for a stage whose input is not built yet (its fingerprint is not known)."""
    console.print(f"  {label:<18} {'?' * 12}  will run (after {missing})")
