"""Bad input and faults (issue 29, items 7-10): one line on stderr, the right exit code, nothing written.

Each row of ``CASES`` is one command run as ``mtsql`` (in this process) in a fresh folder: its name, a setup
that writes the inputs it needs (``None``: none), the arguments (``{tmp}`` is that folder, ``{data}`` a
copy of the packaged fixture made by the setup, ``{tiny}`` the tiny profile), the exit code and words
stderr must hold. Every row also checks that stderr is a single ``error:`` line without a traceback and
that the command wrote no file (a stage's ``.lock``, which every attempt leaves, and caches under
``MTSQL_HOME`` aside). A new case is one more row. Faults that need a process to be signalled, a full
disk or a read-only folder have their own tests below the table.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import mtsql
from mtsql.base.paths import FIXTURE_DATA

from .held import ctrl_c_reaches_it, held_command, wait_for
from .inprocess import mtsql_in_process, steps_in_one_process

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
SRC = Path(mtsql.__file__).resolve().parents[1]  # the code under test, also in the subprocesses


def mtsql_run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``mtsql *args`` in folder ``cwd`` with a home of its own there (in this process:
    tests/inprocess.py)."""
    base = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "MTSQL_HOME": str(cwd / "home")}
    return mtsql_in_process(args, cwd=cwd, env={**base, **(env or {})})


# -- setups: each writes the inputs of a case into the case's folder -----------------------------------


def copy_data(tmp: Path) -> Path:
    data = tmp / "data"
    shutil.copytree(FIXTURE_DATA, data)
    gold = (data / "sparc" / "dev_gold.txt").read_text().splitlines()
    (tmp / "pred.txt").write_text("".join(line.split("\t")[0] + "\n" for line in gold))  # the gold SQL
    return data


def truncated_databases(tmp: Path) -> None:
    """Every database cut to its first 4 KiB page, as a copy interrupted half-way leaves it."""
    for db in (copy_data(tmp) / "database").glob("*/*.sqlite"):
        os.truncate(db, 4096)


def tables_json(data: bytes) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (copy_data(tmp) / "sparc" / "tables.json").write_bytes(data)

    return setup


def profile(path: str, data: bytes) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_bytes(data)

    return setup


def file_named(name: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        copy_data(tmp)
        (tmp / name).write_text("my notes\n")

    return setup


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    code: int
    words: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    env: dict = field(default_factory=dict)


EVAL = ("evaluate", "--pred", "{tmp}/pred.txt", "--dataset", "sparc", "--out", "{tmp}/out", "--workers", "1")
DATA_ENV = {"MTSQL_DATA": "{data}"}

CASES = [
    # 7. user input is never read as Rich markup
    Case(
        "markup value kept",
        ("config", "show", "--config", "{tiny}", "data.eval_datasets=[foo]"),
        2,
        ("data.eval_datasets=[foo]", "got 'foo'"),
    ),
    Case(
        "markup closing tag",
        ("config", "show", "--config", "{tiny}", "data.eval_datasets=[/foo]"),
        2,
        ("data.eval_datasets=[/foo]",),
    ),
    Case(
        "markup in profile path",
        ("config", "show", "--config", "{tmp}/[/x]/p.yaml"),
        2,
        ("[/x]/p.yaml", "did you mean 'sample'"),
        profile("[/x]/p.yaml", b"sampel:\n  n: 2\n"),
    ),
    Case("markup in run name", ("status", "[/x]"), 2, ("no run '[/x]'",)),
    # 8. corrupt inputs
    Case(
        "truncated sqlite, evaluate --pred",
        EVAL,
        2,
        ("pets_1.sqlite", "not a readable SQLite database"),
        truncated_databases,
        DATA_ENV,
    ),
    Case(
        "truncated sqlite, sample",
        ("sample", "--policy", "gold", "data.train_limit=2", "runs_dir={tmp}/runs"),
        2,
        (".sqlite", "not a readable SQLite database"),
        truncated_databases,
        DATA_ENV,
    ),
    Case(
        "non-UTF-8 profile",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        2,
        ("p.yaml line 2", "not UTF-8"),
        profile("p.yaml", b"run: x\n\xff\xfe: 1\n"),
    ),
    Case(
        "non-UTF-8 pipeline",
        ("run", "{tmp}/p.yaml", "--dry-run"),
        2,
        ("p.yaml line 1", "not UTF-8"),
        profile("p.yaml", b"steps: [\xff]\n"),
    ),
    Case(
        "malformed tables.json",
        EVAL,
        2,
        ("tables.json line 1", "malformed JSON"),
        tables_json(b'[{"db_id": '),
        DATA_ENV,
    ),
    Case(
        "tables.json not a list",
        EVAL,
        2,
        ("tables.json", "list of databases, not a dict"),
        tables_json(b'{"db_id": "pets_1"}'),
        DATA_ENV,
    ),
    Case(
        "tables.json entries not databases",
        EVAL,
        2,
        ("tables.json", "entry 0", "db_id"),
        tables_json(b'["pets_1"]'),
        DATA_ENV,
    ),
    Case(
        "tables.json entry lacks a key",
        EVAL,
        2,
        ("tables.json", "entry 0", "foreign_keys"),
        tables_json(b'[{"db_id": "pets_1", "table_names_original": [], "column_names_original": []}]'),
        DATA_ENV,
    ),
    Case("tables.json not UTF-8", EVAL, 2, ("tables.json", "cannot read"), tables_json(b"\xff"), DATA_ENV),
    # beyond the list: a name that is a path wrote artifacts outside the run folder
    Case(
        "label is a path",
        ("sample", "--policy", "gold", "--label", "../../escaped", "runs_dir={tmp}/runs"),
        2,
        ("label '../../escaped'", "names a folder"),
    ),
    Case(
        "run name is a path",
        ("sample", "--policy", "gold", "run=../x", "runs_dir={tmp}/runs"),
        2,
        ("run '../x'", "names a folder"),
    ),
    # 9. filesystem
    Case(
        "runs_dir is a file, stage",
        ("sample", "--policy", "gold", "runs_dir={tmp}/notes.txt"),
        2,
        ("runs_dir=", "notes.txt is a file, not a folder"),
        file_named("notes.txt"),
    ),
    Case(
        "runs_dir is a file, status",
        ("status", "runs_dir={tmp}/notes.txt"),
        2,
        ("runs_dir=", "notes.txt is a file, not a folder"),
        file_named("notes.txt"),
    ),
    Case(
        "evaluate --out is a file",
        (*EVAL[:-3], "{tmp}/notes.txt", "--workers", "1"),
        2,
        ("notes.txt is a file, not a folder",),
        file_named("notes.txt"),
        DATA_ENV,
    ),
    Case(
        "evaluate --out under a file",
        (*EVAL[:-3], "{tmp}/notes.txt/out", "--workers", "1"),
        2,
        ("notes.txt is a file, not a folder",),
        file_named("notes.txt"),
        DATA_ENV,
    ),
]


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "home" not in p.relative_to(root).parts[:1]
    }


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_one_line_and_writes_nothing(case: Case, tmp_path):
    if case.setup is not None:
        case.setup(tmp_path)
    before = files_under(tmp_path)

    def fill(text: str) -> str:
        return text.format(tmp=tmp_path, data=tmp_path / "data", tiny=TINY)

    result = mtsql_run(*map(fill, case.args), cwd=tmp_path, env={k: fill(v) for k, v in case.env.items()})
    assert result.returncode == case.code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for word in case.words:
        assert word in lines[0], (word, lines[0])
    written = {path for path, data in files_under(tmp_path).items() if before.get(path) != data}
    assert {path for path in written if not path.endswith(".lock")} == set()


def test_markup_in_a_listed_path_is_printed_as_is(tmp_path):
    home = tmp_path / "[/h]"
    result = mtsql_run("models", "list", cwd=tmp_path, env={"MTSQL_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert str(home / "models" / "tiny-qwen3") in result.stdout


# -- 8. a gold-cache file holding text: a warning, the entries computed again, the same scores -----------


def test_damaged_gold_cache_is_recomputed_with_a_warning(tmp_path):
    copy_data(tmp_path)
    args = ("evaluate", "--pred", "pred.txt", "--dataset", "sparc", "--workers", "1")
    first = mtsql_run(*args, "--out", "a", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    caches = sorted((tmp_path / "home" / "cache" / "gold").glob("*.pickle"))
    assert caches
    for path in caches:
        path.write_text("gold cache\n")  # text that makes pickle raise ValueError
    second = mtsql_run(*args, "--out", "b", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr
    assert f"gold cache {caches[0]} is damaged" in second.stderr
    assert (tmp_path / "a" / "items.jsonl").read_text() == (tmp_path / "b" / "items.jsonl").read_text()


# -- 9. filesystem ----------------------------------------------------------------------------------------


def test_evaluate_out_never_pairs_new_items_with_an_old_summary(tmp_path, monkeypatch):
    """A disk that fills up between the two files: the folder must not hold the old summary beside the
    new items (the summary is removed first and written last)."""
    from mtsql.base import files
    from mtsql.core.evaluation_files import write_outputs
    from mtsql.core.sql.evaluation import Evaluation

    out = tmp_path / "out"
    write_outputs(out, Evaluation([{"turn": "old"}], {"turns": 1, "version": "old"}))
    real = files.write_bytes

    def full_disk_at_summary(path, data):
        if Path(path).name == "summary.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(files, "write_bytes", full_disk_at_summary)
    with pytest.raises(OSError):
        write_outputs(out, Evaluation([{"turn": "new"}, {"turn": "new"}], {"turns": 2, "version": "new"}))
    summary = out / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["turns"] == len(
        (out / "items.jsonl").read_text().splitlines()
    )


def in_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a shell script as root of a user and mount namespace (a tmpfs or a read-only bind mount
    without privileges); skip where the kernel does not allow it."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs unprivileged user namespaces (unshare -rm)")
    return subprocess.run(
        ["unshare", "-rm", "bash", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
            "PYTHONPATH": str(SRC),
            "MTSQL_HOME": str(tmp_path / "home"),
        },
    )


def test_full_disk_is_one_line(tmp_path):
    copy_data(tmp_path)
    (tmp_path / "small").mkdir()
    steps = {
        "eval": [
            "evaluate",
            "--pred",
            "pred.txt",
            "--dataset",
            "sparc",
            "--out",
            "small/out",
            "--workers",
            "1",
        ],
        "sample": ["sample", "--policy", "gold", "data.train_limit=40", "runs_dir=small/runs"],
    }
    run_steps = shlex.join(steps_in_one_process(steps))
    result = in_namespace(f"set -e; mount -t tmpfs -o size=64k tmpfs small\n{run_steps}\n", tmp_path)
    assert result.returncode == 0, result.stderr
    for command in ("eval", "sample"):
        err = (tmp_path / f"{command}.err").read_text()
        assert (tmp_path / f"{command}.rc").read_text().strip() == "1", err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0] and "free some space" in lines[0], (
            err
        )


def test_read_only_run_can_be_read(tmp_path):
    """A finished run on a read-only disk: its cached stage, status, show, data verify, a report written
    elsewhere and an evaluation written elsewhere all work; a report inside it is one line."""
    copy_data(tmp_path)
    args = ("sample", "--policy", "gold", "data.train_limit=2", "runs_dir=runs", "run=r")
    assert mtsql_run(*args, cwd=tmp_path).returncode == 0
    steps = {
        "cached": args,
        "status": ("status", "r", "runs_dir=runs"),
        "show": ("show", "r", "sample", "runs_dir=runs"),
        "verify": ("data", "verify", "r", "runs_dir=runs"),
        "report": ("report", "r", "runs_dir=runs", "--out", "elsewhere/report"),
        "evaluate": ("evaluate", "--pred", "pred.txt", "--dataset", "sparc", "--out", "elsewhere/eval")
        + ("--workers", "1"),
        "report_inside": ("report", "r", "runs_dir=runs"),
    }
    script = f"mount --bind -o ro runs runs\n{shlex.join(steps_in_one_process(steps))}\n"
    result = in_namespace(script, tmp_path)
    assert result.returncode == 0, result.stderr

    def outcome(name):
        return int((tmp_path / f"{name}.rc").read_text()), (tmp_path / f"{name}.err").read_text()

    for name in ("cached", "status", "show", "verify", "report", "evaluate"):
        code, err = outcome(name)
        assert code == 0 and "Traceback" not in err, (name, err)
    assert "cached" in outcome("cached")[1]
    assert (tmp_path / "elsewhere" / "report" / "report.md").is_file()
    assert (tmp_path / "elsewhere" / "eval" / "summary.json").is_file()
    code, err = outcome("report_inside")
    assert (
        code == 1 and len(err.strip().splitlines()) == 1 and "Read-only file system" in err and "--out" in err
    )


# -- 10. Ctrl-C -------------------------------------------------------------------------------------------


def test_ctrl_c_names_the_partial_folder(tmp_path):
    """A real SIGINT while a stage runs (held in its rollout, so that it cannot finish first): exit 130
    and the promised line (Typer used to swallow it)."""
    runs, marker = tmp_path / "runs", tmp_path / "in-rollout"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "MTSQL_HOME": str(tmp_path / "home")}
    command = held_command(
        marker,
        "mtsql.core.agent.policies:GoldPolicy.__call__",
        "sample",
        "--policy",
        "gold",
        f"runs_dir={runs}",
        "run=r",
    )
    process = subprocess.Popen(
        command,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
    wait_for(marker, process)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    partial = next(runs.glob("r/sample/*.partial"))
    assert process.returncode == 130, err
    assert f"interrupted: sample left as {partial}; rerun to resume" in err
    assert "Traceback" not in err
