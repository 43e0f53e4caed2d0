"""Reading back what the trackers wrote, for tests: TensorBoard event files and an MLflow file store.

tensorboard_scalars(folder)["rl/reward_mean"]          # [(step, value), ...] over every event file there
mlflow_run(uri, "demo/rl-c1").metrics["rl/kl"]        # [(step, value), ...]; .params, .status, .tags
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``folder`` (one TensorBoard run), by tag, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: sorted((e.step, e.value) for e in events.Scalars(tag)) for tag in events.Tags()["scalars"]}


def tensorboard_params(folder: Path) -> dict[str, object]:
    """The parameters mtsql's writer put in the HParams tab of ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(folder))
    events.Reload()
    data = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    )
    return {
        key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for key, value in data.session_start_info.hparams.items()
    }


@dataclass(frozen=True)
class MlflowRun:
    status: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, list[tuple[int, float]]]


def mlflow_runs(uri: str, experiment: str = "mtsql") -> dict[str, MlflowRun]:
    """Every run of ``experiment`` in the MLflow store at ``uri``, by run name."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    out = {}
    for run in client.search_runs([found.experiment_id]) if found else []:
        metrics = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
        }
        out[run.info.run_name] = MlflowRun(run.info.status, run.data.params, run.data.tags, metrics)
    return out


def mlflow_run(uri: str, name: str, experiment: str = "mtsql") -> MlflowRun:
    runs = mlflow_runs(uri, experiment)
    assert name in runs, f"no MLflow run {name!r} in {uri}: {sorted(runs)}"
    return runs[name]
