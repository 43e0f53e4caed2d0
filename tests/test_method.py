"""The method experiment (pipelines/method.yaml with configs/experiments/method-smollm2.yaml): pipeline
variants (a labelled sft-iterate or rl step), round models as references, its dry run, its profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.app.runner import Pending, store_for
from mtsql.base.artifacts import SCHEMA_VERSION, Artifact, ArtifactKey
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.files import read_jsonl
from mtsql.core.data import eval_turns, train_pool

REPO = Path(__file__).resolve().parents[1]
METHOD = REPO / "pipelines" / "method.yaml"
PROFILE = REPO / "configs" / "experiments" / "method-smollm2.yaml"
STEPS = [
    "eval-base",
    "sample-r1",
    "reject-r1",
    "sft-r1",
    "sample-r2",
    "reject-r2",
    "sft-r2",
    "eval-sft",
    "eval-sft-r1",
    "sample-short-r1",
    "reject-short-r1",
    "sft-short-r1",
    "eval-sft-short",
    "curriculum",
    "rl-c1",
    "rl-c2",
    "rl-c3",
    "eval-rl",
    "rl-outcome-c1",
    "rl-outcome-c2",
    "rl-outcome-c3",
    "eval-rl-outcome",
]


def test_dry_run_from_an_empty_folder_names_every_step(tmp_path, capsys):
    pipeline.run_pipeline(METHOD, PROFILE, [f"runs_dir={tmp_path / 'runs'}"], dry_run=True)
    err = capsys.readouterr().err
    planned = [line.split()[0] for line in err.splitlines() if "will run" in line or "will be built" in line]
    assert planned == [*STEPS, "report"]
    assert not list((tmp_path / "runs").rglob("manifest.json")), "a dry run writes no artifact"


def write(tmp_path, steps: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"steps:\n{steps}")
    return path


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("  - stage: sft-iterate\n    label: Short-1\n", "names a variant: one word"),
        (
            "  - stage: evaluate\n    model: sft-short\n  - stage: sft-iterate\n    label: short\n",
            "must be one of",
        ),
        ("  - stage: evaluate\n    model: sft-r1\n  - stage: sft-iterate\n", "must be one of"),
        (
            "  - stage: sft-iterate\n    label: short\n  - stage: evaluate\n    model: sft-r1\n",
            "must be one of",
        ),
        (
            "  - stage: curriculum\n  - stage: rl\n    label: outcome\n  - stage: rl\n    label: outcome\n",
            "a second rl step labelled 'outcome'",
        ),
        ("  - stage: rl\n    label: outcome\n", "needs a curriculum step before it"),
    ],
)
def test_variant_and_round_references_are_checked_when_the_pipeline_loads(tmp_path, steps, message):
    with pytest.raises(UsageError, match=message):
        pipeline.load_pipeline(write(tmp_path, steps))


def test_variants_label_their_artifacts_and_leave_the_main_models(tmp_path, monkeypatch):
    """The short variant trains from the base model under its own labels; both RL steps start from the main
    chain's last round; each evaluation scores the model its step names."""
    started, scored = {}, []

    def fake_sft(cfg, *, variant=None, trained=None, **_):
        models = [
            Artifact(tmp_path, {"label": ArtifactKey("sft", k, variant).label})
            for k in range(1, cfg.sft.rounds + 1)
        ]
        trained.update({m.label: m for m in models})
        return models[-1]

    def fake_rl(cfg, *, model, variant=None, **_):
        label = ArtifactKey("rl", 3, variant).label
        started[label] = (model.label, cfg.reward.family)
        return Artifact(tmp_path, {"label": label})

    monkeypatch.setattr(pipeline, "sft_iterate", fake_sft)
    monkeypatch.setattr(pipeline, "curriculum", lambda cfg, **_: Artifact(tmp_path, {"label": "curriculum"}))
    monkeypatch.setattr(pipeline, "rl", fake_rl)
    monkeypatch.setattr(
        pipeline,
        "evaluate",
        lambda cfg, *, label, model, **_: scored.append(
            (label, model.label if model else None, cfg.env.mode)
        ),
    )
    monkeypatch.setattr(pipeline, "build_report", lambda root, **_: root / "report.md")
    pipeline.run_pipeline(METHOD, PROFILE, [f"runs_dir={tmp_path / 'runs'}"])
    assert started == {"rl-c3": ("sft-r2", "process"), "rl-outcome-c3": ("sft-r2", "outcome")}
    assert scored == [
        ("eval-base", None, "long"),
        ("eval-sft", "sft-r2", "long"),
        ("eval-sft-r1", "sft-r1", "long"),
        ("eval-sft-short", "sft-short-r1", "short"),
        ("eval-rl", "rl-c3", "long"),
        ("eval-rl-outcome", "rl-outcome-c3", "long"),
    ]


def test_a_round_that_did_not_run_cannot_be_scored(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "sft_iterate", lambda cfg, **_: Artifact(tmp_path, {"label": "sft-r1"}))
    monkeypatch.setattr(pipeline, "evaluate", lambda cfg, **_: None)
    path = write(tmp_path, "  - stage: sft-iterate\n  - stage: evaluate\n    model: sft-r2\n")
    with pytest.raises(StageFailed, match="no earlier step trained model 'sft-r2'"):
        pipeline.run_pipeline(path, PROFILE, [f"runs_dir={tmp_path / 'runs'}"])


def test_sft_iterate_variant_labels_and_round_models(tmp_path, monkeypatch):
    labels = []
    monkeypatch.setattr(
        pipeline, "sample", lambda cfg, *, key, **_: labels.append(key.label) or Pending(key.label, None)
    )
    monkeypatch.setattr(
        pipeline,
        "run_stage",
        lambda name, cfg, *, key, **_: labels.append(key.label) or Pending(key.label, None),
    )
    trained = {}
    cfg = load_config(PROFILE, [f"runs_dir={tmp_path / 'runs'}"])
    last = pipeline.sft_iterate(cfg, variant="short", trained=trained, dry_run=True)
    assert labels == [
        "sample-short-r1",
        "reject-short-r1",
        "sft-short-r1",
        "sample-short-r2",
        "reject-short-r2",
        "sft-short-r2",
    ]
    assert last.label == "sft-short-r2" and list(trained) == ["sft-short-r1", "sft-short-r2"]


def fake_model(store, key: ArtifactKey) -> None:
    folder = store.root / key.label / "abc"
    (folder / "model").mkdir(parents=True)
    (folder.parent / "latest").symlink_to("abc")
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "stage": key.stage,
                "label": key.label,
                "key": key.to_dict(),
                "round": key.round,
                "fingerprint": "abc",
                "outputs": [],
            }
        )
    )


def test_the_runs_sft_and_rl_models_are_never_a_variants(tmp_path):
    store = store_for(load_config(PROFILE, [f"runs_dir={tmp_path / 'runs'}"]))
    for key in (ArtifactKey("sft", 1, "short"), ArtifactKey("rl", 3, "outcome")):
        fake_model(store, key)
    with pytest.raises(UsageError, match="no sft model yet"):
        store.model("sft")
    assert store.model("auto") is None, "a variant alone is no model of the run"
    for key in (ArtifactKey("sft", 1), ArtifactKey("sft", 2), ArtifactKey("rl", 1)):
        fake_model(store, key)
    assert (store.model("sft").label, store.model("rl").label, store.model("auto").label) == (
        "sft-r2",
        "rl-c1",
        "rl-c1",
    )


def test_profile_sizes(fixture_root):
    """At least 100 turns per dev set (scored turns can only be fewer), and the round-1 items of the
    header."""
    cfg = load_config(PROFILE)
    assert cfg.sft.first_round_policy == "gold_with_correction" and cfg.sft.rounds == 2
    assert cfg.sample.temperature == 0.7 and cfg.sample.n > 1
    for name in cfg.data.eval_datasets:
        assert len(eval_turns(cfg.data, name, fixture_root, with_hardness=False)) >= 100
    assert len(train_pool(cfg.data, fixture_root)) == 114


@pytest.mark.slow
def test_method_pipeline_end_to_end_with_a_tiny_model(tmp_path, models_home, tiny_qwen3):
    """The whole method chain on the fixture with the 2-layer tiny-qwen3: round 2 samples the round-1
    model."""
    runs = tmp_path / "runs"
    overrides = [
        f"runs_dir={runs}",
        "model.name=tiny-qwen3",
        "model.dtype=float32",
        "sample.backend=hf",
        "data.train_limit=2",
        "data.eval_limit=1",
        "sample.n=2",
        "sample.max_new_tokens=16",
        "sft.max_steps=1",
        "sft.trainable_layers=1",
        "rl.local.trainable_layers=1",
        "rl.max_message_tokens=16",
        "rl.steps_per_stage=1",
        "rl.n=2",
        "curriculum.stages=[[easy, medium, hard, extra]]",
    ]
    pipeline.run_pipeline(METHOD, PROFILE, overrides)
    store = store_for(load_config(PROFILE, overrides))
    round2 = store.require("sample-r2")
    rows = read_jsonl(round2.path / "trajectories.jsonl")
    assert round2.metrics["policy"] == "model" and round2.metrics["model"] == "sft-r1"
    assert rows and all(r["response_ids"] is not None for r in rows), "round 2 is written by the model"
    assert round2.manifest["inputs"]["model"]["label"] == "sft-r1"
    assert store.require("sample-r1").metrics["policy"] == "gold_with_correction"
    for label in ("eval-base", "eval-sft", "eval-sft-r1", "eval-sft-short", "eval-rl", "eval-rl-outcome"):
        assert "revisions" in store.require(label).metrics["datasets"]["cosql"]
    assert (
        store.require("rl-outcome-c1").manifest["inputs"]["model"]
        == store.require("rl-c1").manifest["inputs"]["model"]
    )
    report = (store.root / "report" / "report.md").read_text()
    assert "## Paper findings" in report and "## Kept trajectories by who wrote them" in report
