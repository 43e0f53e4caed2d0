"""Artifact keys: the labels on disk derived from them, recorded in manifests, read back (older manifests
refused), and the one input lookup."""

import json

import pytest

from mtsql.app.report.runs import evaluations, latest_artifacts
from mtsql.app.runner import Pending, latest_input
from mtsql.base.artifacts import MODEL_DIR, SCHEMA_VERSION, ArtifactKey, Store
from mtsql.base.errors import UsageError


def test_labels_are_the_ones_runs_already_hold():
    """Existing run folders keep working: every label a pipeline or command writes is derived unchanged."""
    derived = {
        ArtifactKey("sample"): "sample",
        ArtifactKey("sample", 2): "sample-r2",
        ArtifactKey("reject", 2): "reject-r2",
        ArtifactKey("sft", 10): "sft-r10",
        ArtifactKey("rl", 3): "rl-c3",
        ArtifactKey("curriculum"): "curriculum",
        ArtifactKey("sample", variant="pool"): "sample-pool",
        ArtifactKey("evaluate"): "evaluate",
        ArtifactKey.evaluation(None): "eval-base",
        ArtifactKey.evaluation(ArtifactKey("sft", 2)): "eval-sft-r2",
        ArtifactKey.evaluation(ArtifactKey("rl", 1)): "eval-rl-c1",
        ArtifactKey.evaluation(ArtifactKey("sft", 2), name="eval-sft-vote4"): "eval-sft-vote4",
        ArtifactKey.evaluation(ArtifactKey("sft", name="mine")): "eval-mine",
        ArtifactKey.evaluation(ArtifactKey("sft", 1, "short")): "eval-sft-short-r1",
        ArtifactKey.evaluation(ArtifactKey("rl", 3, "outcome")): "eval-rl-outcome-c3",
        ArtifactKey("sample", name="s2"): "s2",
    }
    assert {key: key.label for key in derived} == derived


def test_a_label_given_by_hand_keeps_what_the_artifact_is():
    by_hand = ArtifactKey.evaluation(ArtifactKey("sft", 2), name="eval-sft")  # a pipeline step's label
    assert (by_hand.label, by_hand.phase, by_hand.round) == ("eval-sft", "sft", 2)
    assert ArtifactKey("sample", 1, name="sample-r1") == ArtifactKey("sample", 1), (
        "the derived label is no name"
    )
    assert ArtifactKey("rl", 1).phase is None and ArtifactKey.evaluation(None).phase == "base"


def test_the_manifest_records_the_key_and_the_store_reads_it(tmp_path):
    store = Store(tmp_path)
    key = ArtifactKey.evaluation(ArtifactKey("rl", 2), name="eval-rl-predicted-memory")
    art, _ = store.run(key, {}, {}, lambda ctx: {})
    manifest = json.loads((tmp_path / "eval-rl-predicted-memory" / "latest" / "manifest.json").read_text())
    assert manifest["key"] == {
        "stage": "evaluate",
        "round": 2,
        "variant": "rl",
        "name": "eval-rl-predicted-memory",
        "model_variant": None,
    }
    assert manifest["label"] == "eval-rl-predicted-memory" and manifest["stage"] == "evaluate"
    assert store.latest("eval-rl-predicted-memory").key == key == art.key


def test_an_evaluation_key_keeps_the_variant_of_the_model_it_scored(tmp_path):
    """A pipeline step's label says nothing the report reads: the key says which model was scored."""
    store = Store(tmp_path)
    for model in (ArtifactKey("sft", 1, "short"), ArtifactKey("sft", 1)):
        store.run(
            ArtifactKey.evaluation(model, name="eval-x" if model.variant else "eval-y"),
            {"m": model.label},
            {},
            lambda ctx: {},
        )
    found = {
        label: (art.key.phase, art.key.round, art.key.model_variant)
        for label, art in evaluations(latest_artifacts(tmp_path)).items()
    }
    assert found == {"eval-x": ("sft", 1, "short"), "eval-y": ("sft", 1, None)}


def _old_artifact(store: Store, label: str, manifest: dict, *, model: bool = False) -> None:
    """An artifact as an older mtsql wrote it."""
    folder = store.root / label / "abc"
    folder.mkdir(parents=True)
    if model:
        (folder / MODEL_DIR).mkdir()
    (folder / "manifest.json").write_text(
        json.dumps({"label": label, "fingerprint": "abc", "outputs": []} | manifest)
    )
    (folder.parent / "latest").symlink_to("abc")


@pytest.mark.parametrize(
    ("label", "manifest", "lacks"),
    [
        ("sft-r1", {"schema_version": 2, "stage": "sft", "round": 1}, "records no artifact key"),
        (
            "eval-sft",
            {
                "schema_version": 3,
                "stage": "evaluate",
                "round": 1,
                "key": {"stage": "evaluate", "round": 1, "variant": "sft", "name": "eval-sft"},
            },
            "does not record the variant of the model it scored",
        ),
    ],
)
def test_an_artifact_an_older_mtsql_wrote_is_refused_with_one_line(tmp_path, label, manifest, lacks):
    store = Store(tmp_path)
    _old_artifact(store, label, manifest, model=label.startswith("sft"))
    with pytest.raises(
        UsageError,
        match=f"{label}/abc: written by an older mtsql .*{lacks}.*; delete that folder and rerun its stage",
    ) as refused:
        store.latest(label)
    assert "\n" not in str(refused.value)
    damaged = []
    assert latest_artifacts(tmp_path, damaged) == {} and len(damaged) == 1


def test_a_key_written_now_is_read_back_and_is_not_refused(tmp_path):
    store = Store(tmp_path)
    key = ArtifactKey.evaluation(ArtifactKey("rl", 2, "outcome"))
    art, _ = store.run(key, {}, {}, lambda ctx: {})
    assert art.manifest["schema_version"] == SCHEMA_VERSION and store.latest(key.label).key == key


def test_latest_input_artifact_placeholder_or_usage_error(tmp_path):
    store = Store(tmp_path / "run")
    with pytest.raises(UsageError, match="no complete 'reject' artifact .*mtsql status run"):
        latest_input(store, "reject")
    placeholder = latest_input(store, "reject", dry_run=True)
    assert (
        isinstance(placeholder, Pending) and placeholder.label == "reject" and placeholder.fingerprint is None
    )
    done, _ = store.run(ArtifactKey("reject"), {}, {}, lambda ctx: {})
    assert latest_input(store, "reject") == done == latest_input(store, "reject", dry_run=True)
