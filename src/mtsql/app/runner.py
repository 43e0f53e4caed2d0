"""The table of stages, and running one stage through the artifact store.

A stage is a module in ``mtsql.stages`` with:

* ``VIEW``: its typed view of a config (a ``base.config.StageView`` whose fields are the sections it
  reads). It gets an instance of it, nothing else of the config, and its fingerprint covers the
  ``result`` settings of exactly those sections (with ``data``, the content of the data folder too), so
  what a stage reads and what decides whether it reruns are the same thing; ``operational`` settings
  (batch sizes, ports, timeouts, loggers) rerun nothing;
* ``hashed(cfg) -> dict`` or None: a narrower ``cfg.hashed()``, for a stage that reads less of its
  sections with this config (SFT without its held-out check) or sets some settings itself (the
  sampling temperature of RL and of greedy evaluation);
* ``INPUTS``: ``{name: default label or None}``, the artifacts it reads (None: optional);
* ``run(ctx, cfg, **inputs, **params) -> metrics``: writes into ``ctx.out``;
* ``plan(cfg, out, **inputs, **params) -> str`` or None: the external commands and files it
  would run and write, for ``--dry-run``;
* ``check(cfg, **inputs, **params)`` or None: raises ``UsageError`` for inputs it cannot work on
  (in a dry run too, where an input may still be ``Pending``), before anything is written;
* ``engine_identity(cfg) -> dict`` or None: what generates its tokens beyond the config (the
  vLLM version and server settings), which the fingerprint covers too and config.yaml shows.

(the ``Stage`` protocol: a stage without a hook sets it to None, so that the runner and type checkers
see every hook a stage has.)

The fingerprint also covers ``params`` (per-call settings such as a curriculum stage number), the
input fingerprints and the digest of the code the stage module runs (``provenance.code_digest``).
In a dry run a stage that would run returns a ``Pending`` placeholder, so the rest of the plan
can be shown with ``<from LABEL>`` in place of outputs that do not exist yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich.console import Console
from rich.markup import escape

from mtsql.app.config import Config
from mtsql.base.artifacts import Artifact, ArtifactKey, StageContext, Store, check_inputs, fingerprint
from mtsql.base.config import StageView, to_dict
from mtsql.base.errors import UsageError
from mtsql.base.files import check_folder
from mtsql.base.paths import folder_name, label_name, user_path
from mtsql.base.provenance import code_digest, data_digest
from mtsql.base.trackers import Trackers
from mtsql.core.data import data_root
from mtsql.engines.models.registry import local_model_folder
from mtsql.engines.views import RolloutView
from mtsql.stages import curriculum, evaluate, reject, rl, sample, sft


@runtime_checkable
class Stage(Protocol):
    """What a stage module has (the module docstring says what each is)."""

    VIEW: type[StageView]
    INPUTS: dict[str, str | None]
    __name__: str

    def run(self, ctx: StageContext, cfg: StageView, **inputs_and_params: Any) -> dict: ...

    plan: Callable[..., str] | None
    hashed: Callable[[StageView], dict] | None
    engine_identity: Callable[[StageView], dict] | None
    check: Callable[..., None] | None


STAGES: dict[str, Stage] = {
    "sample": sample,
    "reject": reject,
    "sft": sft,
    "curriculum": curriculum,
    "rl": rl,
    "evaluate": evaluate,
}

console = Console(stderr=True)


@dataclass(frozen=True)
class Pending:
    """A stage that a dry run would run: what later steps would read from it does not exist yet."""

    label: str
    fingerprint: str | None  # None while one of its own inputs is pending
    metrics: dict = field(default_factory=dict)
    key: ArtifactKey | None = None  # None: an input known only by the label a command was given

    @property
    def path(self) -> Path:
        return Path(f"<from {self.label}>")


def latest_input(store: Store, label: str, *, dry_run: bool = False) -> Artifact | Pending:
    """The input a stage reads: the latest complete artifact labelled ``label``; in a dry run, when
    there is none yet, a placeholder (an earlier step of the plan makes it); else a ``UsageError``
    saying how to see what the run holds."""
    artifact = store.latest(label)
    if artifact is not None:
        return artifact
    return Pending(label, None) if dry_run else store.require(label)


def runs_root(cfg: Config) -> Path:
    """``runs_dir`` (it need not exist yet); a file on its path is a ``UsageError``."""
    return check_folder(
        user_path(cfg.runs_dir), f"runs_dir={cfg.runs_dir}", "set runs_dir= to a folder for the runs"
    )


def store_for(cfg: Config) -> Store:
    return Store(runs_root(cfg).resolve() / folder_name(cfg.run, "run"))


def view_for(name: str, cfg: Config) -> StageView:
    """The config as stage ``name`` sees it (its ``VIEW``: the sections it reads)."""
    return STAGES[name].VIEW.of(cfg, data_root=data_root(cfg.data))


def run_stage(
    name: str,
    cfg: Config,
    *,
    key: ArtifactKey | None = None,
    label: str | None = None,
    inputs: dict | None = None,
    params: dict | None = None,
    force: bool = False,
    dry_run: bool = False,
) -> Artifact | Pending:
    """Run stage ``name`` (or find it done, or plan it in a dry run) and return its artifact.

    ``key``: what the artifact is (default: the stage's plain key); ``label``: a label given by hand
    (``--label``), which names the artifact instead of the derived one."""
    if name not in STAGES:
        raise UsageError(f"unknown stage '{name}': stages are {', '.join(STAGES)}")
    if key is not None and (label is not None or key.stage != name):
        raise ValueError(f"stage '{name}': give a key of this stage or a label, not {key} and {label!r}")
    key = ArtifactKey(name, name=label) if key is None else key
    module, label = STAGES[name], label_name(key.label)
    inputs = {key: value for key, value in (inputs or {}).items() if value is not None}
    params = params or {}
    missing = [key for key, default in module.INPUTS.items() if default is not None and key not in inputs]
    if missing:
        raise UsageError(f"stage '{name}' needs input(s) {', '.join(missing)}")
    view = view_for(name, cfg)
    if module.check is not None:
        module.check(view, **inputs, **params)
    config = fingerprinted(module, view, params, dry_run=dry_run)
    code = code_digest(module.__name__)
    store = store_for(cfg)
    if dry_run:
        return _plan(key, module, view, store, config, inputs, params, code, force)
    local = _local_model(view)
    unhashed = {**view.unhashed(), **({"model_folder": str(local)} if local else {})}
    work = _tracked(
        key.stage,
        cfg,
        fingerprint(key.stage, config, inputs, code),
        inputs,
        params,
        lambda ctx: module.run(ctx, view, **inputs, **params),
    )
    artifact, cached = store.run(key, config, inputs, work, code=code, force=force, unhashed=unhashed)
    if cached:
        same = "" if artifact.label == label else f" (the same work as {artifact.label})"
        console.print(
            f"[green]✓[/] {escape(f'{label:<18}')} {artifact.fingerprint[:12]}  "
            f"[dim]{escape(f'cached{same}')}[/]  {escape(str(artifact.path))}"
        )
    else:
        console.print(
            f"[green]✓[/] {escape(f'{label:<18}')} {artifact.fingerprint[:12]}  done in "
            f"{artifact.manifest['duration_s']:.1f}s  {escape(str(artifact.path))}"
        )
    return artifact


def _tracked(stage: str, cfg: Config, fp: str, inputs: dict, params: dict, work):
    """``work`` with the stage's trackers open (``trackers.*``; off by default): the resolved config, the
    fingerprint and the inputs' fingerprints as parameters, what the stage logs as it runs, and at the
    end the numbers among its metrics as ``<stage>/<name>``."""

    def tracked(ctx: StageContext) -> dict:
        ctx.trackers = Trackers.for_folder(cfg.trackers, run=cfg.run, folder=ctx.out)
        with ctx.trackers as trackers:
            trackers.log_params(
                {
                    "stage": stage,
                    "fingerprint": fp,
                    "params": params,
                    "config": to_dict(cfg),
                    "inputs": {name: artifact.fingerprint for name, artifact in inputs.items()},
                }
            )
            metrics = work(ctx)
            if isinstance(metrics, dict):
                trackers.log_metrics(
                    trackers.last_step, {f"{stage}/{name}": value for name, value in metrics.items()}
                )
        return metrics

    return tracked


def fingerprinted(module: Stage, view: StageView, params: dict, *, dry_run: bool = False) -> dict:
    """The config a stage's fingerprint covers (and its config.yaml shows): its hashed settings
    (``hashed``, else ``view.hashed()``), ``params`` and, if it generates tokens, its engine."""
    config = {**(module.hashed(view) if module.hashed is not None else view.hashed()), "params": params}
    local = _local_model(view)
    if local is not None:  # a model folder of the user's: what it holds, not where it is (as for the data)
        config["model_digest"] = data_digest(local)
        if isinstance(config.get("model"), dict) and "name" in config["model"]:
            config["model"] = {**config["model"], "name": "<a local folder: model_digest>"}
    engine = _engine_identity(module, view, dry_run)
    if engine:
        config["engine"] = engine  # what generates its tokens, beyond the config (a vLLM version, ...)
    return config


def _local_model(view: StageView) -> Path | None:
    """The model folder of the user's a stage loads (``model.name`` a folder, not an alias or Hub id)."""
    return local_model_folder(view.model.name) if isinstance(view, RolloutView) else None


def _engine_identity(module: Stage, view: StageView, dry_run: bool) -> dict:
    """The stage's generation engine (``engine_identity``). A dry run on a machine without that engine
    (planning a GPU run from a CPU one) still plans, with the engine's version marked unknown."""
    if module.engine_identity is None:
        return {}
    try:
        return module.engine_identity(view)
    except UsageError:
        if not dry_run or not isinstance(view, RolloutView):
            raise
        return {"engine": view.sample.backend, "version": "not installed here"}


def _plan(key, module, view, store, config, inputs, params, code, force) -> Artifact | Pending:
    """A dry run's line for one stage: cached (its artifact verifies), or will run; what the real run
    would refuse (an input or a cached output that does not verify) is refused the same way."""
    label = key.label
    check_inputs(inputs)
    waiting = [a.label for a in inputs.values() if isinstance(a, Pending)]
    fp = None if waiting else fingerprint(key.stage, config, inputs, code)
    done = store.find(label, fp) if fp and not force else None
    if done is not None:
        console.print(f"  {label:<18} {fp[:12]}  cached", markup=False, highlight=False)
        return done
    after = f" (after {', '.join(waiting)})" if waiting else ""
    console.print(
        f"  {label:<18} {fp[:12] if fp else '?' * 12}  will run{after}", markup=False, highlight=False
    )
    if module.plan is not None:
        out = store.folder(label, fp) if fp else store.root / label / "<fingerprint>"
        console.print(
            module.plan(view, out, **inputs, **params).rstrip(), markup=False, highlight=False, soft_wrap=True
        )
    return Pending(label, fp, key=key)
