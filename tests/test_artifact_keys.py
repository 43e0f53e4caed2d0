"""Artifact keys: the labels on disk derived from them, recorded in manifests, read back (old manifests too),
and the one input lookup."""

import json

import pytest

from mtsql.app.report.runs import evaluations, latest_artifacts
from mtsql.app.runner import Pending, latest_input
from mtsql.base.artifacts import MODEL_DIR, ArtifactKey, Store, key_of
from mtsql.base.errors import UsageError


def test_labels_are_the_ones_runs_already_hold():
    """Existing run folders keep working: every label a pipeline or command writes is derived unchanged."""
    derived = {
        ArtifactKey("sample"): "sample", ArtifactKey("sample", 2): "sample-r2", ArtifactKey("reject", 2): "reject-r2",
        ArtifactKey("sft", 10): "sft-r10", ArtifactKey("rl", 3): "rl-c3", ArtifactKey("curriculum"): "curriculum",
        ArtifactKey("sample", variant="pool"): "sample-pool", ArtifactKey("evaluate"): "evaluate",
        ArtifactKey.evaluation(None): "eval-base", ArtifactKey.evaluation(ArtifactKey("sft", 2)): "eval-sft-r2",
        ArtifactKey.evaluation(ArtifactKey("rl", 1)): "eval-rl-c1",
        ArtifactKey.evaluation(ArtifactKey("sft", 2), name="eval-sft-vote4"): "eval-sft-vote4",
        ArtifactKey.evaluation(ArtifactKey("sft", name="mine")): "eval-mine",
        ArtifactKey("sample", name="s2"): "s2",
    }
    assert {key: key.label for key in derived} == derived


def test_a_label_given_by_hand_keeps_what_the_artifact_is():
    by_hand = ArtifactKey.evaluation(ArtifactKey("sft", 2), name="eval-sft")  # a pipeline step's label
    assert (by_hand.label, by_hand.phase, by_hand.round) == ("eval-sft", "sft", 2)
    assert ArtifactKey("sample", 1, name="sample-r1") == ArtifactKey("sample", 1), "the derived label is no name"
    assert ArtifactKey("rl", 1).phase is None and ArtifactKey.evaluation(None).phase == "base"


def test_the_manifest_records_the_key_and_the_store_reads_it(tmp_path):
    store = Store(tmp_path)
    key = ArtifactKey.evaluation(ArtifactKey("rl", 2), name="eval-rl-predicted-memory")
    art, _ = store.run(key, {}, {}, lambda ctx: {})
    manifest = json.loads((tmp_path / "eval-rl-predicted-memory" / "latest" / "manifest.json").read_text())
    assert manifest["key"] == {"stage": "evaluate", "round": 2, "variant": "rl", "name": "eval-rl-predicted-memory"}
    assert manifest["label"] == "eval-rl-predicted-memory" and manifest["stage"] == "evaluate"
    assert store.latest("eval-rl-predicted-memory").key == key == art.key


def _old_artifact(store: Store, label: str, stage: str, round_: int | None, *, model: bool = False) -> None:
    """An artifact as an mtsql before keys wrote it: stage, label and round, no ``key``."""
    folder = store.root / label / "abc"
    folder.mkdir(parents=True)
    if model:
        (folder / MODEL_DIR).mkdir()
    (folder / "manifest.json").write_text(json.dumps({"schema_version": 2, "stage": stage, "label": label,
                                                      "round": round_, "fingerprint": "abc", "outputs": []}))
    (folder.parent / "latest").symlink_to("abc")


def test_old_manifests_without_a_key_get_one(tmp_path):
    store = Store(tmp_path)
    _old_artifact(store, "sft-r1", "sft", 1, model=True)
    _old_artifact(store, "sft-r2", "sft", 2, model=True)
    _old_artifact(store, "eval-sft-turns1", "evaluate", None)
    _old_artifact(store, "eval-vote", "evaluate", None)
    _old_artifact(store, "e-hf", "evaluate", None)
    assert store.latest("sft-r2").key == ArtifactKey("sft", 2)
    assert key_of(store.latest("eval-sft-turns1").manifest) == ArtifactKey("evaluate", None, "sft",
                                                                          name="eval-sft-turns1")
    assert store.latest("eval-vote").key.phase is None and store.latest("e-hf").key.variant is None
    assert list(evaluations(latest_artifacts(tmp_path))) == ["eval-sft-turns1", "eval-vote"], "as their labels said"
    assert store.model("sft").label == "sft-r2", "the last round, from the keys of old manifests"
    assert store.model("auto").label == "sft-r2"


def test_latest_input_artifact_placeholder_or_usage_error(tmp_path):
    store = Store(tmp_path / "run")
    with pytest.raises(UsageError, match="no complete 'reject' artifact .*mtsql status run"):
        latest_input(store, "reject")
    placeholder = latest_input(store, "reject", dry_run=True)
    assert isinstance(placeholder, Pending) and placeholder.label == "reject" and placeholder.fingerprint is None
    done, _ = store.run(ArtifactKey("reject"), {}, {}, lambda ctx: {})
    assert latest_input(store, "reject") == done == latest_input(store, "reject", dry_run=True)
