"""Issue 50, the store and bad inputs (rows 6, 8, 10, 11, 14, 18, 20, 21, 22, 24, 25, 26, 28): a stage never
calls an input or an output ``cached`` unless it verifies, a database that cannot be read is named whatever
the reason, a killed attempt and a copied run keep honest records, and what mtsql prints survives odd bytes
and locales. One test per row (``test_r<N>``), each a command a user types: its exit code, the words of
its one-line message, and what must not change.

Commands run in-process (``cli.main``) in a fresh folder with its own ``MTSQL_HOME``; the rows that need a
process of their own (kill -9, a locale, a read-only mount, a lock held by another process) start one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

import mtsql
from mtsql.app.config import load_config
from mtsql.app.pipeline import sample as sample_stage
from mtsql.app.runner import run_stage
from mtsql.app.status import status_rows
from mtsql.base.artifacts import ATTEMPTS, ArtifactKey, Store
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.data.check import check_split
from mtsql.core.sql import schema

from . import test_bad_input_store as store
from .held import wait_for
from .test_bad_input_store import refused, snapshot

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "configs" / "profiles" / "tiny.yaml")
SRC = Path(mtsql.__file__).resolve().parents[1]
GOLD = FIXTURE_DATA / "sparc" / "dev_gold.txt"
RUNS = ("--config", TINY, "runs_dir=runs")
GOLD_POLICY = ("--policy", "gold", "data.train_limit=2")  # the sample of the fixture run: same fingerprint


# the store tests' fixtures: a working folder of its own, and a copy of a run holding one sample artifact
here, sample_run, run, run_cli = store.here, store.sample_run, store.run, store.run_cli


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    """Tables wide enough that a row's words are never cut."""
    monkeypatch.setenv("COLUMNS", "250")


def sample_folder(run: Path, label: str = "sample") -> Path:
    return (run / label / "latest").resolve()


def edit(path: Path) -> None:
    """Change one byte's worth of an artifact's file, keeping it valid JSON lines."""
    text = path.read_text()
    changed = text.replace('"execution": 1', '"execution": 0', 1)
    assert changed != text
    path.write_text(changed)


def data_copy(here: Path) -> Path:
    """The packaged data, its databases copied (so that a test may spoil one)."""
    return Path(shutil.copytree(FIXTURE_DATA, here / "data"))


# ---------------------------------------------------------------------------------------------------
# 6. MTSQL_HOME that is a file


@pytest.mark.parametrize(
    "args",
    [
        ("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--out", "out", "--workers", "2"),
        ("models", "make-tiny", "qwen3"),
    ],
)
def test_r6_a_home_that_is_a_file_is_one_line(here, run_cli, monkeypatch, args):
    home = here / "home-file"
    home.write_text("not a folder\n")
    monkeypatch.setenv("MTSQL_HOME", str(home))
    (here / "pred.txt").write_text(
        "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    )
    refused(run_cli(*args), 2, f"MTSQL_HOME: {home} is a file, not a folder", "set MTSQL_HOME to a folder")
    assert home.read_text() == "not a folder\n" and not (here / "out").exists()


# ---------------------------------------------------------------------------------------------------
# 8. an output that does not verify is never `cached`


def test_r8_an_edited_output_is_not_served_as_cached(run, run_cli):
    trajectories = sample_folder(run) / "trajectories.jsonl"
    edit(trajectories)
    before = snapshot(run)
    for dry in ((), ("--dry-run",)):
        line = refused(
            run_cli("sample", *RUNS, *GOLD_POLICY, *dry),
            2,
            str(trajectories),
            "content changed",
            "mtsql data verify",
            "--force",
        )
        assert "cached" not in line
    assert snapshot(run) == before


def test_r8_sft_iterate_does_not_serve_an_edited_round(here, run_cli):
    cfg = load_config(Path(TINY), ["runs_dir=runs", "data.train_limit=2"])
    sampled = sample_stage(cfg, key=ArtifactKey("sample", 1), policy=cfg.sft.first_round_policy)
    run_stage("reject", cfg, key=ArtifactKey("reject", 1), inputs={"sample": sampled})
    edit(sampled.path / "trajectories.jsonl")
    before = snapshot(here / "runs")
    for dry in (
        ("--dry-run",),
        (),
    ):  # the plan first: where the store served the round, the real run would train
        ran = run_cli("sft-iterate", *RUNS, "data.train_limit=2", *dry)
        refused(ran, 2, "trajectories.jsonl", "content changed", "sample-r1")
    assert snapshot(here / "runs") == before


# ---------------------------------------------------------------------------------------------------
# 10, 11. a database that cannot be read is named, whatever the reason


def spoil(db: Path, how: str) -> str:
    """Make ``db`` unreadable as ``how`` says; the words its message must hold."""
    if how == "empty":
        db.write_bytes(b"")
        return "empty file (0 bytes)"
    db.write_bytes(b"not a database, only words\n" * 200)
    return "not a readable SQLite database"


@pytest.mark.parametrize("how", ["empty", "garbage"])
def test_r10_an_unreadable_database_is_named_not_dropped(here, run_cli, how):
    data = data_copy(here)
    dev = json.loads((data / "sparc" / "dev.json").read_text())
    name = dev[0]["database_id"]
    db = data / "database" / name / f"{name}.sqlite"
    words = spoil(db, how)

    found = check_split("sparc", "dev", data)
    assert found["unreadable_databases"] == {name: found["unreadable_databases"][name]}
    assert words in found["unreadable_databases"][name]["why"]
    assert name not in found["missing_databases"]
    assert not any(item["db_id"] == name for item in found["gold_fail_after_joining_operators"])
    checked = run_cli("data", "check", "--dataset", "sparc", "--root", str(data))
    assert checked.code == 0 and "Traceback" not in checked.out, checked.out
    assert "unreadable databases" in checked.out and name in checked.out and words in checked.out, checked.out

    first = train_database(data)
    train_db = data / "database" / first / f"{first}.sqlite"
    spoil(train_db, how)
    before = snapshot(data)
    refused(run_cli("sample", *RUNS, *GOLD_POLICY, f"data.root={data}"), 2, str(train_db), words)
    assert not (here / "runs").exists() and not (here / "out").exists() and snapshot(data) == before


def train_database(data: Path) -> str:
    """The database of the first CoSQL training dialogue of ``data``."""
    from mtsql.core.data import load_turns

    return load_turns("cosql", "train", root=data, limit=1, with_hardness=False)[0].db_id


LOCKER = """
import sqlite3, sys
connections = [sqlite3.connect(path, isolation_level=None) for path in sys.argv[1:]]
for conn in connections:
    conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
for conn in connections:
    conn.execute("ROLLBACK")
"""


def test_r11_a_database_locked_by_another_process_says_so(here, run_cli, monkeypatch):
    monkeypatch.setattr(schema, "BUSY_WAIT_S", 0.1)  # each refusal below waits this long for the lock
    data = data_copy(here)
    train, dev = train_database(data), json.loads((data / "sparc" / "dev.json").read_text())[0]["database_id"]
    train_db, dev_db = (data / "database" / name / f"{name}.sqlite" for name in (train, dev))
    (here / "pred.txt").write_text(
        "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    )
    scored = ("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--workers", "1", f"data.root={data}")
    assert run_cli(*scored, "--out", "warm").code == 0  # the gold cache now answers for the gold queries
    before = snapshot(data)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(train_db), str(dev_db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = refused(
            run_cli("sample", *RUNS, *GOLD_POLICY, f"data.root={data}"), 2, str(train_db), "another process"
        )
        assert "copy it again" not in line
        refused(run_cli(*scored, "--out", "out"), 2, str(dev_db), "another process")
        found = check_split("sparc", "dev", data)
        assert "another process" in found["unreadable_databases"][dev]["why"]
        assert not any(item["db_id"] == dev for item in found["gold_fail_after_joining_operators"])
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert not (here / "runs").exists() and not (here / "out").exists() and snapshot(data) == before


# ---------------------------------------------------------------------------------------------------
# 14. the notebook leaves an edited artifact out and says why


@pytest.mark.notebook
def test_r14_the_notebook_runs_on_a_run_with_an_edited_artifact(run):
    import nbformat
    from nbclient import NotebookClient

    def work(ctx):
        (ctx.out / "kept.jsonl").write_text("{}\n")
        return {}

    Store(run).run(ArtifactKey("reject"), {"n": 1}, {}, work)
    kept = sample_folder(run, "reject") / "kept.jsonl"
    kept.write_text("{}\n{}\n")
    before = snapshot(run)
    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    saved = os.environ.get("MTSQL_RUN")
    os.environ["MTSQL_RUN"] = str(run)
    try:
        NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute()
    finally:
        os.environ.pop("MTSQL_RUN")
        if saved is not None:
            os.environ["MTSQL_RUN"] = saved
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert str(kept) in printed and "size changed" in printed, printed
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------------
# 18. a dry run refuses what the real run refuses


def test_r18_a_dry_run_refuses_an_input_that_does_not_verify(run, run_cli):
    run_cli("reject", *RUNS)
    kept = sample_folder(run, "reject") / "kept.jsonl"
    kept.write_text(kept.read_text() + "\n")
    before = snapshot(run)
    real = refused(run_cli("sft", *RUNS), 2, str(kept), "input 'reject'")
    planned = refused(run_cli("sft", *RUNS, "--dry-run"), 2, str(kept), "input 'reject'")
    assert planned == real and "will run" not in planned
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------------
# 20. reserved label names; an alias label in status


@pytest.mark.parametrize("label", ["x.partial", "x.lock", "x.old", "REPORT", "Latest"])
def test_r20_a_label_the_store_uses_is_refused(run, run_cli, label):
    before = snapshot(run)
    refused(run_cli("sample", *RUNS, *GOLD_POLICY, "--label", label), 2, repr(label), "reserved")
    assert snapshot(run) == before


def test_r20_status_lists_an_alias_label(run, run_cli):
    ran = run_cli("sample", *RUNS, *GOLD_POLICY, "--label", "again")
    assert ran.code == 0 and "the same work as sample" in ran.out, ran.out
    rows = {row[0]: row for row in status_rows(run)}
    assert rows["sample"][1] == "latest"
    assert rows["again"][1] == "alias" and "same artifact as sample" in rows["again"][5], rows
    assert rows["again"][2] == rows["sample"][2]


# ---------------------------------------------------------------------------------------------------
# 21. a UTF-16 file is named as such


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16"])  # without and with a byte-order mark
@pytest.mark.parametrize("which", ["gold", "pred"])
def test_r21_a_utf16_file_is_named_as_such(here, run_cli, encoding, which):
    sqls = "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    (here / "pred.txt").write_text(sqls)
    shutil.copy(GOLD, here / "gold.txt")
    target = here / f"{which}.txt"
    target.write_bytes(target.read_text().encode(encoding))
    refused(
        run_cli("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--gold", "gold.txt", "--out", "out"),
        2,
        f"{which}.txt: UTF-16",
        "save it as UTF-8",
    )
    assert not (here / "out").exists()


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-16"])
def test_r21_a_utf16_tables_json_is_named_as_such(here, run_cli, encoding):
    tables = here / "tables.json"
    tables.write_bytes((FIXTURE_DATA / "sparc" / "tables.json").read_text().encode(encoding))
    (here / "pred.txt").write_text(
        "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    )
    refused(
        run_cli(
            "evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--tables", "tables.json", "--out", "out"
        ),
        2,
        "tables.json: UTF-16",
        "save it as UTF-8",
    )
    assert not (here / "out").exists()


# ---------------------------------------------------------------------------------------------------
# 22. kill -9: the attempt is recorded as killed, and its time counts

KILLED_STAGE = """
import sys
from pathlib import Path
from mtsql.base.artifacts import ArtifactKey, Store

def work(ctx):
    (ctx.out / "shard-0.jsonl").write_text("{}\\n")
    Path(sys.argv[2]).write_text("started")
    sys.stdin.read()  # held until killed

Store(Path(sys.argv[1])).run(ArtifactKey("sample"), {}, {}, work)
"""


def test_r22_a_killed_attempt_is_recorded_with_its_time(here):
    runs, marker = here / "runs" / "r", here / "started"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_STAGE, str(runs), str(marker)],
        stdin=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "MTSQL_HOME": str(here / "home")},
    )
    wait_for(marker, process, seconds=120)
    process.kill()
    process.wait(timeout=60)
    partial = next(runs.glob("sample/*.partial"))
    started = dt.datetime.fromisoformat(
        json.loads((partial / ATTEMPTS).read_text())["attempts"][0]["started_at"]
    )
    last_write = started.timestamp() + 30.0  # as if its last shard were written 30 s in
    os.utime(partial / "shard-0.jsonl", (last_write, last_write))

    artifact, cached = Store(runs).run(ArtifactKey("sample"), {}, {}, lambda ctx: {"resumed": True})
    attempts = artifact.manifest["attempts"]
    assert not cached and [a["outcome"] for a in attempts] == ["killed", "complete"]
    assert attempts[0]["duration_s"] == 30.0
    assert artifact.manifest["duration_s"] == round(30.0 + attempts[1]["duration_s"], 3)
    assert "killed" in (artifact.path / "log.txt").read_text()


# ---------------------------------------------------------------------------------------------------
# 24. `mtsql show` escapes control and bidi characters


def test_r24_show_escapes_control_and_bidi_characters(run, run_cli):
    row = json.loads((sample_folder(run) / "trajectories.jsonl").read_text().splitlines()[0])
    odd = "NUL\x00 BEL\x07 CR\r ESC\x1b[31m RLO\u202e LRI\u2066 end"
    row["trajectory"]["messages"][1]["content"] += odd
    row["turn"]["gold_sql"] += " -- " + odd

    def work(ctx):
        (ctx.out / "trajectories.jsonl").write_text(json.dumps(row) + "\n")
        return {}

    Store(run).run(ArtifactKey("sample", variant="odd"), {}, {}, work)
    ran = run_cli("show", "tiny", "sample-odd", "runs_dir=runs")
    assert ran.code == 0 and "Traceback" not in ran.out, ran.out
    shown = [ch for ch in ran.out if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf")]
    assert not shown, shown
    for escaped in (r"\x00", r"\x07", r"\r", r"\x1b", r"\u202e", r"\u2066"):
        assert ran.out.count(escaped) == 2, (escaped, ran.out)


# ---------------------------------------------------------------------------------------------------
# 25. a read-only MTSQL_HOME is named as what to change


def test_r25_a_read_only_home_says_to_move_mtsql_home(here):
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unprivileged user namespaces (unshare -rm)")
    (here / "home").mkdir()
    (here / "pred.txt").write_text(
        "".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines())
    )
    script = (
        "mount --bind -o ro home home\n"
        f"{sys.executable} -m mtsql evaluate --dataset sparc --pred pred.txt --out out --workers 1 "
        "2>err.txt\n"
        "echo $? >rc.txt\n"
    )
    subprocess.run(
        ["unshare", "-rm", "bash", "-c", script],
        cwd=here,
        timeout=300,
        check=True,
        env={
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
            "PYTHONPATH": str(SRC),
            "MTSQL_HOME": str(here / "home"),
        },
    )
    err = (here / "err.txt").read_text()
    assert (here / "rc.txt").read_text().strip() == "1", err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "Read-only file system" in err and "MTSQL_HOME" in err and "runs_dir=" not in err, err
    assert not any((here / "home").iterdir())


# ---------------------------------------------------------------------------------------------------
# 26. a non-ASCII label on an ASCII terminal


def test_r26_a_non_ascii_label_in_the_c_locale(run):
    """``status`` and ``show`` of a run with a non-ASCII label (the label typed as the terminal sends it),
    and a pipeline step that would make one where no file name can hold it: escapes, or one line."""
    Store(run).run(ArtifactKey("sample", name="café"), {"n": 2}, {}, lambda ctx: {"count": 0})
    Store(run).run(
        ArtifactKey("sample", variant="éé"),
        {"n": 3},
        {},  # an artifact with trajectories to show
        lambda ctx: shutil.copy(sample_folder(run) / "trajectories.jsonl", ctx.out) and {},
    )
    (run.parent.parent / "p.yaml").write_text(
        "steps:\n  - stage: sample\n    label: thé\n    overrides: [sample.policy=gold, data.train_limit=2]\n"
    )
    before = snapshot(run)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(SRC),
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "COLUMNS": "200",
        "MTSQL_HOME": str(run.parent.parent / "home"),
    }

    def mtsql_c(*args: str) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "mtsql", *args],
            cwd=run.parent.parent,
            capture_output=True,
            timeout=120,
            env=env,
        )
        return done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("ascii")

    code, out, err = mtsql_c("status", "tiny", "runs_dir=runs")
    assert code == 0 and "Traceback" not in err, err
    assert "caf\\xe9" in out and "sample" in out, out
    code, out, err = mtsql_c("show", "tiny", "sample-éé", "runs_dir=runs")
    assert code == 0 and "Traceback" not in err and "gold SQL" in out, err
    code, out, err = mtsql_c("run", "p.yaml", "--config", TINY, "runs_dir=runs")
    last = err.strip().splitlines()[-1]  # after the line that names the pipeline
    assert code == 2 and "Traceback" not in err and last.startswith("error: "), err
    assert "th\\xe9" in last and "LC_ALL=C.UTF-8" in last, err
    assert snapshot(run) == before
    code, out, err = mtsql_c(
        "report", "tiny", "runs_dir=runs"
    )  # report.md holds non-ASCII text whatever the locale
    assert code == 0 and "Traceback" not in err, err
    assert "caf" in (run / "report" / "report.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------
# 28. resuming a run copied with hard links writes nothing into the original


def test_r28_resuming_a_hard_linked_copy_leaves_the_original_alone(here):
    original, copy = here / "runs" / "r", here / "copy" / "r"

    def fail(ctx):
        (ctx.out / "shard-0.jsonl").write_text("{}\n")
        raise RuntimeError("the machine went away")

    with pytest.raises(RuntimeError):
        Store(original).run(ArtifactKey("sample"), {}, {}, fail)
    copy.parent.mkdir()
    subprocess.run(["cp", "-al", str(original), str(copy)], check=True)
    partial = next(copy.glob("sample/*.partial"))
    assert (partial / "log.txt").stat().st_nlink == 2
    before = snapshot(original)

    def resume(ctx):
        with (ctx.out / "shard-0.jsonl").open("a") as handle:
            handle.write("{}\n")
        return {}

    artifact, _ = Store(copy).run(ArtifactKey("sample"), {}, {}, resume)
    assert snapshot(original) == before
    assert (artifact.path / "log.txt").read_text().count("attempt started") == 2
    assert (artifact.path / "shard-0.jsonl").read_text() == "{}\n{}\n"
