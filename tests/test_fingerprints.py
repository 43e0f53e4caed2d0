"""What decides whether a stage reruns: the config sections it reads, the seed, its inputs and its code."""

import shutil

import pytest

from mtsql import provenance
from mtsql.artifacts import ArtifactKey, Store
from mtsql.config import ConfigView, UndeclaredSection, load_config
from mtsql.paths import data_dir
from mtsql.runner import STAGES, run_stage, store_for, view_for


def cfg_for(tmp_path, *overrides):
    return load_config(None, [f"runs_dir={tmp_path / 'runs'}", "data.train_limit=2", "sample.policy=gold", *overrides])


def test_a_stage_cannot_read_a_section_it_does_not_declare():
    view = ConfigView(load_config(), ("reject",), owner="stage 'reject'", data_root=data_dir())
    assert view.reject.keep_easy == 2 and view.run == "default"
    with pytest.raises(UndeclaredSection, match="stage 'reject' reads config section 'sample'"):
        _ = view.sample
    with pytest.raises(UndeclaredSection):
        view.replace(sample={"n": 2})


@pytest.mark.parametrize("name", list(STAGES))
def test_every_stage_declares_what_it_reads_and_the_view_hashes_it(name):
    view = view_for(name, load_config())
    assert set(view.hashed()) == {*STAGES[name].SECTIONS, "data_root"}


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
    assert run_stage("sample", cfg_for(tmp_path, "env.max_turns=3")).fingerprint != first.fingerprint


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
    hf = copy / "backends" / "hf.py"
    hf.write_text(hf.read_text() + "\nCHANGED = 1\n")
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", copy)
    provenance.code_closure.cache_clear()
    provenance.code_digest.cache_clear()
    try:
        after = {name: provenance.code_digest(STAGES[name].__name__) for name in ("sample", "reject")}
        assert "mtsql.backends.hf" in provenance.code_closure("mtsql.stages.sample"), "imported by name in a registry"
    finally:
        provenance.code_closure.cache_clear()
        provenance.code_digest.cache_clear()
    assert after["sample"] != before["sample"], "sampling generates with the hf backend"
    assert after["reject"] == before["reject"], "reject sampling never runs the backend"


def test_comments_and_docstrings_do_not_change_the_code_digest(tmp_path):
    source = tmp_path / "a.py"
    source.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # note\n')
    before = provenance.code_text(source)
    source.write_text('"""Other words."""\n\n\ndef f(x):\n    return x + 1\n')
    assert provenance.code_text(source) == before
    source.write_text('def f(x):\n    return x + 2\n')
    assert provenance.code_text(source) != before


def test_a_changed_byte_in_a_large_file_is_caught(tmp_path):
    from mtsql.artifacts import verify

    def work(ctx):
        (ctx.out / "model.safetensors").write_bytes(b"\1" * (65 * 2**20))
        return {}

    art, _ = Store(tmp_path).run(ArtifactKey("sft", 1), {}, {}, work)
    assert verify(art) == []
    with (art.path / "model.safetensors").open("r+b") as handle:
        handle.seek(40 * 2**20)
        handle.write(b"\2")
    assert any("content changed" in p for p in verify(art))
