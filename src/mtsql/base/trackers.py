"""The dashboards a stage logs to: TensorBoard, W&B (offline) and MLflow (a ``file:`` store), any at once.

    trackers = Trackers.for_folder(cfg.trackers, run=cfg.run, folder=ctx.out)   # an artifact's folder
    with trackers:                                   # closes every tracker, FAILED when the stage raised
        trackers.log_params({"config": to_dict(cfg), "fingerprint": fp})     # flattened to dotted keys
        trackers.log_metrics(step, {"rl/reward_mean": 0.25, "rl/kl": None})  # None is left out

Each tracker is one setting (``trackers.tensorboard``, ``.wandb``, ``.mlflow``; all off by default),
and its library is imported only when it is on, at the first thing logged. One stage artifact is one
tracker run, named ``<run>/<label>`` (the fingerprint's first 12 digits in the TensorBoard folder and in
the tags), all of a run's stages in one place (``trackers.dir``, default ``<run folder>/trackers``)::

    tensorboard/<run>/<label>/<fp12>/   event files (mtsql's and the engine's own: one TensorBoard run)
    wandb/offline-run-*/                W&B's offline runs, project ``trackers.project``, group <run>
    mlruns/                             the MLflow file store, experiment ``trackers.project``

An engine that logs in another process (LLaMA-Factory's ``report_to``, verl's ``trainer.logger``) is
given ``names`` and ``env()``: the variables its loggers read to write to the same places, MLflow into
the same run (``MLFLOW_RUN_ID``). W&B never leaves the machine: ``WANDB_MODE=offline`` here and in
``env()``. MLflow 3 refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: mtsql sets it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Protocol

from mtsql.base.errors import UsageError


class TrackerSettings(Protocol):
    """What the trackers read of the ``trackers`` section (its schema is in ``app/config.py``)."""

    tensorboard: bool
    wandb: bool
    mlflow: bool
    dir: str | None
    mlflow_uri: str | None
    project: str


TRACKERS = ("tensorboard", "wandb", "mlflow")
MLFLOW_PARAM_CHARS = 6000  # MLflow refuses a longer parameter value


def flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``{"rl": {"lr": 1e-6}}`` -> ``{"rl.lr": 1e-6}``)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def numbers(metrics: dict) -> dict[str, float]:
    """The finite numbers of ``metrics`` (booleans count 0 / 1); None, text and NaN are left out."""
    return {
        key: float(value)
        for key, value in metrics.items()
        if isinstance(value, (int, float)) and math.isfinite(float(value))
    }


class Trackers:
    """The trackers one stage artifact logs to; ``Trackers.off()`` logs nowhere."""

    def __init__(
        self, settings: TrackerSettings | None, *, run: str, root: Path, label: str, fingerprint: str
    ):
        """``settings``: the ``trackers`` section (None: all off); ``root``: the run folder (``trackers.dir``
        defaults to its ``trackers/``); ``label`` and ``fingerprint``: the artifact's."""
        self.names = tuple(name for name in TRACKERS if settings is not None and getattr(settings, name))
        self.project = settings.project if settings is not None else ""
        chosen = settings.dir if settings is not None else None
        self.dir = Path(chosen).expanduser() if chosen else Path(root) / "trackers"
        uri = settings.mlflow_uri if settings is not None else None
        self.mlflow_uri = uri or f"file:{(self.dir / 'mlruns').resolve()}"
        if "mlflow" in self.names and not self.mlflow_uri.startswith("file:"):
            raise UsageError(
                f"trackers.mlflow_uri={self.mlflow_uri}: give a file: URI (a folder); mtsql logs to no "
                "MLflow server"
            )
        self.run_name, self.group, self.fingerprint = f"{run}/{label}", run, fingerprint
        self.tensorboard_dir = self.dir / "tensorboard" / run / label / fingerprint[:12]
        self.last_step = 0  # the highest step logged: the stage's closing figures are logged at it
        self._open: list | None = None

    @classmethod
    def off(cls) -> Trackers:
        return cls(None, run="none", root=Path("."), label="none", fingerprint="")

    @classmethod
    def for_folder(cls, settings: TrackerSettings, *, run: str, folder: Path) -> Trackers:
        """The trackers of the artifact in ``folder`` (``<run folder>/<label>/<fp12>``, or its
        ``.partial``)."""
        folder = Path(folder)
        return cls(
            settings,
            run=run,
            root=folder.parent.parent,
            label=folder.parent.name,
            fingerprint=folder.name.split(".")[0],
        )

    def __bool__(self) -> bool:
        return bool(self.names)

    def env(self) -> dict[str, str]:
        """The environment an engine's own loggers read to log where these do (HF Trainer's integrations,
        verl's ``Tracking``); with MLflow, the run this stage opened, once it is open."""
        env: dict[str, str] = {}
        if "tensorboard" in self.names:
            env |= {
                "TENSORBOARD_LOGGING_DIR": str(self.tensorboard_dir),
                "TENSORBOARD_DIR": str(self.tensorboard_dir),
            }
        if "wandb" in self.names:
            env |= {
                "WANDB_MODE": "offline",
                "WANDB_DIR": str(self.dir),
                "WANDB_PROJECT": self.project,
                "WANDB_RUN_GROUP": self.group,
            }
        if "mlflow" in self.names:
            env |= {
                "MLFLOW_TRACKING_URI": self.mlflow_uri,
                "MLFLOW_EXPERIMENT_NAME": self.project,
                "MLFLOW_ALLOW_FILE_STORE": "true",
            }
            mlflow = next((t for t in self._open or () if isinstance(t, _Mlflow)), None)
            if mlflow is not None:
                env["MLFLOW_RUN_ID"] = mlflow.run_id
        return env

    def log_params(self, params: dict) -> None:
        """Log ``params`` (nested mappings become dotted keys) as the run's parameters."""
        if not self:
            return
        values = {
            key: value if isinstance(value, (int, float, str, bool)) else json.dumps(value, default=str)
            for key, value in flat(params).items()
        }
        for tracker in self._trackers():
            tracker.log_params(values)

    def log_metrics(self, step: int, metrics: dict) -> None:
        """Log the finite numbers of ``metrics`` at ``step`` (anything else in it is left out)."""
        values = numbers(metrics)
        if not values:
            return
        self.last_step = max(self.last_step, step)
        for tracker in self._trackers():
            tracker.log_metrics(step, values)

    def close(self, failed: bool = False) -> None:
        """Flush and close every open tracker (MLflow and W&B mark the run failed with ``failed``)."""
        for tracker in self._open or ():
            tracker.close(failed)
        self._open = None

    def __enter__(self) -> Trackers:
        self._trackers()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.close(failed=kind is not None)

    def _trackers(self) -> list:
        """The trackers that are on, opened the first time they are needed."""
        if self._open is None:
            self._open = []
            for name in self.names:
                self._open.append(_OPENERS[name](self))
        return self._open


class _TensorBoard:
    """Scalars as TensorBoard events (``simple_value``, as torch's and HF's writers write them); the
    parameters in the HParams tab."""

    def __init__(self, trackers: Trackers):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        trackers.tensorboard_dir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(trackers.tensorboard_dir), filename_suffix=".mtsql")

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=key, simple_value=value) for key, value in values.items()])
        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def log_params(self, values: dict) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb

        self.writer.add_event(Event(wall_time=time.time(), summary=hparams_pb(values)))

    def close(self, failed: bool) -> None:
        self.writer.close()


class _Mlflow:
    """One MLflow run in the file store, through the client (no global active run to leak into other code)."""

    def __init__(self, trackers: Trackers):
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 refuses a file: store without it
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=trackers.mlflow_uri)
        project = trackers.project
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        tags = {"mtsql.run": trackers.group, "mtsql.fingerprint": trackers.fingerprint}
        self.run_id = self.client.create_run(experiment_id, run_name=trackers.run_name, tags=tags).info.run_id

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(key, value, now, step) for key, value in values.items()]
        )

    def log_params(self, values: dict) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)[:MLFLOW_PARAM_CHARS]) for key, value in values.items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class _Wandb:
    """One offline W&B run (``wandb sync <folder>`` uploads it, by hand)."""

    def __init__(self, trackers: Trackers):
        os.environ["WANDB_MODE"] = "offline"  # and every process started from here: never a network call
        import wandb

        trackers.dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=trackers.project,
            group=trackers.group,
            name=trackers.run_name,
            dir=str(trackers.dir),
            mode="offline",
            reinit="create_new",
            tags=[trackers.fingerprint[:12]],
            settings=wandb.Settings(silent=True),
        )

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def log_params(self, values: dict) -> None:
        self.run.config.update(values, allow_val_change=True)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


_OPENERS = {"tensorboard": _TensorBoard, "wandb": _Wandb, "mlflow": _Mlflow}
