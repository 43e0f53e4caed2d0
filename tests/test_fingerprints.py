"""What decides whether a stage reruns: the config sections it reads, the seed, its inputs and its code."""

import dataclasses
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from mtsql.app.config import load_config
from mtsql.app.runner import STAGES, run_stage, store_for, view_for
from mtsql.base import provenance
from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.base.config import StageView, engines_of
from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA, data_dir
from mtsql.engines.backends.settings import BACKENDS, SampleConfig
from mtsql.engines.rl_settings import RL_ENGINES, RlConfig


def cfg_for(tmp_path, *overrides):
    return load_config(
        None, [f"runs_dir={tmp_path / 'runs'}", "data.train_limit=2", "sample.policy=gold", *overrides]
    )


def test_a_stage_cannot_read_a_section_its_view_does_not_declare():
    view = view_for("reject", load_config())
    assert view.reject.keep_easy == 2 and view.run == "default" and view.data_root is None
    with pytest.raises(AttributeError, match="sample"):
        _ = view.sample
    with pytest.raises(AttributeError, match="sample"):
        view.replace(sample={"n": 2})
    assert view.replace(reject={"keep_easy": 5}).reject.keep_easy == 5


def test_a_view_of_a_section_the_config_has_not_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Misspelt(StageView):
        rejct: dict

    with pytest.raises(ValueError, match=r"Misspelt declares unknown config sections \['rejct'\]"):
        Misspelt.of(load_config(), data_root=data_dir())


@pytest.mark.parametrize("name", list(STAGES))
def test_every_stage_declares_what_it_reads_and_the_view_hashes_it(name):
    view = view_for(name, load_config())
    sections = STAGES[name].VIEW.sections()
    assert isinstance(view, STAGES[name].VIEW) and sections
    assert set(view.hashed()) == {*sections, *(["data_digest"] if "data" in sections else [])}
    assert (view.data_root is not None) == ("data" in sections)


def planned(name: str, cfg, params: dict | None = None, **inputs) -> str:
    """The fingerprint stage ``name`` has (done) or would have (a dry run) with ``cfg``."""
    return run_stage(name, cfg, inputs=inputs, params=params, dry_run=True).fingerprint


def test_operational_settings_and_the_data_path_rerun_nothing_while_results_and_data_bytes_do(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    here, there = tmp_path / "data", tmp_path / "copy" / "data"
    shutil.copytree(FIXTURE_DATA, here)

    def cfg(data=here, *overrides):
        return cfg_for(tmp_path, f"data.root={data}", "sft.nnodes=2", *overrides)

    sampled = run_stage("sample", cfg())
    kept = run_stage("reject", cfg(), inputs={"sample": sampled})
    pool = run_stage("curriculum", cfg())

    def after(*overrides, data=here) -> dict:
        return {
            "sample": planned("sample", cfg(data, *overrides)),
            "sft": planned("sft", cfg(data, *overrides), reject=kept),
            "rl": planned("rl", cfg(data, "rl.engine=local", *overrides), {"stage": 1}, curriculum=pool),
            "evaluate": planned("evaluate", cfg(data, *overrides)),
        }

    before = after()
    assert before["sample"] == sampled.fingerprint
    shown = yaml.safe_load((sampled.path / "config.yaml").read_text())
    assert "batch_size" not in shown["sample"] and shown["not_hashed"]["sample"]["batch_size"] == 16
    assert shown["not_hashed"]["data_root"] == str(here) and "root" not in shown["data"], (
        "config.yaml still records what the fingerprint leaves out"
    )

    shutil.copytree(here, there)
    for same in (after("sample.batch_size=3"), after("sft.node_rank=1"), after(data=there)):
        assert same == before
    again = run_stage("sample", cfg(there, "sample.batch_size=3", "sample.openai.timeout_s=5"))
    assert again.path == sampled.path and len(store_for(cfg()).artifacts()) == 3, "served from the store"

    warmer = after("sample.temperature=0.3")
    assert warmer["sample"] != before["sample"]
    assert {name: fp for name, fp in warmer.items() if name != "sample"} == {
        name: fp for name, fp in before.items() if name != "sample"
    }, "greedy, or at rl.temperature: not sample's"
    pass_at_k = [
        planned("evaluate", cfg(here, "evaluate.samples=2", f"sample.temperature={t}")) for t in (0.7, 0.3)
    ]
    assert pass_at_k[0] != pass_at_k[1], "pass@k samples at sample.temperature"
    assert after("rl.temperature=0.5")["rl"] != before["rl"]

    database = sorted(there.glob("database/*/*.sqlite"))[0]
    with database.open("r+b") as handle:
        handle.seek(-1, 2)
        last = handle.read(1)
        handle.seek(-1, 2)
        handle.write(bytes([last[0] ^ 1]))
    changed = after(data=there)
    assert all(changed[name] != before[name] for name in before), "every stage that reads the data reruns"
    no_heldout = [planned("sft", cfg(data, "sft.heldout=0"), reject=kept) for data in (here, there)]
    assert no_heldout[0] == no_heldout[1] != before["sft"], "without the held-out check SFT reads no data"


def test_a_stage_reruns_for_the_settings_of_the_engine_it_runs_and_for_no_other(tmp_path):
    """Each backend and RL engine owns a sub-section (sample.vllm, rl.local, ...): a stage's fingerprint
    covers the selected one only."""
    pool = run_stage("curriculum", cfg_for(tmp_path))

    def evaluate(*overrides):
        return planned("evaluate", cfg_for(tmp_path, "sample.backend=hf", *overrides))

    def rl(engine, *overrides):
        return planned(
            "rl",
            cfg_for(tmp_path, f"rl.engine={engine}", "rl.batch_size=2", "rl.mini_batch_size=2", *overrides),
            {"stage": 1},
            curriculum=pool,
        )

    hf = evaluate()
    assert evaluate("sample.vllm.args=[--max-num-seqs, '128']", "sample.openai.model=x") == hf, (
        "not the hf backend's"
    )
    assert evaluate("sample.max_new_tokens=64") != hf
    served = planned("evaluate", cfg_for(tmp_path, "sample.backend=openai"))
    assert planned("evaluate", cfg_for(tmp_path, "sample.backend=openai", "sample.openai.model=x")) != served
    local, verl = rl("local"), rl("verl")
    assert (
        rl("local", "rl.verl.rollout_name=sglang", "rl.verl.extra=[trainer.val_before_train=true]") == local
    )
    assert rl("verl", "rl.local.trainable_layers=12") == verl, "the local engine's layers are not verl's"
    assert (
        rl("local", "rl.local.trainable_layers=12") != local
        and rl("verl", "rl.verl.rollout_name=sglang") != verl
    )


def test_the_rl_stage_reruns_for_what_its_engine_reads_and_for_nothing_else(tmp_path):
    """Both RL engines sample at rl.temperature within rl.max_message_tokens and rl.max_response_len
    (rl_engines.RolloutBounds); of ``sample`` only the local engine's vLLM rollouts read anything
    (sample.vllm), and the other engine's sub-section reruns nothing."""
    pool = run_stage("curriculum", cfg_for(tmp_path))

    def rl(engine, *overrides):
        return planned(
            "rl",
            cfg_for(tmp_path, f"rl.engine={engine}", "rl.batch_size=2", "rl.mini_batch_size=2", *overrides),
            {"stage": 1},
            curriculum=pool,
        )

    for engine in RL_ENGINES:
        before = rl(engine)
        for unread in (
            "sample.top_p=0.5",
            "sample.max_new_tokens=64",
            "sample.backend=vllm",
            "sample.vllm.args=[--max-num-seqs, '8']",
            "sample.openai.model=x",
        ):
            assert rl(engine, unread) == before, f"{engine}: {unread}"
        for bound in ("rl.max_message_tokens=64", "rl.max_response_len=512"):
            assert rl(engine, bound) != before, f"{engine}: {bound} bounds its rollouts"
    local = rl("local")
    for other in (
        "rl.verl.rollout_name=sglang",
        "rl.verl.n_gpus_per_node=2",
        "rl.verl.extra=[trainer.val_before_train=true]",
    ):
        assert rl("local", other) == local, other
    served = rl("local", "rl.local.rollout_backend=vllm")
    assert served != local
    assert rl("local", "rl.local.rollout_backend=vllm", "sample.vllm.args=[--max-num-seqs, '8']") != served, (
        "the local engine's vLLM rollouts read the server's settings, whatever sample.backend is"
    )


def test_a_setting_moved_into_its_engine_names_its_new_place():
    with pytest.raises(UsageError, match=r"unknown key 'sample.vllm_args'; moved: use 'sample.vllm.args'"):
        load_config(None, ["sample.vllm_args=[--x]"])
    with pytest.raises(
        UsageError, match=r"unknown key 'rl.trainable_layers'; moved: use 'rl.local.trainable_layers'"
    ):
        load_config(None, ["rl.trainable_layers=3"])
    with pytest.raises(UsageError, match=r"unknown key 'rl.verl.trainable_layers'"):
        load_config(None, ["rl.verl.trainable_layers=3"])


def test_sft_without_a_heldout_check_reruns_for_no_sampling_setting(tmp_path):
    kept = run_stage("reject", cfg_for(tmp_path), inputs={"sample": run_stage("sample", cfg_for(tmp_path))})
    fps = {
        extra: planned("sft", cfg_for(tmp_path, *extra), reject=kept)
        for extra in [(), ("sample.max_new_tokens=7",), ("sql.timeout_s=1",), ("sample.n=3",)]
    }
    assert fps[("sample.n=3",)] == fps[()], "the held-out check samples once per turn"
    assert fps[("sample.max_new_tokens=7",)] != fps[()] and fps[("sql.timeout_s=1",)] != fps[()]
    without = {planned("sft", cfg_for(tmp_path, "sft.heldout=0", *extra), reject=kept) for extra in fps}
    assert len(without) == 1


def test_both_ranks_of_a_multi_node_sft_work_in_the_same_folder(tmp_path):
    kept = run_stage("reject", cfg_for(tmp_path), inputs={"sample": run_stage("sample", cfg_for(tmp_path))})
    ranks = [
        cfg_for(
            tmp_path,
            "sft.nnodes=2",
            f"sft.node_rank={rank}",
            f"sft.master_port={29500 + rank}",
            f"sft.master_addr=10.0.0.{rank + 1}",
        )
        for rank in (0, 1)
    ]
    fps = [planned("sft", cfg, reject=kept) for cfg in ranks]
    assert fps[0] == fps[1]
    assert store_for(ranks[0]).folder("sft-r1", fps[0]) == store_for(ranks[1]).folder("sft-r1", fps[1])
    assert planned("sft", cfg_for(tmp_path, "sft.nnodes=1"), reject=kept) != fps[0], (
        "the world size sets the batch"
    )


def test_the_data_digest_is_cached_and_sees_a_change_within_one_mtime_tick(tmp_path, monkeypatch):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    root = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, root)
    first = provenance.data_digest(root)
    assert (tmp_path / "home" / "cache" / "data-files.json").is_file()

    def no_reading(*args):
        raise AssertionError("a cached file was read again")

    with monkeypatch.context() as patch:
        patch.setattr(provenance.hashlib, "file_digest", no_reading)
        assert provenance.data_digest(root) == first
    (root / ".hidden").write_text("not data")
    assert provenance.data_digest(root) == first
    fresh = root / "notes.txt"
    fresh.write_text("a")
    with_notes = provenance.data_digest(root)
    stat = fresh.stat()
    fresh.write_text("b")  # same size, and the same mtime: a write within one tick of the clock
    os.utime(fresh, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert with_notes != first and provenance.data_digest(root) not in (first, with_notes)


@pytest.mark.parametrize("name", ["sample", "sft", "rl", "evaluate"])
def test_the_seed_is_part_of_every_sampling_or_training_stage(name):
    seeds = [view_for(name, load_config(None, [f"seed={s}"])).hashed() for s in (0, 1)]
    assert seeds[0] != seeds[1]


def test_changing_a_read_section_or_the_seed_reruns_and_nothing_else_does(tmp_path):
    cfg = cfg_for(tmp_path)
    first = run_stage("sample", cfg, label="sample")
    assert run_stage("sample", cfg, label="sample").manifest["created_at"] == first.manifest["created_at"]
    assert run_stage("sample", cfg_for(tmp_path, "rl.n=9")).fingerprint == first.fingerprint, "rl is not read"
    assert run_stage("sample", cfg_for(tmp_path, "seed=1")).fingerprint != first.fingerprint
    assert run_stage("sample", cfg_for(tmp_path, "env.max_messages=3")).fingerprint != first.fingerprint


def test_the_same_work_under_another_label_is_served_from_the_store(tmp_path, capsys):
    cfg = cfg_for(tmp_path)
    first = run_stage("sample", cfg, label="sample-r1")
    again = run_stage("sample", cfg, label="sample-probe")
    assert again.path == first.path and again.manifest["created_at"] == first.manifest["created_at"]
    assert "the same work as sample-r1" in capsys.readouterr().err
    store = store_for(cfg)
    assert store.latest("sample-probe").path == first.path and len(store.artifacts()) == 1


def test_a_changed_source_line_changes_the_fingerprint_of_the_stages_that_run_it(tmp_path, monkeypatch):
    before = {name: provenance.code_digest(STAGES[name].__name__) for name in ("sample", "reject")}
    copy = tmp_path / "mtsql"
    shutil.copytree(provenance.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("fixtures", "__pycache__"))
    hf = copy / "engines" / "backends" / "hf.py"
    hf.write_text(hf.read_text() + "\nCHANGED = 1\n")
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", copy)
    provenance.code_closure.cache_clear()
    provenance.code_digest.cache_clear()
    try:
        after = {name: provenance.code_digest(STAGES[name].__name__) for name in ("sample", "reject")}
        assert "mtsql.engines.backends.hf" in provenance.code_closure("mtsql.stages.sample"), (
            "imported by name in a registry"
        )
    finally:
        provenance.code_closure.cache_clear()
        provenance.code_digest.cache_clear()
    assert after["sample"] != before["sample"], "sampling generates with the hf backend"
    assert after["reject"] == before["reject"], "reject sampling never runs the backend"


def test_the_rl_stage_digest_covers_the_code_of_both_engines():
    """The stage reaches its engine through a registry (engines.rl_engines.RL_ENGINES): its code digest
    must still cover the engines' code, or a changed trainer would be served from the store."""
    closure = provenance.code_closure(STAGES["rl"].__name__)
    for module in (
        "mtsql.engines.local_grpo.engine",
        "mtsql.engines.local_grpo.trainer",
        "mtsql.engines.local_grpo.update",
        "mtsql.engines.verl.engine",
        "mtsql.engines.verl.main_ppo",
    ):
        assert module in closure, module


def test_each_engine_of_a_registry_names_its_code_and_owns_its_settings():
    """One line per engine (#49): its settings are its section's sub-section and its code is where it says."""
    assert engines_of(RlConfig) == {name: engine.settings for name, engine in RL_ENGINES.items()}
    assert engines_of(SampleConfig) == {name: engine.settings for name, engine in BACKENDS.items()}
    for engine in (*RL_ENGINES.values(), *BACKENDS.values()):
        source = Path(importlib.util.find_spec(engine.module).origin).read_text()
        wanted = (
            (f"class {engine.attribute}(",)
            if engine.attribute
            else ("def train_curriculum_stage(", "def plan_curriculum_stage(", "def identity(")
        )
        assert all(w in source for w in wanted), engine


def test_comments_and_docstrings_do_not_change_the_code_digest(tmp_path):
    source = tmp_path / "a.py"
    source.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # note\n')
    before = provenance.code_text(source)
    source.write_text('"""Other words."""\n\n\ndef f(x):\n    return x + 1\n')
    assert provenance.code_text(source) == before
    source.write_text("def f(x):\n    return x + 2\n")
    assert provenance.code_text(source) != before


def test_a_changed_byte_in_a_large_file_is_caught(tmp_path):
    from mtsql.base.artifacts import verify

    def work(ctx):
        (ctx.out / "model.safetensors").write_bytes(b"\1" * (65 * 2**20))
        return {}

    art, _ = Store(tmp_path).run(ArtifactKey("sft", 1), {}, {}, work)
    assert verify(art) == []
    with (art.path / "model.safetensors").open("r+b") as handle:
        handle.seek(40 * 2**20)
        handle.write(b"\2")
    assert any("content changed" in p for p in verify(art))


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]"])
def test_a_damaged_digest_cache_is_said_and_rebuilt(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    root = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA / "cosql", root)
    first = provenance.data_digest(root)
    cache = tmp_path / "home" / "cache" / "data-files.json"
    cache.write_text(damage)
    assert provenance.data_digest(root) == first
    assert f"data digest cache {cache}" in capsys.readouterr().err
    assert isinstance(json.loads(cache.read_text()), dict), "the cache is written anew"


def test_the_digest_cache_forgets_files_that_are_gone(tmp_path, monkeypatch):
    """Artifact files are hashed through the cache too, which is read and written whole: a deleted run's
    entries go at its next write, so it does not grow with every file any run ever made."""
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    old, new = tmp_path / "runs" / "old" / "items.jsonl", tmp_path / "runs" / "new" / "items.jsonl"
    for path in (old, new):
        path.parent.mkdir(parents=True)
        path.write_text("{}\n")
        os.utime(path, (0, 0))  # written long ago: cached (a file changed within FRESH_S is not)
    cache = tmp_path / "home" / "cache" / "data-files.json"
    provenance.cached_sha256([old])
    assert list(json.loads(cache.read_text())) == [str(old)]
    shutil.rmtree(old.parent)
    provenance.cached_sha256([new])
    assert list(json.loads(cache.read_text())) == [str(new)]
