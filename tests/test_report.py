"""The report and the analysis notebook, on a small run folder built through the artifact store."""

import json
import os
from pathlib import Path

import pytest

from mtsql.artifacts import Store
from mtsql.errors import UsageError
from mtsql.report import build_report

REPO = Path(__file__).resolve().parents[1]


def _dataset_block(ex):
    bucket = {"count": 4, "ex": ex, "em": ex / 2}
    return {"turns": 8, "interactions": 3, "ex": ex, "em": ex / 2, "interaction_ex": ex / 3, "interaction_em": 0.0,
            "unscorable_ex": 1, "generated_tokens": 100,
            "by_hardness": {h: bucket for h in ("easy", "medium", "hard", "extra")},
            "by_turn": {t: bucket for t in ("1", "2", "3", "4", ">4")},
            "protocol": {"protocol_valid": ex, "tool_calls_per_turn": 1.5, "verification_accuracy": 0.5,
                         "self_correction_rate": 0.25, "self_correction_success": 0.5}}


@pytest.fixture
def run_folder(tmp_path):
    store = Store(tmp_path / "tiny")
    for label, ex in (("eval-base", 0.1), ("eval-sft", 0.4), ("eval-rl", 0.5)):
        store.run("evaluate", label, {"l": label}, {}, lambda ctx, ex=ex: {
            "mode": "long", "memory": "gold", "model_name": "smollm2-135m",
            "datasets": {"cosql": _dataset_block(ex), "sparc": _dataset_block(ex / 2)}})

    def sft(ctx):
        return {"examples": 40, "train_loss": 1.25, "over_cutoff": 0}

    store.run("sft", "sft-r1", {}, {}, sft, round=1)
    for k in (1, 2):
        def rl(ctx, k=k):
            (ctx.out / "metrics.jsonl").write_text("".join(
                json.dumps({"stage": k, "step": s, "reward_mean": 0.1 * s + k, "response_length": 50 + s}) + "\n"
                for s in (1, 2, 3)))
            return {"steps": 3}
        store.run("rl", f"rl-c{k}", {"k": k}, {}, rl, round=k)
    return tmp_path / "tiny"


def test_report_has_tables_and_real_plots(run_folder):
    path = build_report(run_folder)
    text = path.read_text()
    assert "| eval-sft | long | gold | cosql | 8 | 40.0 | 20.0 |" in text
    assert "Qwen3-4B (paper) | + curriculum RL (outcome+process) | cosql | 79.9 | 65.2" in text
    assert "| sft-r1 |" in text and "## Cost of each stage" in text
    from PIL import Image

    for name in ("ex_by_hardness", "ex_by_turn", "protocol", "rl_curves"):
        image = Image.open(path.parent / "plots" / f"{name}.png")
        assert image.size[0] > 400 and image.size[1] > 200
        assert f"plots/{name}.png" in text
    build_report(run_folder)  # rebuilding replaces the folder as a whole
    assert not (run_folder / ".report.tmp").exists()


def test_report_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match="no run folder"):
        build_report(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no complete artifacts"):
        build_report(tmp_path / "empty")


def test_notebook_runs_on_the_run(run_folder):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    os.environ["MTSQL_RUN"] = str(run_folder)
    try:
        NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    finally:
        del os.environ["MTSQL_RUN"]
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3, "hardness, turn and RL curve plots are drawn"
