"""Running ``llamafactory-cli``: log streamed to a file, a progress bar, results, one-line failures.

``run_sft(plan, log_path=...)`` writes the plan's YAML files, trains, merges a LoRA adapter and
checks that ``plan.model_dir`` is a complete Hugging Face model folder. The commands run through
``mtsql.engines.commands.run_logged`` (a failure quotes the real error line, not the wrapper
errors of torchrun or llamafactory's launcher).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mtsql.base.errors import StageFailed
from mtsql.base.files import write_text
from mtsql.engines.commands import Command, OutputLines, run_logged
from mtsql.engines.llamafactory.plan import SftPlan

_TRAIN_BAR = re.compile(r"\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")  # the trainer's tqdm bar has no label
_LOSS = re.compile(r"'loss': '?([-+0-9.eE]+|nan|inf)'?")
_NUM_EXAMPLES = re.compile(r"Num examples = ([\d,]+)")


@dataclass(frozen=True)
class TrainResult:
    """Final training metrics: mean train loss, optimizer steps, trainer runtime, examples trained on."""

    train_loss: float
    steps: int
    runtime_s: float
    examples: int | None
    wall_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def run_sft(plan: SftPlan, *, log_path: Path, expected_examples: int | None = None) -> TrainResult:
    """Write the plan's files, train, merge (LoRA), and check ``plan.model_dir``."""
    for path, text in plan.files().items():
        write_text(path, text)
    result = run_train(
        plan.train, output_dir=plan.trainer_dir, log_path=log_path, expected_examples=expected_examples
    )
    if plan.merge is not None:
        merge_lora(plan.merge, export_dir=plan.model_dir, log_path=log_path)
    check_model_dir(plan.model_dir)
    return result


def run_train(
    command: Command, *, output_dir: Path, log_path: Path, expected_examples: int | None = None
) -> TrainResult:
    """Run ``llamafactory-cli train`` with a progress bar; read the metrics it saved in ``output_dir``.

    ``expected_examples``: fail when LLaMA-Factory reports training on a different number.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

    from mtsql.base.progress import progress_bar

    started = time.perf_counter()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("loss {task.fields[loss]}"),
    )
    watcher = TrainWatcher()
    with progress_bar(*columns) as progress:
        task = progress.add_task("llamafactory: loading", total=None, loss="-")

        def show(text: str) -> None:
            watcher.feed(text)
            if watcher.total:
                progress.update(
                    task,
                    description="llamafactory: training",
                    completed=watcher.step,
                    total=watcher.total,
                    loss=watcher.loss or "-",
                )

        run_logged(command, log_path, on_output=show)
    if (
        expected_examples is not None
        and watcher.examples is not None
        and watcher.examples != expected_examples
    ):
        raise StageFailed(
            f"LLaMA-Factory trained on {watcher.examples} of {expected_examples} examples "
            f"(it skipped some: see 'Invalid' / 'Dropped' lines in {log_path})"
        )
    return read_train_result(output_dir, examples=watcher.examples, wall_s=time.perf_counter() - started)


def merge_lora(command: Command, *, export_dir: Path, log_path: Path) -> Path:
    """Run ``llamafactory-cli export`` (LoRA merge) and check the Hugging Face folder it wrote."""
    from rich.console import Console

    with Console(stderr=True).status("llamafactory: merging the LoRA adapter"):
        run_logged(command, log_path)
    check_model_dir(export_dir)
    return Path(export_dir)


class TrainWatcher:
    """Follows llamafactory's output: the trainer's progress bar, logged losses, the example count."""

    def __init__(self) -> None:
        self.step = 0
        self.total: int | None = None
        self.loss: str | None = None
        self.examples: int | None = None
        self.feed = OutputLines(self._line).feed

    def _line(self, line: str) -> None:
        if bar := _TRAIN_BAR.match(line):
            self.step, self.total = int(bar.group(1)), int(bar.group(2))
        if loss := _LOSS.search(line):
            self.loss = loss.group(1)
        if count := _NUM_EXAMPLES.search(line):
            self.examples = int(count.group(1).replace(",", ""))


def read_train_result(output_dir: Path, *, examples: int | None = None, wall_s: float = 0.0) -> TrainResult:
    """Metrics from ``train_results.json`` and ``trainer_state.json`` in a finished ``output_dir``."""
    output_dir = Path(output_dir)
    try:
        results = json.loads((output_dir / "train_results.json").read_text())
        state = json.loads((output_dir / "trainer_state.json").read_text())
        return TrainResult(
            train_loss=float(results["train_loss"]),
            steps=int(state["global_step"]),
            runtime_s=float(results["train_runtime"]),
            examples=examples,
            wall_s=round(wall_s, 1),
        )
    except (OSError, ValueError, KeyError) as exc:
        raise StageFailed(
            f"llamafactory-cli train exited 0 but left no usable metrics in {output_dir}: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def training_curve(output_dir: Path) -> list[tuple[int, dict]]:
    """What the trainer logged each step (loss, grad_norm, learning_rate, epoch), from ``trainer_state.json``
    of a finished ``output_dir``: ``[(step, {name: value}), ...]``; the final summary entry is left out."""
    state = json.loads((Path(output_dir) / "trainer_state.json").read_text())
    return [
        (int(entry["step"]), {key: value for key, value in entry.items() if key != "step"})
        for entry in state.get("log_history", [])
        if "loss" in entry
    ]


def check_model_dir(folder: Path) -> None:
    """Fail unless ``folder`` holds a model config, weights and a tokenizer."""
    folder = Path(folder)
    needed = {
        "config.json": (folder / "config.json").is_file(),
        "weights (model*.safetensors)": any(folder.glob("model*.safetensors")),
        "tokenizer_config.json": (folder / "tokenizer_config.json").is_file(),
    }
    missing = [name for name, present in needed.items() if not present]
    if missing:
        raise StageFailed(f"{folder} is not a complete model folder: missing {', '.join(missing)}")
