"""On CUDA machines the verl plan is what it was before verl learned to train on CPU: the paper profile's
dry run prints the same engine commands as ``tests/golden/paper-qwen3-4b.commands.txt`` (recorded from
main before the change; fingerprints and machine paths are placeholders)."""

import re
import sys
from pathlib import Path

from mtsql.app import pipeline
from mtsql.engines.verl import engine as stage

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "paper-qwen3-4b.commands.txt"
ENGINE_COMMANDS = ("llamafactory-cli", "verl.trainer.main_ppo", "verl.model_merger")
FINGERPRINT = re.compile(r"\b[0-9a-f]{12}\b")


def commands(text: str) -> str:
    """The engine command lines of a dry run (with their continuation lines), fingerprints as ``<fp>``."""
    kept, going = [], False
    for line in text.splitlines():
        going = going or any(name in line for name in ENGINE_COMMANDS)
        if going:
            kept.append(FINGERPRINT.sub("<fp>", line.rstrip()))
            going = line.rstrip().endswith("\\")
    return "\n".join(kept) + "\n"


def paper_dry_run(runs: Path, home: Path, capsys) -> str:
    """The paper pipeline's dry run (stderr) with this machine's paths replaced by placeholders."""
    capsys.readouterr()
    pipeline.run_pipeline(
        REPO / "pipelines" / "paper.yaml",
        REPO / "configs" / "profiles" / "paper-qwen3-4b.yaml",
        [f"runs_dir={runs}", "data.require_full=false"],
        dry_run=True,
    )
    text = capsys.readouterr().err
    for real, placeholder in (
        (str(runs), "<runs>"),
        (str(home), "<home>"),
        (str(REPO), "<repo>"),
        (sys.executable, "<python>"),
    ):
        text = text.replace(real, placeholder)
    return text


def test_the_paper_dry_run_on_a_cuda_machine_prints_the_commands_it_printed_before(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(stage, "has_cuda", lambda: True)
    found = commands(paper_dry_run(tmp_path / "runs", tmp_path / "home", capsys))
    assert found.count("verl.trainer.main_ppo") == 3 and found == GOLDEN.read_text()
