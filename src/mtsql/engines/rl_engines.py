"""The RL engines behind one contract, so that ``stages/rl.py`` knows none of them.

An engine has one line in ``RL_ENGINES`` (``engines/rl_settings.py``): its ``rl.<name>`` settings and its
contract module, with

* ``train_curriculum_stage(cfg, turns, *, base_model, out_dir, metrics_path, stage, trackers) -> dict``: train
  one curriculum stage on ``turns`` from ``base_model``, leave ``out_dir/model`` and one JSON line per
  step in ``metrics_path`` (``core.results.TrainingStep``'s shape), log each step to ``trackers``
  (``step_metrics``: the same names for every engine), return the stage's metrics;
* ``plan_curriculum_stage(cfg, *, base_model, out_dir, stage, rows) -> str``: what it would run
  (``--dry-run``);
* ``identity(cfg) -> dict``: what generates its rollouts beyond the config (the fingerprint covers it).

Each ``engine`` module imports torch, Ray or verl only inside ``train_curriculum_stage``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mtsql.base.errors import UsageError
from mtsql.core.results import TrainingStep
from mtsql.engines.rl_settings import RL_ENGINES


def pick_engine(name: str) -> str:
    """``auto``: verl where a CUDA device is visible, else the local engine."""
    if name != "auto":
        return name
    import torch  # only to look for a GPU

    return "verl" if torch.cuda.is_available() else "local"


def rl_engine(name: str) -> ModuleType:
    """The ``engine`` module of RL engine ``name`` (``auto`` must be resolved first: ``pick_engine``)."""
    if name not in RL_ENGINES:
        raise UsageError(f"rl.engine={name}: resolve it to one of {', '.join(RL_ENGINES)} before a "
                         "stage runs")
    return importlib.import_module(RL_ENGINES[name].module)


def step_metrics(line: dict) -> dict:
    """One step line as the dashboards show it, the same for every engine: ``rl/<field>`` for the fields of
    ``TrainingStep`` (reward, KL, grad norm, clip fraction, response length, ...) and what else the engine
    logged beside them at the top level (numbers only reach the trackers)."""
    fields = TrainingStep.from_dict(line).to_dict()
    return {f"rl/{name}": value for name, value in fields.items() if name not in ("stage", "step")}
