"""What a finished artifact records must stay true after it is renamed into place."""

import os
import stat

import pytest
import yaml

from mtsql.base.artifacts import ArtifactKey, StageInterrupted, Store


def test_recorded_paths_name_the_final_folder_not_the_partial_one(tmp_path):
    def work(ctx):
        (ctx.out / "train.yaml").write_text(yaml.safe_dump({"output_dir": str(ctx.out / "model")}))
        return {"where": str(ctx.out)}

    art, _ = Store(tmp_path).run(ArtifactKey("sft", 1), {}, {}, work)
    recorded = yaml.safe_load((art.path / "train.yaml").read_text())["output_dir"]
    assert recorded == str(art.path / "model") and ".partial" not in (art.path / "log.txt").read_text()
    assert art.manifest["outputs"], "hashes are taken after the rewrite"
    assert not [p for p in (art.path.parent).iterdir() if p.name.endswith(".partial")]


def test_artifact_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        art, _ = Store(tmp_path).run(ArtifactKey("reject"), {}, {}, lambda ctx: {"n": 1})
    finally:
        os.umask(old)
    for name in ("manifest.json", "metrics.json", "config.yaml", "log.txt"):
        assert stat.S_IMODE((art.path / name).stat().st_mode) == 0o644, name


def test_an_interrupted_stage_is_kept_for_resume_and_the_log_marks_each_attempt(tmp_path):
    store = Store(tmp_path)

    def interrupted(ctx):
        (ctx.out / "shard.jsonl").write_text("{}\n")
        raise KeyboardInterrupt

    with pytest.raises(StageInterrupted) as caught:
        store.run(ArtifactKey("sample", 1), {}, {}, interrupted)
    assert caught.value.label == "sample-r1" and caught.value.partial.name.endswith(".partial")
    done, _ = store.run(
        ArtifactKey("sample", 1), {}, {}, lambda ctx: {"resumed": (ctx.out / "shard.jsonl").exists()}
    )
    assert done.metrics == {"resumed": True}
    log = (done.path / "log.txt").read_text()
    assert (
        log.count("attempt started") == 2
        and "=== interrupted" in log
        and "(resuming the .partial folder)" in log
    )


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path, monkeypatch):
    """Through Typer, which turns a KeyboardInterrupt into a silent exit 130 unless mtsql's group
    reports it first (tests/test_bad_input_faults.py sends a real SIGINT)."""
    from typer.testing import CliRunner

    from mtsql.app import cli

    def interrupted(folder):
        raise StageInterrupted("sft-r1", tmp_path / "abc.partial")

    monkeypatch.setattr(cli, "status_table", interrupted)
    result = CliRunner().invoke(cli.app, ["status", str(tmp_path)])
    assert result.exit_code == 130
    err = result.stderr
    assert (
        err.count("\n") == 1
        and f"interrupted: sft-r1 left as {tmp_path / 'abc.partial'}; rerun to resume" in err
    )
