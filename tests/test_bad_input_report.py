"""Nothing lost (issue 50): `report --out` never deletes what it did not write, a run is known by what it
holds, and the reading commands refuse what is not a run in one line. One test per row of the issue that
these concern (``test_r<N>``: row N), each a command a careless user types: its exit code, the words of
its one-line message, and what must not change (every file of the runs and of the user's folders,
hashed before and after).

Commands run in-process (``cli.main``), in a fresh folder with its own ``MTSQL_HOME`` and ``HOME``; the
concurrent reports are two real processes. A run with a complete ``sample`` artifact is copied per test
(``runs/tiny``), beside a second run ``runs/y`` that also holds an evaluation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtsql.app.config import load_config
from mtsql.app.report.destination import MARK
from mtsql.app.runner import run_stage
from mtsql.base.artifacts import Store
from mtsql.base.errors import UsageError

from . import test_bad_input_store as store
from .held import wait_for
from .test_bad_input_store import (
    GOLD,
    SRC,
    TINY,
    Ran,
    evaluation,
    mtsql,
    refused,
    snapshot,
    verify_problems,
)


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*args)``: a ``Ran`` with what the command printed."""

    def call(*args: str) -> Ran:
        capsys.readouterr()
        code = mtsql(*args)
        captured = capsys.readouterr()
        return Ran(code, captured.out + captured.err)

    return call


here = store.here  # an empty working folder with its own MTSQL_HOME and HOME; the packaged data


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """``runs/tiny`` with one complete sample artifact; ``runs/y``, a copy with an evaluation too."""
    root = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MTSQL_HOME", str(root / "home"))
        patch.delenv("MTSQL_DATA", raising=False)
        cfg = load_config(
            Path(TINY), [f"runs_dir={root / 'runs'}", "sample.policy=gold", "data.train_limit=2"]
        )
        run_stage("sample", cfg)
        shutil.copytree(root / "runs" / "tiny", root / "runs" / "y", symlinks=True)
        evaluation(Store(root / "runs" / "y"))
    return root / "runs"


@pytest.fixture
def run(here, two_runs) -> Path:
    """This test's copy of ``two_runs`` at ``./runs``: the run ``runs/tiny``."""
    shutil.copytree(two_runs, here / "runs", symlinks=True)
    return here / "runs" / "tiny"


def notes(here: Path) -> Path:
    """A folder of the user's: notes and a report.md of their own."""
    folder = here / "notes"
    (folder / "plots").mkdir(parents=True)
    (folder / "todo.txt").write_text("ask about round 2\n")
    (folder / "report.md").write_text("# my own report\n")
    (folder / "plots" / "mine.png").write_bytes(b"\x89PNG mine")
    return folder


def leftovers(*folders: Path) -> list[Path]:
    """Temporary folders a report left beside its destination (``.<name>.<pid>.<random>.tmp`` / ``.old``)."""
    return [path for folder in folders for path in folder.rglob(".*") if path.suffix in (".tmp", ".old")]


def report_text(folder: Path) -> str:
    return (folder / "report.md").read_text()


# ---------------------------------------------------------------------------------------------------
# High


def test_r1_report_out_onto_its_own_run_deletes_nothing(here, run, run_cli):
    before = snapshot(here / "runs")
    for out in ("runs/tiny", str(run.resolve()), "runs/tiny/"):
        refused(
            run_cli("report", "tiny", "runs_dir=runs", "--out", out),
            2,
            f"--out {Path(out)}",
            "is the run folder",
            "outside any run",
        )
    assert snapshot(here / "runs") == before
    assert run_cli("data", "verify", "tiny", "runs_dir=runs").code == 0


def test_r2_report_out_onto_another_run_deletes_nothing(here, run, run_cli):
    """Another run, a label folder, an artifact (through ``latest`` or not) of it, a run outside runs_dir:
    refused, and `data verify` still finds every artifact of the other run."""
    outside = here / "elsewhere" / "r2"
    evaluation(Store(outside))
    before = snapshot(here / "runs"), snapshot(here / "elsewhere")
    eval_folder = str((here / "runs" / "y" / "eval-base" / "latest").resolve())
    for out, words in (
        ("runs/y", "is the run folder"),
        ("runs/y/eval-base", "is inside the run folder"),
        (eval_folder, "is inside the run folder"),
        ("runs/y/notes", "is inside the run folder"),
        ("elsewhere/r2", "is the run folder"),
        ("elsewhere/r2/eval-base", "is inside the run folder"),
    ):
        refused(run_cli("report", "tiny", "runs_dir=runs", "--out", out), 2, f"--out {Path(out)}", words)
    refused(run_cli("report", "tiny", "runs_dir=runs", "--out", "runs/reports"), 2, "under runs_dir")
    assert (snapshot(here / "runs"), snapshot(here / "elsewhere")) == before
    ran = run_cli("data", "verify", "y", "runs_dir=runs")
    assert ran.code == 0 and "all 2 artifacts intact" in ran.out, ran.out


def test_r3_report_out_onto_a_users_folder_deletes_nothing(here, run, run_cli):
    """A folder with files the report did not make (even a report.md and plots/*.png of the user's) is
    refused; a new or empty folder gets the report, and a later report replaces only what it wrote."""
    folder = notes(here)
    before = snapshot(folder)
    for out in ("notes", "~/notes", str(folder)):
        refused(
            run_cli("report", "tiny", "runs_dir=runs", "--out", out),
            2,
            f"--out {out}",
            "not written by mtsql report",
            "deletes only what it wrote",
        )
    assert snapshot(folder) == before
    (here / "empty").mkdir()
    for out in ("fresh/report", "fresh/report", "empty"):
        assert run_cli("report", "tiny", "runs_dir=runs", "--out", out).code == 0
        assert "# mtsql report: tiny" in report_text(here / out)
    mark = here / "fresh" / "report" / MARK  # a list that names a file outside its folder
    listed = json.loads(mark.read_text())
    listed["files"]["../../notes/todo.txt"] = hashlib.sha256((folder / "todo.txt").read_bytes()).hexdigest()
    mark.write_text(json.dumps(listed))
    assert run_cli("report", "tiny", "runs_dir=runs", "--out", "fresh/report").code == 0
    assert snapshot(folder) == before
    (here / "fresh" / "report" / "plots" / "drawn-by-hand.png").write_bytes(b"mine")
    before = snapshot(here / "fresh")
    refused(
        run_cli("report", "tiny", "runs_dir=runs", "--out", "fresh/report"),
        2,
        "drawn-by-hand.png",
        "not written by mtsql report",
    )
    report = here / "empty" / "report.md"
    report.write_text(report.read_text() + "\nmy comment\n")
    refused(
        run_cli("report", "tiny", "runs_dir=runs", "--out", "empty"),
        2,
        str(report),
        "changed since the report wrote it",
    )
    assert snapshot(here / "fresh") == before and "my comment" in report.read_text()
    assert leftovers(here) == []


# ---------------------------------------------------------------------------------------------------
# Medium


def test_r7_a_run_is_known_by_what_it_holds(here, run, run_cli):
    """`evaluate --out` into a run outside runs_dir is refused; `data verify` names what no stage wrote."""
    outside = here / "elsewhere" / "r2"
    shutil.copytree(run, outside, symlinks=True)
    pred = here / "pred.txt"
    pred.write_text("".join(line.split("\t")[0] + "\n" for line in GOLD.read_text().splitlines()))
    before = snapshot(here / "elsewhere")
    for out in ("elsewhere/r2", "elsewhere/r2/scores", "elsewhere/r2/sample", "elsewhere/r2/sample/scores"):
        refused(
            run_cli("evaluate", "--dataset", "sparc", "--pred", str(pred), "--out", out, "runs_dir=runs"),
            2,
            f"--out {out}",
            "inside a run folder",
        )
    assert snapshot(here / "elsewhere") == before
    assert (
        run_cli(
            "evaluate",
            "--dataset",
            "sparc",
            "--pred",
            str(pred),
            "--out",
            "elsewhere/scores",
            "runs_dir=runs",
        ).code
        == 0
    )
    (outside / "scores").mkdir()
    (outside / "scores" / "summary.json").write_text("{}")
    (outside / "notes.txt").write_text("mine")
    (outside / "sample" / "copy").mkdir()
    (outside / "sample" / "0123456789ab").mkdir()
    lines = verify_problems(
        run_cli("data", "verify", str(outside)),
        f"{outside / 'scores'}: not written by a stage",
        f"{outside / 'notes.txt'}: not written by a stage",
        f"{outside / 'sample' / 'copy'}: not written by a stage",
        f"{outside / 'sample' / '0123456789ab'}: an artifact folder without manifest.json",
    )
    assert len(lines) == 4, lines
    assert run_cli("report", str(outside), "--out", "r2-report").code == 0
    assert run_cli("report", str(outside)).code == 0
    for stray in (outside / "scores", outside / "sample" / "copy", outside / "sample" / "0123456789ab"):
        shutil.rmtree(stray)
    (outside / "notes.txt").unlink()
    assert run_cli("data", "verify", str(outside)).code == 0  # the run's own report/ is no stray


def test_r15_report_out_onto_what_is_not_a_folder_of_its_own(here, run, run_cli):
    """A file, the working folder, a ``latest`` link, a link to a folder, the run's ``report/`` a link:
    one line each, nothing written anywhere, no temporary folder left."""
    (here / "file.txt").write_text("mine\n")
    folder = notes(here)
    (here / "link").symlink_to(folder)
    cases = (
        ("file.txt", "is a file, not a folder"),
        ("file.txt/sub", f"{here / 'file.txt'} is a file, not a folder"),
        (".", "holds the working folder"),
        (str(here), "holds the working folder"),
        ("/", "holds the working folder"),
        ("runs/tiny/sample/latest", "is a symlink"),
        ("link", "is a symlink"),
        ("link/", "is a symlink"),
    )
    before = snapshot(here)
    for out, words in cases:
        refused(run_cli("report", "tiny", "runs_dir=runs", "--out", out), 2, f"--out {Path(out)}", words)
    (run / "report").symlink_to(folder)
    refused(
        run_cli("report", "tiny", "runs_dir=runs"), 2, f"{run / 'report'} is a symlink", "delete the link"
    )
    (run / "report").unlink()
    assert snapshot(here) == before and leftovers(here) == []


def test_r15_a_report_that_fails_while_it_builds_leaves_nothing(here, run, run_cli, monkeypatch):
    from mtsql.app.report import sections

    def broken(arts):
        raise UsageError("a section that cannot be written")

    monkeypatch.setattr(sections, "provenance_section", broken)  # a section every report writes
    before = snapshot(here / "runs")
    refused(run_cli("report", "tiny", "runs_dir=runs", "--out", "new/deeper/report"), 2, "cannot be written")
    refused(run_cli("report", "tiny", "runs_dir=runs"), 2, "cannot be written")
    assert snapshot(here / "runs") == before and not (here / "new").exists()


def test_r16_two_reports_of_one_run_at_once_both_end_well(here, run):
    """A first `mtsql report` is held while it builds; a second one runs to its end meanwhile; then the
    first goes on. Each built in a folder of its own, both succeed, the last one's report is in place,
    nothing else of the run changed."""
    marker, gate = here / "building", here / "gate"
    os.mkfifo(gate)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(SRC),
        "COLUMNS": "200",
        "MTSQL_HOME": str(here / "home"),
    }
    command = ("report", "tiny", "runs_dir=runs")
    before = snapshot(here / "runs")
    first = subprocess.Popen(
        [sys.executable, "-c", HELD_REPORT, str(marker), str(gate), *command],
        cwd=here,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker, first, seconds=120)
        second = subprocess.run(
            [sys.executable, "-m", "mtsql", *command],
            cwd=here,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 0 and "Traceback" not in second.stderr, second.stderr
        with open(gate, "w") as released:  # the first report waits on the other end
            released.write("go")
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0 and "Traceback" not in err, err
    assert "report:" in out and "report:" in second.stdout
    listed = json.loads((run / "report" / MARK).read_text())
    assert set(listed["files"]) == {"report.md"} and listed["folders"] == ["plots"]
    assert "# mtsql report: tiny" in report_text(run / "report")
    after = snapshot(here / "runs")
    assert {k: v for k, v in after.items() if not k.startswith("tiny/report")} == before
    assert leftovers(here / "runs") == []


def test_r16_a_report_killed_outright_leaves_nothing_the_next_does_not_clear(here, run, run_cli):
    """kill -9 while a report builds: the next report removes the dead one's temporary folder (and only
    that), and `data verify` finds nothing in the run that no stage or report wrote."""
    marker, gate = here / "building", here / "gate"
    os.mkfifo(gate)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(SRC),
        "COLUMNS": "200",
        "MTSQL_HOME": str(here / "home"),
    }
    killed = subprocess.Popen(
        [sys.executable, "-c", HELD_REPORT, str(marker), str(gate), "report", "tiny", "runs_dir=runs"],
        cwd=here,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(marker, killed, seconds=120)
    finally:
        killed.kill()
        killed.communicate()
    assert [path.suffix for path in leftovers(here / "runs")] == [".tmp"]
    live = run / f".report.{os.getpid()}.0123abcd.tmp"  # a report still at work (this process) is left alone
    (live / "plots").mkdir(parents=True)
    assert run_cli("report", "tiny", "runs_dir=runs").code == 0
    assert leftovers(here / "runs") == [live]
    shutil.rmtree(live)
    assert run_cli("data", "verify", "tiny", "runs_dir=runs").code == 0


HELD_REPORT = """
import sys
from pathlib import Path

marker, gate = Path(sys.argv.pop(1)), sys.argv.pop(1)
from mtsql.app.report import sections

real = sections.provenance_section  # a section every report writes

def held(*args, **kwargs):
    marker.write_text("building")
    with open(gate) as fifo:  # until the test opens the other end
        fifo.read()
    return real(*args, **kwargs)

sections.provenance_section = held
sys.argv[0] = "mtsql"
from mtsql.app.cli import main
main()
"""


# ---------------------------------------------------------------------------------------------------
# Low


def test_r19_a_run_whose_only_artifact_is_edited_says_why(here, run, run_cli):
    trajectories = (run / "sample" / "latest").resolve() / "trajectories.jsonl"
    trajectories.write_text(trajectories.read_text().replace('"execution": 1', '"execution": 0', 1))
    before = snapshot(here / "runs")
    refused(
        run_cli("report", "tiny", "runs_dir=runs"),
        2,
        "no complete artifacts to report on",
        "1 left out",
        "do not verify",
        str(trajectories),
        "content changed",
    )
    assert snapshot(here / "runs") == before


def test_r30_status_of_what_is_not_a_run_is_one_line(here, run, run_cli):
    for folder, kind in (
        ("runs/tiny/sample", "a label folder"),
        ("runs/tiny/sample/latest", "an artifact folder"),
    ):
        for command in (("status",), ("report",), ("data", "verify")):
            refused(
                run_cli(*command, folder), 2, f"{folder} is {kind} of the run {run.resolve()}", "not a run"
            )
    notes(here)
    refused(run_cli("status", "notes"), 2, "notes holds no artifact, not a run folder")
    refused(
        run_cli("status", "runs"),
        2,
        "runs holds no artifact, not a run folder",
        "holds the runs tiny, y",
        "mtsql status runs/tiny",
    )
    line = refused(run_cli("status", str(here / "nowhere")), 2, "no run")
    assert line.count(str(here / "nowhere")) == 2, line  # the run asked for and where it was looked for: once


def test_a_pipeline_whose_report_folder_holds_a_users_file_is_refused_before_its_first_step(
    here, run, run_cli
):
    """The report is a pipeline's last step: a folder it could not replace is refused before any stage
    runs."""
    (run / "report").mkdir()
    (run / "report" / "mine.md").write_text("the user's own notes\n")
    (here / "p.yaml").write_text(
        "steps:\n  - stage: sample\n    label: s2\n"
        "    overrides: [sample.policy=gold, data.train_limit=1]\n  - stage: report\n"
    )
    before = snapshot(here / "runs")
    refused(
        run_cli("run", "p.yaml", "--config", TINY, "runs_dir=runs"),
        2,
        "mine.md",
        "deletes only what it wrote",
    )
    assert snapshot(here / "runs") == before
