import json
from pathlib import Path

import pytest

from mtsql.base import artifacts
from mtsql.base.artifacts import ArtifactKey, Store

from .inprocess import mtsql_in_process

REPO = Path(__file__).resolve().parents[1]

COMMANDS = [
    "sample",
    "reject",
    "sft",
    "sft-iterate",
    "curriculum",
    "rl",
    "evaluate",
    "report",
    "run",
    "status",
    "show",
    "data",
    "models",
    "config",
]


def mtsql(*args, cwd=None, env=None):
    return mtsql_in_process(args, cwd=cwd, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **(env or {})})


def test_help_lists_every_command():
    result = mtsql("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert f" {command} " in result.stdout, command


def test_bad_config_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("sampel:\n  n: 2\n")
    result = mtsql("curriculum", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "did you mean 'sample'" in result.stderr


def test_status_and_verify(tmp_path):
    store = Store(tmp_path / "runs" / "r1")

    def work(ctx):
        (ctx.out / "items.jsonl").write_text(json.dumps({"a": 1}) + "\n")
        return {"ex": 0.5, "count": 1}

    store.run(ArtifactKey("sample", 1), {"n": 1}, {}, work)
    (tmp_path / "runs" / "r1" / "sft-r1" / "abc.partial").mkdir(parents=True)
    result = mtsql("status", "r1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "sample-r1" in result.stdout and "latest" in result.stdout and "EX 50.0%" in result.stdout
    assert "partial" in result.stdout
    assert mtsql("data", "verify", "r1", cwd=tmp_path).returncode == 0
    (store.latest("sample-r1").path / "items.jsonl").write_text("edited\n")
    result = mtsql("data", "verify", "r1", cwd=tmp_path)
    assert result.returncode == 2 and "changed since the stage wrote it" in result.stderr
    assert mtsql("status", "nope", cwd=tmp_path).returncode == 2


@pytest.mark.parametrize("dataset", ["sparc", "cosql"])
def test_data_check_on_fixture(dataset):
    result = mtsql("data", "check", "--dataset", dataset, "--split", "dev")
    assert result.returncode == 0, result.stderr
    assert "wta_1" in result.stdout and "interactions" in result.stdout


def test_data_check_unknown_dataset():
    result = mtsql("data", "check", "--dataset", "wikisql")
    assert result.returncode == 2 and "unknown dataset" in result.stderr


@pytest.mark.parametrize("command", ["evaluate", "rl", "sample", "reject", "run"])
def test_help_fits_100_columns(command):
    result = mtsql_in_process(
        [command, "--help"], env={"COLUMNS": "100", "PATH": "/usr/bin:/bin", "TERM": "dumb"}
    )
    assert result.returncode == 0 and "Usage" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_verify_catches_metrics_edited_in_the_manifest(tmp_path):
    """An edit of the manifest's metrics is a difference from the hashed metrics.json: `status` says the
    artifact is edited instead of showing them (issue 39)."""
    store = Store(tmp_path / "runs" / "r1")
    done, _ = store.run(
        ArtifactKey("evaluate", variant="base"),
        {},
        {},
        lambda ctx: {"mode": "long", "datasets": {"cosql": {"ex": 0.1}}},
    )
    assert mtsql("data", "verify", "r1", cwd=tmp_path).returncode == 0
    manifest = json.loads((done.path / "manifest.json").read_text())
    manifest["metrics"]["datasets"]["cosql"]["ex"] = 0.9
    (done.path / "manifest.json").write_text(json.dumps(manifest))
    shown = mtsql("status", "r1", cwd=tmp_path).stdout
    assert "edited" in shown and "EX 90.0%" not in shown, shown
    result = mtsql("data", "verify", "r1", cwd=tmp_path)
    assert result.returncode == 2 and "its metrics differ from metrics.json" in result.stderr, result.stderr
    assert "all artifacts intact" not in result.stdout


def test_reading_commands_find_runs_as_stage_commands_do(tmp_path):
    """One spelling of the runs folder: status, data verify and report take ``runs_dir=`` (or the
    profile's ``runs_dir`` and ``run``) like the stage commands."""
    store = Store(tmp_path / "elsewhere" / "r1")
    store.run(ArtifactKey("sample", 1), {"n": 1}, {}, lambda ctx: {"ex": 0.5, "count": 1})
    (tmp_path / "p.yaml").write_text("run: r1\nruns_dir: elsewhere\n")
    env = {"PYTHONPATH": str(Path(artifacts.__file__).resolve().parents[1])}  # the code under test
    for args in (("status", "--config", "p.yaml"), ("status", "r1", "runs_dir=elsewhere")):
        result = mtsql(*args, cwd=tmp_path, env=env)
        assert result.returncode == 0 and "sample-r1" in result.stdout and "EX 50.0%" in result.stdout, (
            result.stderr
        )
    result = mtsql("status", "runs_dir=elsewhere", cwd=tmp_path, env=env)
    assert result.returncode == 0 and result.stdout.split() == ["r1"], result.stderr
    result = mtsql("data", "verify", "--config", "p.yaml", cwd=tmp_path, env=env)
    assert result.returncode == 0 and "all 1 artifacts intact" in result.stdout, result.stderr
    result = mtsql("report", "runs_dir=elsewhere", "run=r1", cwd=tmp_path, env=env)
    assert result.returncode == 0 and (tmp_path / "elsewhere" / "r1" / "report" / "report.md").is_file(), (
        result.stderr
    )
