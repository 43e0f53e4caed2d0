"""On CUDA machines the verl plan is what it was before verl learned to train on CPU: the paper profile's
dry run prints the same commands as ``tests/golden/paper-qwen3-4b.dry-run.txt`` (recorded before the change)."""

import sys
from pathlib import Path

from mtsql.app import pipeline
from mtsql.engines.verl import stage

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "paper-qwen3-4b.dry-run.txt"


def paper_dry_run(runs: Path, home: Path, capsys) -> str:
    """The paper pipeline's dry run (stderr) with this machine's paths replaced by placeholders."""
    capsys.readouterr()
    pipeline.run_pipeline(REPO / "pipelines" / "paper.yaml", REPO / "configs" / "profiles" / "paper-qwen3-4b.yaml",
                          [f"runs_dir={runs}", "data.require_full=false"], dry_run=True)
    text = capsys.readouterr().err
    for real, placeholder in ((str(runs), "<runs>"), (str(home), "<home>"), (str(REPO), "<repo>"),
                              (sys.executable, "<python>")):
        text = text.replace(real, placeholder)
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def test_the_paper_dry_run_on_a_cuda_machine_prints_the_commands_it_printed_before(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("MTSQL_DATA", raising=False)
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(stage, "has_cuda", lambda: True)
    assert paper_dry_run(tmp_path / "runs", tmp_path / "home", capsys) == GOLDEN.read_text()
