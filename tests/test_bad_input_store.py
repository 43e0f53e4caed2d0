"""The store's promise, kept (issue 39): no stale result, no edited input used, nothing written outside
the run. One test per numbered row of the issue (``test_h<N>``: high, ``test_m<N>``: medium,
``test_l<N>``: low), each a command a user (or a hostile tester) types: its exit code, the words of its
one-line message, and what must not change (the run folder, a file outside it).

Commands run in-process (``cli.main`` with ``sys.argv``), in a fresh folder with its own
``MTSQL_HOME``; the rows that need a process of their own (a signal) start one. A run with a complete
``sample`` artifact (the gold policy, two CoSQL dialogues) is made once and copied per test.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import httpx
import pytest
import typer
from typer.testing import CliRunner

import mtsql
from mtsql.app import cli
from mtsql.app.config import load_config
from mtsql.app.report.runs import run_artifacts
from mtsql.app.runner import run_stage, store_for
from mtsql.app.status import status_rows
from mtsql.base.artifacts import ATTEMPTS, ArtifactKey, Store
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.data.check import check_split
from mtsql.core.evaluation_files import evaluate_files, write_outputs
from mtsql.engines.backends.openai import OpenAIBackend
from mtsql.engines.backends.vllm_server import ManagedServer
from mtsql.engines.models import registry

from .held import wait_for
from .local_server import start_server, stop_server

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "configs" / "profiles" / "tiny.yaml")
SRC = Path(mtsql.__file__).resolve().parents[1]
GOLD = FIXTURE_DATA / "sparc" / "dev_gold.txt"
RUNS = ("--config", TINY, "runs_dir=runs")  # every stage command of a row: the tiny profile, ./runs


@dataclass(frozen=True)
class Ran:
    code: int
    out: str  # stdout and stderr together

    @property
    def line(self) -> str:
        return self.out.strip()


def mtsql(*args: str) -> int:
    """``mtsql ARGS`` in this process, as the console script runs it: its exit code."""
    argv, handler = sys.argv, signal.getsignal(signal.SIGTERM)
    sys.argv = ["mtsql", *args]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        signal.signal(signal.SIGTERM, handler)
    return code


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*args)``: a ``Ran`` with what the command printed."""

    def call(*args: str) -> Ran:
        capsys.readouterr()
        code = mtsql(*args)
        captured = capsys.readouterr()
        return Ran(code, captured.out + captured.err)

    return call


def refused(ran: Ran, code: int, *words: str) -> str:
    """The one ``error:`` line of a refused command, holding every word."""
    assert ran.code == code, ran.out
    assert "Traceback" not in ran.out and len(ran.out.strip().splitlines()) == 1, ran.out
    assert ran.line.startswith("error: "), ran.line
    for word in words:
        assert word in ran.line, f"{word!r} not in {ran.line!r}"
    return ran.line


def verify_problems(ran: Ran, *words: str) -> list[str]:
    """The problem lines of a `data verify` that found some (one per problem, then the ``error:`` line),
    holding every word among them."""
    lines = ran.out.strip().splitlines()
    assert ran.code == 2 and "Traceback" not in ran.out and lines[-1].startswith("error: "), ran.out
    assert f"{len(lines) - 1} problem(s)" in lines[-1], ran.out
    for word in words:
        assert any(word in line for line in lines[:-1]), f"{word!r} not in {lines[:-1]}"
    return lines[:-1]


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's sha256, a link's target, a folder's mark."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """An empty working folder with its own MTSQL_HOME and HOME; the packaged data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("MTSQL_DATA", "MTSQL_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory) -> Path:
    """``runs/tiny`` with one complete sample artifact (the gold policy on two CoSQL dialogues)."""
    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MTSQL_HOME", str(root / "home"))
        patch.delenv("MTSQL_DATA", raising=False)
        cfg = load_config(
            Path(TINY), [f"runs_dir={root / 'runs'}", "sample.policy=gold", "data.train_limit=2"]
        )
        run_stage("sample", cfg)
    return root / "runs"


@pytest.fixture
def run(here, sample_run) -> Path:
    """This test's copy of ``sample_run`` at ``./runs/tiny`` (the lock files a stage leaves included)."""
    shutil.copytree(sample_run, here / "runs", symlinks=True)
    return here / "runs" / "tiny"


def sample_folder(run: Path) -> Path:
    return (run / "sample" / "latest").resolve()


GOLD_POLICY = ("--policy", "gold", "data.train_limit=2")  # the sample of the fixture run: same fingerprint


def evaluation(store: Store, *, correct: bool = False) -> Path:
    """An evaluation artifact of the base model on SParC: the scorer's files for predictions that are
    the gold (``correct``) or ``SELECT 1`` everywhere."""

    def work(ctx):
        lines = GOLD.read_text().splitlines()
        pred = ctx.out / "pred.txt"
        pred.write_text(
            "".join(
                (line.split("\t")[0] if correct else "SELECT 1") + "\n" if line.strip() else "\n"
                for line in lines
            )
        )
        result = evaluate_files("sparc", pred)
        write_outputs(ctx.out / "sparc", result)
        question = result.summary["execution"]["question"]
        return {
            "model_name": "smollm2-135m",
            "mode": "long",
            "memory": "gold",
            "decoding": "greedy",
            "datasets": {"sparc": {"turns": question["scored"], "ex": question["accuracy"], "em": 0.0}},
        }

    artifact, _ = store.run(ArtifactKey("evaluate", variant="base"), {"correct": correct}, {}, work)
    return artifact.path


# ---------------------------------------------------------------------------------------------------
# High


def planned_fingerprint(ran: Ran) -> str:
    """The fingerprint a dry run of ``evaluate`` shows for eval-base."""
    line = next(line for line in ran.out.splitlines() if line.strip().startswith("eval-base"))
    return line.split()[1]


def test_h1_a_local_model_folder_is_fingerprinted_by_its_content(here, run_cli):
    """Overwriting the weights of a model folder changes the evaluation's fingerprint; the same bytes
    in another folder do not."""
    model = here / "my-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}\n')
    (model / "model.safetensors").write_bytes(b"\1" * 4096)
    args = ("evaluate", "--dry-run", *RUNS, "sample.backend=hf")
    first = run_cli(*args, f"model.name={model}")
    assert first.code == 0, first.out
    shutil.copytree(model, here / "copy")
    assert planned_fingerprint(run_cli(*args, f"model.name={here / 'copy'}")) == planned_fingerprint(first)
    (model / "model.safetensors").write_bytes(b"\2" * 4096)  # same size, other weights
    assert planned_fingerprint(run_cli(*args, f"model.name={model}")) != planned_fingerprint(first)


def test_h2_a_stage_refuses_an_edited_input(run, run_cli):
    """`reject` reads the sample's trajectories only if they are what the sample wrote; `status` says
    the sample is edited."""
    trajectories = sample_folder(run) / "trajectories.jsonl"
    text = trajectories.read_text()
    trajectories.write_text(text.replace('"execution": 1', '"execution": 0', 1))
    assert trajectories.read_text() != text
    before = snapshot(run.parent)
    line = refused(run_cli("reject", *RUNS), 2, str(trajectories), "content changed", "mtsql data verify")
    assert "sample" in line
    assert snapshot(run.parent) == before
    assert ("sample", "edited") in {row[:2] for row in status_rows(run)}


def test_h3_the_report_and_the_notebook_publish_only_files_that_verify(here, run, run_cli):
    folder = evaluation(Store(run))
    summary = folder / "sparc" / "summary.json"
    data = json.loads(summary.read_text())
    for table in ("execution", "exact"):
        question = data[table]["question"]
        question.update(correct=question["scored"], accuracy=1.0)
    summary.write_text(json.dumps(data))
    ran = run_cli("report", "tiny", "runs_dir=runs")
    assert ran.code == 0, ran.out
    report = (run / "report" / "report.md").read_text()
    assert "do not verify" in report and str(summary) in report and "100.0" not in report
    with pytest.raises(UsageError, match="summary.json: (size|content) changed.*mtsql data verify"):
        run_artifacts(run)  # what the notebook reads
    assert ("eval-base", "edited") in {row[:2] for row in status_rows(run)}


def test_h4_evaluate_out_refuses_a_folder_inside_a_run(here, run, run_cli):
    evaluation(Store(run))
    pred = here / "pred.txt"
    pred.write_text("".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines()))
    other = Store(here / "elsewhere" / "r2")
    inside_other = evaluation(other) / "sparc"
    before = snapshot(here / "runs"), snapshot(here / "elsewhere")
    for out in ("runs/tiny/eval-base/latest/sparc", "runs/tiny/notes", str(inside_other)):
        refused(
            run_cli("evaluate", "--dataset", "sparc", "--pred", str(pred), "--out", out, "runs_dir=runs"),
            2,
            f"--out {out}",
            "inside a run folder",
        )
    assert (snapshot(here / "runs"), snapshot(here / "elsewhere")) == before


@pytest.mark.parametrize("label", ["report", "latest", "trackers", ".hidden"])
def test_h5_reserved_labels_are_refused(here, run, run_cli, label):
    """`--label report` would make an artifact the report replaces (deleting it)."""
    before = snapshot(run)
    refused(run_cli("sample", *RUNS, *GOLD_POLICY, "--label", label), 2, repr(label), "reserved")
    assert snapshot(run) == before


def test_h6_the_store_never_writes_through_a_symlink(here, run, run_cli):
    precious = here / "precious.txt"
    precious.write_text("mine\n")
    artifact = sample_folder(run)
    lock = artifact.with_name(artifact.name + ".lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(precious)
    refused(run_cli("sample", *RUNS, *GOLD_POLICY, "--force"), 2, str(lock), "symlink")
    assert precious.read_text() == "mine\n"
    lock.unlink()
    # a .partial folder whose log.txt leads outside: the next attempt would append to it
    shutil.rmtree(artifact)
    partial = artifact.with_name(artifact.name + ".partial")
    partial.mkdir()
    (partial / "log.txt").symlink_to(precious)
    before = snapshot(run)
    refused(run_cli("sample", *RUNS, *GOLD_POLICY), 2, str(partial / "log.txt"), "symlink")
    assert precious.read_text() == "mine\n" and snapshot(run) == before


@pytest.mark.parametrize(
    "args",
    [
        ("reject", "--sample", "{abs}"),
        ("reject", "--sample", "../other/sample"),
        ("evaluate", "--model", "../other/sft"),
        ("sft", "--from", "../other/reject"),
    ],
)
def test_h7_an_input_label_is_a_name_not_a_path(here, run, run_cli, args):
    other = Store(here / "runs" / "other")
    other.run(
        ArtifactKey("sample"), {"n": 1}, {}, lambda ctx: (ctx.out / "trajectories.jsonl").write_text("") or {}
    )
    before = snapshot(here / "runs")
    args = tuple(a.format(abs=here / "runs" / "other" / "sample") for a in args)
    refused(run_cli(*args, *RUNS), 2, repr(args[2]), "names a folder")
    assert snapshot(here / "runs") == before


def test_h8_a_byte_order_mark_is_not_part_of_the_first_query(here, run_cli):
    sqls = "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    (here / "plain.txt").write_text(sqls)
    (here / "bom.txt").write_bytes(b"\xef\xbb\xbf" + sqls.encode())
    items = {}
    for name in ("plain", "bom"):
        ran = run_cli(
            "evaluate", "--dataset", "sparc", "--pred", f"{name}.txt", "--out", name, "--etype", "match"
        )
        assert ran.code == 0, ran.out
        items[name] = [json.loads(line)["exact_match"] for line in (here / name / "items.jsonl").open()]
    assert items["bom"] == items["plain"] and items["bom"][0] == 1


# ---------------------------------------------------------------------------------------------------
# Medium


def test_m9_links_that_lead_out_of_the_run_are_named(here, run, run_cli):
    artifact = sample_folder(run)
    outside = here / "copy.jsonl"
    shutil.copy(artifact / "trajectories.jsonl", outside)
    (artifact / "trajectories.jsonl").unlink()
    (artifact / "trajectories.jsonl").symlink_to(outside)  # the same bytes, outside the run
    verify_problems(
        run_cli("data", "verify", "tiny", "runs_dir=runs"), "trajectories.jsonl", "outside the artifact"
    )
    refused(run_cli("reject", *RUNS), 2, "trajectories.jsonl", "outside the artifact")

    (artifact / "trajectories.jsonl").unlink()
    shutil.copy(outside, artifact / "trajectories.jsonl")
    latest = run / "sample" / "latest"
    for target, words in (
        ("/nonexistent", "not to an artifact folder"),
        (str(here), "not to an artifact folder"),
    ):
        latest.unlink()
        latest.symlink_to(target)
        before = snapshot(run)
        refused(run_cli("reject", *RUNS), 2, str(latest), words)
        verify_problems(run_cli("data", "verify", "tiny", "runs_dir=runs"), f"{latest} leads to", words)
        assert ("sample", "bad link") in {row[:2] for row in status_rows(run)}
        assert ("sample", "older") in {row[:2] for row in status_rows(run)}  # the artifact itself is intact
        assert snapshot(run) == before


def test_m10_an_artifact_folder_that_is_a_symlink_is_refused(here, run, run_cli):
    artifact = sample_folder(run)
    moved = here / "moved"
    artifact.rename(moved)
    artifact.symlink_to(moved)
    before, outside = snapshot(run), snapshot(moved)
    for force in (("--force",), ()):  # its latest link now leads out of the run too: one of the two is named
        line = refused(run_cli("sample", *RUNS, *GOLD_POLICY, *force), 2, "never makes")
        assert str(artifact) in line or str(run / "sample" / "latest") in line
    assert snapshot(run) == before and snapshot(moved) == outside


def test_m11_a_deleted_input_file_is_one_line(run, run_cli):
    (sample_folder(run) / "trajectories.jsonl").unlink()
    refused(run_cli("reject", *RUNS), 2, "trajectories.jsonl: missing", "mtsql data verify")


def test_m12_a_corrupt_safetensors_file_is_one_line_with_hf(tiny_qwen3, tmp_path):
    from mtsql.engines.backends.hf import HFBackend

    copy = shutil.copytree(tiny_qwen3, tmp_path / "model")
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated
    with pytest.raises(UsageError, match="cannot load .* as a causal language model"):
        HFBackend(copy)


def test_m13_a_prediction_file_that_is_not_utf8_is_refused(here, run_cli):
    (here / "latin1.txt").write_bytes("SELECT 1\n\nSELECT name FROM t WHERE x = 'café'\n".encode("latin-1"))
    refused(
        run_cli("evaluate", "--dataset", "sparc", "--pred", "latin1.txt", "--out", "out"),
        2,
        "latin1.txt line 3",
        "not UTF-8",
    )
    assert not (here / "out").exists()


def test_m14_a_killed_vllm_server_is_named_at_once(tmp_path):
    """The cause of a server killed by a signal is the signal, not an earlier warning of its log; and a
    client stops retrying a server that is gone."""
    log = tmp_path / "vllm-server.log"
    log.write_text(
        "WARNING 11-27 [api_server.py:1] Found ulimit of 1024 and failed to automatically increase "
        "with error ValueError: not allowed\nINFO started\n"
    )
    server = ManagedServer(None, log)
    server.process = subprocess.Popen(["sleep", "60"])
    server.process.kill()
    server.process.wait()
    cause = server.failure()
    assert "killed by SIGKILL" in cause and "ulimit" not in cause
    assert server.gone()

    calls = []
    client = OpenAIBackend.__new__(OpenAIBackend)

    def refuse(*args, **kwargs):
        calls.append(args)
        raise httpx.ConnectError("refused")

    client.httpx, client.url, client.max_retries, client.backoff_s = (
        httpx,
        "http://127.0.0.1:9/v1/completions",
        4,
        60.0,
    )
    client.client = type("Client", (), {"post": staticmethod(refuse)})()
    client.gone = lambda: True
    with pytest.raises(StageFailed, match="ConnectError"):
        client._post({})
    assert len(calls) == 1


# ---------------------------------------------------------------------------------------------------
# Low

BLOCKING_STAGE = """
import signal, sys
from pathlib import Path
from mtsql.app import cli
from mtsql.base.artifacts import ArtifactKey, Store

@cli.app.command("block")
def block(runs: str, marker: str) -> None:
    def work(ctx):
        Path(marker).write_text("started")
        signal.pause()
    Store(Path(runs)).run(ArtifactKey("sample"), {}, {}, work)

sys.argv = ["mtsql", "block", sys.argv[1], sys.argv[2]]
cli.main()
"""


def test_l15_sigterm_stops_a_stage_as_ctrl_c_does(tmp_path):
    marker, runs = tmp_path / "started", tmp_path / "runs" / "r"
    process = subprocess.Popen(
        [sys.executable, "-c", BLOCKING_STAGE, str(runs), str(marker)],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(SRC),
            "COLUMNS": "200",
            "MTSQL_HOME": str(tmp_path / "home"),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(marker, process, seconds=120)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("stopped by SIGTERM:") and ".partial" in err, err
    partial = next(runs.glob("sample/*.partial"))
    assert json.loads((partial / ATTEMPTS).read_text())["attempts"][-1]["outcome"] == "interrupted"
    assert [row[1] for row in status_rows(runs)] == ["partial"]


def test_l16_a_refusal_before_any_work_leaves_no_lock_and_no_run(here):
    def work(ctx):
        raise UsageError("cannot reach the server at http://127.0.0.1:1/v1")

    with pytest.raises(UsageError):
        Store(here / "runs" / "r").run(ArtifactKey("sample"), {}, {}, work)
    assert not (here / "runs").exists()
    Store(here / "runs" / "r").run(ArtifactKey("reject"), {}, {}, lambda ctx: {})
    with pytest.raises(UsageError):
        Store(here / "runs" / "r").run(ArtifactKey("sample"), {}, {}, work)
    assert sorted(p.name for p in (here / "runs" / "r").iterdir()) == ["reject"]


class _FileServer(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        """Quiet."""


def test_l17_a_server_that_does_not_infer_is_named(tmp_path):
    server = start_server(_FileServer)
    try:
        client = OpenAIBackend.__new__(OpenAIBackend)
        client.httpx, client.client = httpx, httpx.Client(timeout=10)
        client.url = f"http://127.0.0.1:{server.server_address[1]}/v1/completions"
        client.max_retries, client.backoff_s = 4, 60.0
        with pytest.raises(
            UsageError, match="HTTP 501 from SimpleHTTP.*not an OpenAI-compatible completions server"
        ):
            client._post({"prompt": [1]})
    finally:
        stop_server(server)


def test_l18_the_root_cause_is_quoted_not_the_line_that_points_at_it(tmp_path):
    log = tmp_path / "vllm-server.log"
    log.write_text(
        "(EngineCore pid=1) Traceback (most recent call last):\n"
        "(EngineCore pid=1) safetensors_rust.SafetensorError: Error while deserializing header: "
        "incomplete metadata, file not fully covered\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    cause = ManagedServer(None, log).last_error()
    assert "SafetensorError: Error while deserializing header" in cause and "See root cause" not in cause


def test_l19_a_tilde_in_runs_dir_is_the_home_folder(here, run_cli):
    Store(here / "elsewhere" / "r1").run(ArtifactKey("sample"), {}, {}, lambda ctx: {"count": 0})
    listed = run_cli("status", "runs_dir=~/elsewhere")
    assert listed.code == 0 and listed.line == "r1", listed.out
    assert run_cli("data", "verify", "r1", "runs_dir=~/elsewhere").code == 0
    cfg = load_config(Path(TINY), ["runs_dir=~/elsewhere"])
    assert store_for(cfg).root == here / "elsewhere" / "tiny"
    assert not (here / "~").exists()


def test_l20_a_prediction_file_with_an_empty_interaction_names_its_line(here, run_cli):
    lines = [line.split("\t")[0] for line in GOLD.read_text().splitlines()]
    blank = lines.index("")
    lines.insert(blank, "")  # two blank lines in a row: an interaction of no turn
    (here / "pred.txt").write_text("\n".join(lines) + "\n")
    refused(
        run_cli("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--out", "out"),
        2,
        f"interaction of no turn at line {blank + 2}",
    )


def fixture_copy(here: Path) -> Path:
    data = here / "data"
    shutil.copytree(FIXTURE_DATA, data, ignore=shutil.ignore_patterns("*.sqlite"))
    for db in FIXTURE_DATA.glob("database/*/*.sqlite"):
        (data / db.relative_to(FIXTURE_DATA)).symlink_to(db)
    return data


def test_l21_a_dialogue_of_no_turn_is_named_not_dropped(here, run_cli):
    data = fixture_copy(here)
    dev = json.loads((data / "sparc" / "dev.json").read_text())
    dev[1]["interaction"] = []
    (data / "sparc" / "dev.json").write_text(json.dumps(dev))
    refused(
        run_cli("data", "check", "--dataset", "sparc", "--root", str(data)),
        2,
        "dev.json",
        "interaction 1 has no turn",
    )


def test_l22_a_database_that_is_a_folder_is_a_missing_database(here):
    data = fixture_copy(here)
    name = json.loads((data / "sparc" / "dev.json").read_text())[0]["database_id"]
    db = data / "database" / name / f"{name}.sqlite"
    db.unlink()
    db.mkdir()
    found = check_split("sparc", "dev", data)
    assert name in found["missing_databases"]
    assert not any(item["db_id"] == name for item in found["gold_fail_after_joining_operators"])


@pytest.mark.parametrize(("pred", "words"), [("/dev/zero", "not a regular file"), (".", "is a folder")])
def test_l23_a_device_or_a_folder_as_predictions(here, run_cli, pred, words):
    refused(
        run_cli("evaluate", "--dataset", "sparc", "--pred", pred, "--out", "out"), 2, "prediction file", words
    )


def test_l24_a_model_folder_without_config_json_says_which_file_is_missing(here, run_cli):
    folder = registry.model_dir("tiny-qwen3")
    folder.mkdir(parents=True)
    (folder / registry.INFO_FILE).write_text(json.dumps({"recipe": registry.RECIPES["tiny-qwen3"]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    refused(
        run_cli("sample", *RUNS, "model.name=tiny-qwen3", "sample.backend=hf", "data.train_limit=1"),
        2,
        str(folder),
        "file missing: config.json",
        "make-tiny qwen3 --force",
    )
    assert not (here / "runs").exists()


def test_l25_files_the_manifest_does_not_know_are_listed(run, run_cli):
    (sample_folder(run) / "notes.txt").write_text("added by hand\n")
    verify_problems(run_cli("data", "verify", "tiny", "runs_dir=runs"), "does not record", "notes.txt")
    ran = run_cli("status", "tiny", "runs_dir=runs")
    assert ran.code == 0
    assert any(row[1] == "edited" and "notes.txt" in row[5] for row in status_rows(run))


def test_l26_the_readme_says_how_to_run_the_notebook_headless():
    readme = (REPO / "README.md").read_text()
    assert "nbclient" in readme and "notebooks/analysis.ipynb" in readme


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


def test_l27_help_keeps_every_word_at_80_columns():
    runner = CliRunner()
    for path in _commands(typer.main.get_command(cli.app)):
        shown = runner.invoke(
            cli.app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"}
        ).output
        assert "…" not in shown, (path, shown)


# ---------------------------------------------------------------------------------------------------
# Beyond the list (found while fixing it)


def test_x1_a_label_of_another_stage_is_refused(run, run_cli):
    """`reject --label sample` would make the sample label's latest a reject artifact, which the next
    `reject` would then read as its sample."""
    before = snapshot(run)
    refused(
        run_cli("reject", *RUNS, "--label", "sample"),
        2,
        "label 'sample' is taken by a sample artifact",
        "another label",
    )
    assert snapshot(run) == before


def test_x2_a_lock_that_is_a_folder_and_a_manifest_that_is_a_symlink(here, run, run_cli):
    artifact = sample_folder(run)
    lock = artifact.with_name(artifact.name + ".lock")
    lock.unlink(missing_ok=True)
    lock.mkdir()
    refused(run_cli("sample", *RUNS, *GOLD_POLICY, "--force"), 2, str(lock), "not a file")
    lock.rmdir()
    manifest = artifact / "manifest.json"
    shutil.copy(manifest, here / "manifest.json")
    manifest.unlink()
    manifest.symlink_to(here / "manifest.json")
    verify_problems(run_cli("data", "verify", "tiny", "runs_dir=runs"), str(manifest), "symlink")
