"""Stages chained through the artifact store: scripted policies (fast) and the tiny Qwen3 (engines)."""

import dataclasses
import json
from pathlib import Path

import pytest

from mtsql.app import pipeline
from mtsql.app.config import load_config
from mtsql.app.runner import run_stage, store_for
from mtsql.base.artifacts import SCHEMA_VERSION, Artifact, ArtifactKey
from mtsql.base.config import replace
from mtsql.base.errors import UsageError
from mtsql.base.files import read_jsonl
from mtsql.base.paths import data_dir
from mtsql.core.data import eval_turns, train_pool
from mtsql.core.data.records import Turn
from mtsql.core.results import EvaluationResult
from mtsql.core.trajectories import read_rows
from mtsql.engines.rollout import RolloutEngine

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"


def cfg_for(tmp_path, *overrides):
    return load_config(
        TINY, [f"runs_dir={tmp_path / 'runs'}", "data.train_limit=4", "sample.backend=hf", *overrides]
    )


def test_scripted_sample_reject_curriculum_and_cache(tmp_path):
    cfg = cfg_for(tmp_path, "sample.n=2")
    turns = train_pool(cfg.data, data_dir())
    assert turns and all(t.hardness for t in turns)
    sampled = pipeline.sample(cfg, key=ArtifactKey("sample", 1), policy="gold_with_correction")
    rows = read_jsonl(sampled.path / "trajectories.jsonl")
    assert len(rows) == 2 * len(turns) and not (sampled.path / "rollout").exists()
    assert sampled.metrics["ex"] == 1.0 and sampled.metrics["self_correction_rate"] == 1.0
    assert all(r["reward"]["score"] > 2 and r["actions"][0] == "exec_sql" for r in rows)
    kept = run_stage("reject", cfg, key=ArtifactKey("reject", 1), inputs={"sample": sampled})
    assert kept.metrics["kept"] > 0 and kept.metrics["unsolved"] == 0
    plan = pipeline.curriculum(cfg)
    sizes = [len(read_jsonl(plan.path / f"stage-{k}.jsonl")) for k in (1, 2, 3)]
    assert sum(sizes) == len(turns) == plan.metrics["pool"]
    again = pipeline.sample(cfg, key=ArtifactKey("sample", 1), policy="gold_with_correction")
    assert again.manifest["created_at"] == sampled.manifest["created_at"], "a rerun is a cache hit"
    other = pipeline.sample(cfg_for(tmp_path, "sample.n=1"), key=ArtifactKey("sample", 1), policy="gold")
    assert other.fingerprint != sampled.fingerprint


def test_pool_restricts_the_next_round(tmp_path):
    cfg = cfg_for(tmp_path)
    turns = train_pool(cfg.data, data_dir())
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    (pool_dir / "pool.jsonl").write_text(json.dumps(turns[1].to_dict()) + "\n")
    pool = Artifact(pool_dir, {"fingerprint": "f" * 64, "label": "reject-r1"})
    again = pipeline.sample(cfg, label="s2", policy="gold", pool=pool)
    assert {r["uid"] for r in read_jsonl(again.path / "trajectories.jsonl")} == {turns[1].uid}


def test_pipeline_files_validate_and_dry_run_plans(tmp_path, capsys):
    for path in (REPO / "pipelines").glob("*.yaml"):
        steps = pipeline.load_pipeline(path).steps
        assert steps and path.read_text().startswith("#")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - stage: evaluat\n")
    with pytest.raises(UsageError, match="not one of"):
        pipeline.load_pipeline(bad)
    bad.write_text("steps:\n  - stage: evaluate\n    modle: base\n")
    with pytest.raises(UsageError, match="did you mean 'steps\\[0\\].model'"):
        pipeline.load_pipeline(bad)
    pipeline.run_pipeline(
        REPO / "pipelines" / "reproduce.yaml", TINY, [f"runs_dir={tmp_path / 'runs'}"], dry_run=True
    )
    err = capsys.readouterr().err
    assert "eval-base" in err and "will run" in err and "sample-r1" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("manifest.json"))


def test_model_references(tmp_path):
    store = store_for(cfg_for(tmp_path))
    assert store.model("base") is None and store.model("auto") is None
    fake = store.root / "rl-c1" / "abc"
    (fake / "model").mkdir(parents=True)
    (fake.parent / "latest").symlink_to("abc")
    (fake / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "stage": "rl",
                "label": "rl-c1",
                "key": ArtifactKey("rl", 1).to_dict(),
                "fingerprint": "abc",
                "outputs": [],
            }
        )
    )
    assert store.model("auto").label == "rl-c1"
    assert store.model("auto", auto=("sft",)) is None, "rl starts from sft or base, never its own output"
    with pytest.raises(UsageError, match="no sft model yet"):
        store.model("sft")


def fake_model(store, label: str) -> None:
    """A complete artifact ``label`` of ``store`` with a model/ folder (no weights: nothing loads it here)."""
    folder = store.root / label / "abc"
    (folder / "model").mkdir(parents=True)
    (folder.parent / "latest").symlink_to("abc")
    stage, round_ = label.split("-r")
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "stage": stage,
                "label": label,
                "key": ArtifactKey(stage, int(round_)).to_dict(),
                "fingerprint": "abc",
                "outputs": [],
            }
        )
    )


def evaluations_of(steps: str, tmp_path, monkeypatch, trained=None) -> list[tuple[str, str | None]]:
    """(label, model label) of every evaluation a pipeline of ``steps`` runs; sft-iterate returns
    ``trained``."""
    path = tmp_path / "p.yaml"
    path.write_text(f"steps:\n{steps}")
    seen = []
    monkeypatch.setattr(
        pipeline,
        "evaluate",
        lambda cfg, *, label, model, **_: seen.append((label, model.label if model else None)),
    )
    monkeypatch.setattr(pipeline, "sft_iterate", lambda cfg, **_: trained)
    pipeline.run_pipeline(path, TINY, [f"runs_dir={tmp_path / 'runs'}"])
    return seen


def test_an_evaluation_of_sft_scores_the_runs_sft_model_when_no_step_trains_one(tmp_path, monkeypatch):
    fake_model(store_for(cfg_for(tmp_path)), "sft-r2")
    seen = evaluations_of("  - stage: evaluate\n    model: sft\n", tmp_path, monkeypatch)
    assert seen == [("eval-sft", "sft-r2")], "the base model was scored under the label eval-sft"


def test_an_evaluation_of_sft_after_rounds_that_trained_nothing_is_refused(tmp_path, monkeypatch):
    steps = "  - stage: sft-iterate\n  - stage: evaluate\n    model: sft\n"
    with pytest.raises(UsageError, match=r"steps\[1\] \(evaluate\) uses model 'sft', but no step before it"):
        evaluations_of(steps, tmp_path, monkeypatch, trained=None)


def test_rl_with_every_curriculum_stage_empty_trains_nothing(tmp_path, monkeypatch):
    """rl() returns None then, not the SFT model it would have started from (an eval-rl would score it)."""
    cfg = cfg_for(tmp_path)
    monkeypatch.setattr(pipeline, "read_turns", lambda path: [])
    start = Artifact(tmp_path, {"fingerprint": "f" * 64, "label": "sft-r1"})
    assert (
        pipeline.rl(
            cfg,
            curriculum_art=Artifact(tmp_path, {"fingerprint": "e" * 64, "label": "curriculum"}),
            model=start,
            engine="local",
        )
        is None
    )


def test_sft_rounds_stop_once_the_pool_is_solved(tmp_path, monkeypatch):
    """A round after the pool is empty would sample nothing (and fail): no round follows."""
    sampled = []
    monkeypatch.setattr(
        pipeline, "sample", lambda cfg, **kw: sampled.append(kw["key"].round) or Artifact(tmp_path, {})
    )
    monkeypatch.setattr(
        pipeline,
        "run_stage",
        lambda name, cfg, **kw: Artifact(
            tmp_path,
            {"metrics": {"items": 2, "solved": 2, "kept": 2, "unsolved": 0} if name == "reject" else {}},
        ),
    )
    pipeline.sft_iterate(cfg_for(tmp_path, "sft.first_round_policy=model"), rounds=3)
    assert sampled == [1]


@pytest.fixture
def tiny_cfg(tmp_path, models_home, tiny_qwen3):
    return cfg_for(
        tmp_path,
        "model.name=tiny-qwen3",
        "data.train_limit=2",
        "sample.max_new_tokens=8",
        "rl.max_message_tokens=8",
        "rl.steps_per_stage=1",
        "rl.n=2",
        "rl.batch_size=2",
        "rl.mini_batch_size=2",
        "sample.batch_size=8",
        "rl.local.trainable_layers=1",
    )


def test_local_rl_runs_every_curriculum_stage_and_caches(tiny_cfg):
    plan = pipeline.curriculum(tiny_cfg)
    last = pipeline.rl(tiny_cfg, curriculum_art=plan, engine="local")
    stages = sorted(p.name for p in Path(last.path).parents[1].iterdir() if p.name.startswith("rl-c"))
    nonempty = [k for k in (1, 2, 3) if read_jsonl(plan.path / f"stage-{k}.jsonl")]
    assert stages == [f"rl-c{k}" for k in nonempty]
    curve = read_jsonl(last.path / "metrics.jsonl")
    assert len(curve) == 1 and {
        "reward_mean",
        "response_length",
        "tool_calls_per_turn",
        "ex",
        "pg_loss",
        "memory_calls_per_turn",
        "self_correction_rate",
        "invalid_message_rate",
        "messages_per_turn",
    } <= set(curve[0])
    assert (last.path / "model" / "config.json").exists()
    again = pipeline.rl(tiny_cfg, curriculum_art=plan, engine="local")
    assert again.manifest["created_at"] == last.manifest["created_at"]


def test_local_rl_reuses_keys_values_within_a_step_and_drops_them_at_each_update(tiny_cfg, monkeypatch):
    from mtsql.engines.rollout import RolloutEngine

    seen = []
    real_run = RolloutEngine.run

    def spy(engine, *args, **kwargs):
        cache = engine.backend.cache
        seen.append(
            {"kept_at_start": len(cache.entries) + len(cache.shared), "reused_before": cache.reused_tokens}
        )
        rows = real_run(engine, *args, **kwargs)
        seen[-1]["reused"] = engine.backend.cache.reused_tokens - seen[-1]["reused_before"]
        return rows

    monkeypatch.setattr(RolloutEngine, "run", spy)
    cfg = replace(
        tiny_cfg, rl={"steps_per_stage": 2}, curriculum={"stages": (("easy", "medium", "hard", "extra"),)}
    )
    pipeline.rl(cfg, curriculum_art=pipeline.curriculum(cfg), engine="local")
    assert len(seen) == 2
    assert all(step["reused"] > 0 for step in seen), (
        "later messages start from the conversation's kept keys/values"
    )
    assert seen[1]["kept_at_start"] == 0, "keys/values computed before an update must not be reused after it"


def test_evaluate_model_writes_official_items(tiny_cfg, monkeypatch):
    cfg = replace(tiny_cfg, data={"eval_limit": 1})
    rollouts, run = [], RolloutEngine.run

    def recorded(engine, turns, **kwargs):
        rollouts.append([turn.dataset for turn in turns])
        return run(engine, turns, **kwargs)

    monkeypatch.setattr(RolloutEngine, "run", recorded)
    art = pipeline.evaluate(cfg, label="eval-base")
    assert len(cfg.data.eval_datasets) == 2 and len(rollouts) == 1, "one rollout keeps the batches full"
    assert set(rollouts[0]) == set(cfg.data.eval_datasets)
    for name in cfg.data.eval_datasets:
        block = art.metrics["datasets"][name]
        items = read_jsonl(art.path / name / "items.jsonl")
        assert len(items) == block["turns"] and {"exact_match", "exec_match", "hardness"} <= set(items[0])
        assert block["ex"] == 0.0 and set(block["by_turn"]) == {"1", "2", "3", "4", ">4"}
        trajectories = read_jsonl(art.path / name / "trajectories.jsonl")
        assert [row["uid"] for row in trajectories] == [t.uid for t in eval_turns(cfg.data, name, data_dir())]


@pytest.mark.slow
def test_sft_iterate_two_rounds_then_all_cached(tiny_cfg):
    cfg = replace(tiny_cfg, sft={"max_steps": 1, "batch_size": 1, "heldout": 1, "cutoff_len": 4096})
    model = pipeline.sft_iterate(cfg, rounds=2)
    assert model is not None and model.label == "sft-r1", "round 2 of an untrained model keeps nothing"
    assert (model.path / "model" / "config.json").exists()
    again = pipeline.sft_iterate(cfg, rounds=2)
    assert again.manifest["created_at"] == model.manifest["created_at"]


def test_evaluate_with_voting_reports_greedy_and_vote_side_by_side(tiny_cfg):
    cfg = replace(tiny_cfg, data={"eval_limit": 1, "eval_datasets": ("cosql",)}, evaluate={"vote": 2})
    art = pipeline.evaluate(cfg, label="eval-vote")
    block = art.metrics["datasets"]["cosql"]
    assert art.metrics["decoding"] == "vote@2" and set(block["decodings"]) == {"greedy", "vote@2"}
    assert block["decodings"]["vote@2"]["ex"] == block["ex"]
    voted = read_jsonl(art.path / "cosql" / "trajectories.jsonl")
    greedy = read_jsonl(art.path / "cosql" / "greedy" / "trajectories.jsonl")
    assert len(voted) == 2 * len(greedy) == 2 * block["turns"]
    assert not list(art.path.rglob("*-rollout")), "resumable shards are removed once scored"


def test_release_profile_runs_end_to_end_with_a_stand_in_model(tmp_path, tiny_qwen3):
    """configs/profiles/mtsql-r1-release.yaml with the tiny Qwen3 standing in for the released checkpoint."""
    runs = tmp_path / "runs"
    pipeline.run_pipeline(
        REPO / "pipelines" / "release.yaml",
        REPO / "configs" / "profiles" / "mtsql-r1-release.yaml",
        [
            f"runs_dir={runs}",
            "model.name=tiny-qwen3",
            "model.dtype=float32",
            "sample.backend=hf",
            "sample.batch_size=16",
            "data.eval_limit=2",
            "data.eval_datasets=[cosql,sparc]",
            "sample.max_new_tokens=8",
            "evaluate.max_response_tokens=20",
            "evaluate.prompt_filter_tokens=1000",
        ],
    )
    run = runs / "mtsql-r1-release"
    metrics = json.loads((run / "eval-base" / "latest" / "metrics.json").read_text())
    assert (metrics["protocol"], metrics["memory"], metrics["decoding"]) == ("release", "gold", "greedy")
    assert metrics["budgets"] == {
        "max_messages": 4,
        "max_new_tokens": 8,
        "max_response_tokens": 20,
        "prompt_filter_tokens": 1000,
        "observation_chars": 8000,
    }
    cosql, sparc = (metrics["datasets"][name]["prompt_filter"] for name in ("cosql", "sparc"))
    assert (
        0 < cosql["dropped"] < cosql["turns"] and cosql["longest_prompt"] > 1000
    )  # the fixture's CoSQL prompts
    assert cosql["kept"]["turns"] == cosql["turns"] - cosql["dropped"]  # are ~950-1,050 tokens
    assert (
        sparc["dropped"] == 0
        and sparc["kept"]["turns"] == sparc["turns"] == metrics["datasets"]["sparc"]["turns"]
    )
    rows = read_jsonl(run / "eval-base" / "latest" / "cosql" / "trajectories.jsonl")
    assert all(sum(g["tokens"] for g in row["generations"]) <= 20 for row in rows), "8,000 in the profile"
    assert all('"code"' in row["trajectory"]["messages"][0]["content"] for row in rows)
    report = (run / "report" / "report.md").read_text()
    assert (
        "* eval-base: release protocol; long mode; gold memory; greedy; 8 tokens per message; 20 per turn"
        in report
    )
    assert f"cosql: {cosql['dropped']} of {cosql['turns']} turns have a prompt over 1,000 tokens" in report


def test_per_dataset_trains_one_model_per_dataset_with_a_train_split(tmp_path, capsys):
    from mtsql.base.paths import FIXTURE_DATA
    from mtsql.core.data import per_dataset_groups
    from mtsql.core.data.settings import DataConfig

    root = tmp_path / "data"
    root.mkdir()
    for entry in FIXTURE_DATA.iterdir():
        if entry.name != "sparc":
            (root / entry.name).symlink_to(entry)
    (root / "sparc").mkdir()
    for entry in (FIXTURE_DATA / "sparc").iterdir():
        (root / "sparc" / entry.name).symlink_to(entry)
    data = DataConfig(train_dataset="cosql", eval_datasets=("cosql", "sparc"))
    assert per_dataset_groups(data, FIXTURE_DATA) == [("cosql", ("cosql", "sparc"))]  # no SParC train split
    (root / "sparc" / "train.json").symlink_to(FIXTURE_DATA / "sparc" / "dev.json")  # stands in for one
    assert per_dataset_groups(data, root) == [("cosql", ("cosql",)), ("sparc", ("sparc",))]
    assert per_dataset_groups(DataConfig(train_dataset="cosql", eval_datasets=("sparc",)), root) == [
        ("sparc", ("sparc",))
    ]

    pipeline.run_pipeline(
        REPO / "pipelines" / "reproduce.yaml",
        TINY,
        [f"runs_dir={tmp_path / 'runs'}", f"data.root={root}", "data.per_dataset=true"],
        dry_run=True,
    )
    err = capsys.readouterr().err
    assert "run 'tiny-cosql'" in err and "run 'tiny-sparc'" in err
    assert "a model trained on sparc, scored on sparc" in err


def test_evaluate_reports_pass_at_k_from_the_vote_samples_and_every_measure(tiny_cfg, monkeypatch):
    rollouts, run = [], RolloutEngine.run

    def recorded(engine, turns, **kwargs):
        rollouts.append(kwargs.get("n", 1))
        return run(engine, turns, **kwargs)

    monkeypatch.setattr(RolloutEngine, "run", recorded)
    cfg = replace(
        tiny_cfg, data={"eval_limit": 1, "eval_datasets": ("cosql",)}, evaluate={"vote": 2, "samples": 3}
    )
    art = pipeline.evaluate(cfg, label="eval-pass")
    assert rollouts == [1, 3], "one greedy rollout, one sampled rollout serving vote@2 and pass@k"
    block = art.metrics["datasets"]["cosql"]
    assert block["pass_at_k"]["samples"] == 3 and block["pass_at_k"]["ks"] == [1, 2, 3]
    assert block["pass_at_k"]["all"]["turns"] == block["turns"]
    assert len(read_jsonl(art.path / "cosql" / "trajectories.jsonl")) == 2 * block["turns"], (
        "the vote's 2 samples"
    )
    assert set(block["verdict_calibration"]) == {"exec_verify", "memory_verify"}
    assert set(block["propagation"]) == {"after_right", "after_wrong", "by_turn"}
    assert block["ex_non_empty_gold"]["scored"] + block["ex_non_empty_gold"]["vacuous"] == block["scored_ex"]
    greedy, voted = block["decodings"]["greedy"]["cost"], block["decodings"]["vote@2"]["cost"]
    assert greedy["messages"] >= 1 and greedy["prompt_tokens"] > greedy["generated_tokens"] > 0
    assert voted["generated_tokens"] > greedy["generated_tokens"], "the vote pays for both samples"
    assert art.metrics["max_messages"] == cfg.env.max_messages


def test_evaluate_samples_without_a_vote_keep_greedy_as_the_headline(tiny_cfg):
    cfg = replace(tiny_cfg, data={"eval_limit": 1, "eval_datasets": ("cosql",)}, evaluate={"samples": 2})
    art = pipeline.evaluate(cfg, label="eval-samples")
    result = EvaluationResult.from_dict(art.metrics)
    block = result.datasets["cosql"]
    assert result.decoding == "greedy" and block.decodings is None
    assert block.pass_at_k["ks"] == [1, 2] and block.pass_at_k["all"]["turns"] == block.turns
    assert len(read_jsonl(art.path / "cosql" / "trajectories.jsonl")) == block.turns, (
        "the greedy trajectories"
    )
    assert len(read_jsonl(art.path / "cosql" / "samples" / "trajectories.jsonl")) == 2 * block.turns


def test_the_calibration_judge_scores_a_query_against_the_rows_gold(tmp_path):
    from mtsql.stages.evaluate import EvaluateView, judge

    cfg = EvaluateView.of(cfg_for(tmp_path), data_root=data_dir())
    row = dataclasses.replace(
        read_rows(REPO / "tests" / "fixtures" / "scored_rows.jsonl")[0],
        turn=Turn("sparc", "dev", "i", 0, 0, "pets_1", "q", "SELECT count(*) FROM pets"),
    )
    ex = judge(cfg)
    assert (
        ex(row, "SELECT COUNT(PetID) FROM pets") == 1
        and ex(row, "SELECT count(*) FROM pets WHERE weight > 10") == 0
    )
    assert ex(row, "SELECT nope FROM pets") == 0
