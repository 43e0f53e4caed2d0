"""Bad input, table-driven: every row is a command a user could type that mtsql must refuse.

A refusal is: the row's exit code (2 for usage and input errors), exactly one line of output (on
stderr, no traceback) holding every expected word, and nothing written under the test's folder,
where the runs folder and every file a row prepares live. A new case joins a table with one line:

    override("sample", "sample.n=0", "'sample.n' must be >= 1"),              # a stage, the tiny profile
    Case("verify-not-a-run", ("data", "verify", "{tmp}/notes"), ("no complete artifact",), setup=...),

``{tiny}``, ``{paper}``, ``{runs}`` and ``{tmp}`` in the arguments, the words and the environment
are filled in per test. Another
table gets its own test function that calls :func:`assert_refused` for each of its rows.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mtsql.base.artifacts import ArtifactKey, Store
from mtsql.base.paths import FIXTURE_DATA

from .inprocess import mtsql_in_process

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "configs" / "profiles"
MODELS_HOME = REPO / ".mtsql_home" / "tests"  # as conftest's: nothing here builds a model


@dataclass(frozen=True)
class Case:
    """One refused command: ``args`` after ``mtsql``; ``words`` must all appear in the one output line,
    ``absent`` none of them. ``setup(tmp)`` prepares files first; ``env`` adds environment variables
    ($MTSQL_DATA is unset otherwise: the packaged fixture)."""

    id: str
    args: tuple[str, ...]
    words: tuple[str, ...]
    code: int = 2
    absent: tuple[str, ...] = ()
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)


SMALL = (
    "runs_dir={runs}",
    "model.name=tiny-qwen3",
    "data.train_limit=1",
    "data.eval_limit=1",
    "sample.max_new_tokens=8",
)  # were a bad setting let through, the stage would still end fast


def override(command: str, setting: str, *words: str, blamed: bool = True) -> Case:
    """A stage command on the tiny profile with one bad ``setting``; a setting refused when the config
    loads is ``blamed`` (the error names the override, not the profile file)."""
    return Case(
        f"{command} {setting}",
        (command, "--config", "{tiny}", *SMALL, setting),
        (*([f"override '{setting}'"] if blamed else []), *words),
        absent=("tiny.yaml",) if blamed else (),
    )


def mtsql(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``mtsql`` as a user runs it (wide, no TTY), in this process (tests/inprocess.py)."""
    base = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "MTSQL_HOME": str(MODELS_HOME), "HOME": str(cwd)}
    return mtsql_in_process(args, cwd=cwd, env={**base, **(env or {})})


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (0, 0)
        for p in folder.rglob("*")
    }


def assert_refused(case: Case, tmp_path: Path) -> None:
    """Run ``case`` in an empty folder and check the refusal (see the module docstring)."""
    if case.setup:
        case.setup(tmp_path)
    before = files_under(tmp_path)
    fill = {
        "tiny": str(PROFILES / "tiny.yaml"),
        "paper": str(PROFILES / "paper-qwen3-1.7b.yaml"),
        "runs": str(tmp_path / "runs"),
        "tmp": str(tmp_path),
    }
    result = mtsql(
        [arg.format(**fill) for arg in case.args],
        tmp_path,
        {name: value.format(**fill) for name, value in case.env.items()},
    )
    output = result.stdout + result.stderr
    assert result.returncode == case.code, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    line = output.strip()
    assert line.startswith("error: "), line
    for word in case.words:
        assert word.format(**fill) in line, f"{word!r} not in {line!r}"
    for word in case.absent:
        assert word not in line, f"{word!r} in {line!r}"
    assert files_under(tmp_path) == before, "a refused command wrote files"


# ---------------------------------------------------------------------------------------------
# What the rows prepare


def pipeline_file(*steps: str) -> Callable[[Path], None]:
    """``p.yaml`` with one evaluate step per model reference in ``steps``."""

    def setup(tmp: Path) -> None:
        (tmp / "p.yaml").write_text(
            "steps:\n" + "".join(f"  - stage: evaluate\n    model: {m}\n" for m in steps)
        )

    return setup


def empty_sample(tmp: Path) -> None:
    """A complete sample artifact of run 'tiny' holding no trajectory (what sample.n=0 used to write)."""

    def work(ctx):
        (ctx.out / "trajectories.jsonl").write_text("")
        return {"count": 0}

    Store(tmp / "runs" / "tiny").run(ArtifactKey("sample"), {"n": 0}, {}, work)


def empty_sparc(tmp: Path) -> None:
    """A data folder whose SParC dev split holds no dialogue."""
    (tmp / "data" / "sparc").mkdir(parents=True)
    (tmp / "data" / "sparc" / "dev.json").write_text("[]\n")
    (tmp / "data" / "database").symlink_to(FIXTURE_DATA / "database", target_is_directory=True)


def predictions(tmp: Path) -> None:
    (tmp / "pred.txt").write_text("SELECT 1\n")


def not_a_run(tmp: Path) -> None:
    (tmp / "notes").mkdir()
    (tmp / "notes" / "todo.txt").write_text("a folder of notes, no run\n")


def crashed_run(tmp: Path) -> None:
    partial = tmp / "runs" / "r1" / "sample" / "0123456789ab.partial"
    partial.mkdir(parents=True)
    (partial / "log.txt").write_text("=== sample: attempt started\n")


# ---------------------------------------------------------------------------------------------
# Issue 29, items 1-6 and 11

CASES = [
    # 1. an evaluation of a model no step trains and the run does not have (the dry run too)
    Case(
        "pipeline-eval-sft-without-sft",
        ("run", "p.yaml", "-c", "{tiny}", *SMALL),
        ("steps[0] (evaluate)", "model 'sft'", "sft-iterate"),
        setup=pipeline_file("sft"),
    ),
    Case(
        "pipeline-eval-rl-without-rl-dry",
        ("run", "p.yaml", "-c", "{tiny}", *SMALL, "--dry-run"),
        ("steps[1] (evaluate)", "model 'rl'", "curriculum and rl"),
        setup=pipeline_file("base", "rl"),
    ),
    # 2. a profile meant for the full data refuses the packaged fixture
    Case(
        "paper-profile-on-fixture",
        ("evaluate", "-c", "{paper}", "--model", "base", *SMALL),
        ("data.require_full", "fixture", "MTSQL_DATA"),
    ),
    Case(
        "paper-profile-on-fixture-dry",
        ("sft-iterate", "-c", "{paper}", "runs_dir={runs}", "--dry-run"),
        ("data.require_full", "fixture"),
    ),
    # 3. empty work
    override("sample", "sample.n=0", "'sample.n' must be >= 1; got 0"),
    override("evaluate", "data.eval_datasets=[]", "'data.eval_datasets' needs one or more"),
    override("evaluate", "evaluate.vote=0", "'evaluate.vote' must be >= 1; got 0"),
    override("evaluate", "evaluate.vote=-2", "'evaluate.vote' must be >= 1; got -2"),
    Case(
        "reject-an-empty-sample",
        ("reject", "-c", "{tiny}", *SMALL),
        ("holds no trajectories", "sample"),
        setup=empty_sample,
    ),
    # 4. a setting is honoured or refused
    override("evaluate", "evaluate.limit=3", "unknown key 'evaluate.limit'", "data.eval_limit"),
    override(
        "sft", "sft.freeze_layers=2", "unknown key 'sft.freeze_layers'", "renamed: use 'sft.trainable_layers'"
    ),
    Case(
        "evaluate-pred-reads-data-root",
        ("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--out", "out", "data.root={tmp}/elsewhere"),
        ("{tmp}/elsewhere", "does not exist", "data.root"),
        setup=predictions,
    ),
    # 5. data verify on what is not a run, or holds nothing complete
    Case(
        "verify-not-a-run",
        ("data", "verify", "notes"),
        ("no complete artifact", "not a run folder"),
        setup=not_a_run,
    ),
    Case(
        "verify-only-a-crashed-partial",
        ("data", "verify", "r1", "runs_dir=runs"),
        ("no complete artifact", "sample/0123456789ab.partial"),
        setup=crashed_run,
    ),
    # 6. numbers out of range, refused when the config loads
    override("sample", "sample.batch_size=0", "'sample.batch_size' must be >= 1; got 0"),
    override("evaluate", "data.eval_limit=0", "'data.eval_limit' must be >= 1; got 0"),
    override("sample", "sample.n=-1", "'sample.n' must be >= 1; got -1"),
    override("sample", "env.max_messages=0", "'env.max_messages' must be >= 1; got 0"),
    override("evaluate", "sample.max_new_tokens=0", "'sample.max_new_tokens' must be >= 1; got 0"),
    override("sample", "sample.temperature=-1", "'sample.temperature' must be >= 0; got -1"),
    override("sample", "sample.top_p=5", "'sample.top_p' must be in (0, 1]; got 5"),
    override("sample", "sample.top_p=0", "'sample.top_p' must be in (0, 1]"),
    override("sample", "data.train_limit=0", "'data.train_limit' must be >= 1"),
    override("sample", "sql.timeout_s=0", "'sql.timeout_s' must be > 0"),
    override("sample", "seed=-1", "'seed' must be in [0, 4294967295]"),
    override("sft", "sft.learning_rate=0", "'sft.learning_rate' must be > 0"),
    override("sft", "sft.warmup_ratio=1", "'sft.warmup_ratio' must be in [0, 1)"),
    override("sft", "sft.rounds=0", "'sft.rounds' must be >= 1"),
    override("sft", "sft.master_port=70000", "'sft.master_port' must be in [1, 65535]"),
    override("sft", "sft.node_rank=1", "'sft.node_rank' must be below sft.nnodes=1"),
    override("rl", "rl.temperature=0", "'rl.temperature' must be > 0"),
    override("rl", "rl.gpu_memory_utilization=1.5", "'rl.gpu_memory_utilization' must be in (0, 1]"),
    override("rl", "rl.kl_coef=-0.1", "'rl.kl_coef' must be >= 0"),
    override("reject", "reject.keep_easy=0", "'reject.keep_easy' must be >= 1"),
    override("rl", "curriculum.stages=[]", "'curriculum.stages' needs at least one stage"),
    Case(
        "range-in-a-profile-file",
        ("sample", "-c", "{tmp}/p.yaml", "runs_dir={runs}"),
        ("{tmp}/p.yaml: 'sample.n' must be >= 1; got 0",),
        setup=lambda tmp: (tmp / "p.yaml").write_text("sample:\n  n: 0\n"),
    ),
    # 11. an unknown section given on the command line is blamed on the override, not the profile
    override("sample", "samp.n=3", "unknown key 'samp'", "did you mean 'sample'"),
    # more of the same kind, found while fixing the above
    override("sample", "sample.temperature=inf", "'sample.temperature' must be a finite number"),
    override("sample", "seed=99999999999999999999", "'seed' must be in [0, 4294967295]"),
    override("sample", "run=../elsewhere", "run '../elsewhere' names a folder"),
    Case(
        "label-outside-the-run",
        ("sample", "-c", "{tiny}", *SMALL, "--policy", "gold", "--label", "../x"),
        ("label '../x' names a folder",),
    ),
    override("evaluate", "reject.require=[]", "'reject.require' needs ex, em or both"),
    Case(
        "vote-at-temperature-0",
        ("evaluate", "-c", "{tiny}", *SMALL, "evaluate.vote=3", "sample.temperature=0"),
        ("'evaluate.vote=3' votes over samples", "sample.temperature=0"),
    ),
    Case(
        "sample-policy-option",
        ("sample", "-c", "{tiny}", *SMALL, "--policy", "bogus"),
        ("'sample.policy' must be one of model, gold, gold_with_correction",),
    ),
    Case(
        "sft-iterate-rounds-0",
        ("sft-iterate", "-c", "{tiny}", *SMALL, "--rounds", "0"),
        ("'sft.rounds' must be >= 1",),
    ),
    Case(
        "sft-iterate-rounds-negative",
        ("sft-iterate", "-c", "{tiny}", *SMALL, "--rounds", "-1"),
        ("'sft.rounds' must be >= 1",),
    ),
    Case(
        "pipeline-without-steps",
        ("run", "p.yaml", "-c", "{tiny}", *SMALL),
        ("'steps' list of one or more steps",),
        setup=lambda tmp: (tmp / "p.yaml").write_text("steps: []\n"),
    ),
    Case(
        "evaluate-pred-empty-gold",
        ("evaluate", "--dataset", "sparc", "--pred", "pred.txt", "--gold", "gold.txt", "--out", "out"),
        ("gold.txt holds no interaction",),
        setup=lambda tmp: [predictions(tmp), (tmp / "gold.txt").write_text("")],
    ),
    override("sample", "model.device=gpu", "'model.device' must be cpu, cuda or cuda:N"),
    override("evaluate", "data.eval_split=train", "no official sparc train.json", blamed=False),
    override("sample", "data.train_dataset=spider", "no official spider train.json", blamed=False),
    override("sample", "model.name=no-such-model", "model 'no-such-model' is neither a folder", blamed=False),
    override(
        "evaluate", "model.name=no-such-model", "model 'no-such-model' is neither a folder", blamed=False
    ),
    Case(
        "evaluate-an-empty-split",
        ("evaluate", "-c", "{tiny}", *SMALL, "data.root={tmp}/data", "data.eval_datasets=[sparc]"),
        ("sparc dev", "has no turn to evaluate"),
        setup=empty_sparc,
    ),
    Case(
        "sample-an-empty-split",
        (
            "sample",
            "-c",
            "{tiny}",
            *SMALL,
            "data.root={tmp}/data",
            "data.train_dataset=sparc",
            "data.train_split=dev",
        ),
        ("sparc dev", "has no turn"),
        setup=empty_sparc,
    ),
    Case(
        "data-root-missing",
        ("sample", "-c", "{tiny}", *SMALL),
        ("{tmp}/nothing", "does not exist", "MTSQL_DATA"),
        env={"MTSQL_DATA": "{tmp}/nothing"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_bad_input_is_refused_in_one_line_and_writes_nothing(case, tmp_path):
    assert_refused(case, tmp_path)


def test_the_paper_profile_runs_on_a_data_folder_or_when_told(tmp_path):
    """The refusal is about the fixture only: a data folder, or require_full=false, plans the run."""
    args = [
        "evaluate",
        "-c",
        str(PROFILES / "paper-qwen3-1.7b.yaml"),
        "--model",
        "base",
        "--dry-run",
        f"runs_dir={tmp_path / 'runs'}",
    ]
    told = mtsql([*args, "data.require_full=false"], tmp_path)
    assert told.returncode == 0 and "eval-base" in told.stderr, told.stderr
    for part in ("cosql", "sparc", "database"):  # a data folder that is not the fixture, with the dev splits
        (tmp_path / "data" / part).parent.mkdir(exist_ok=True)
        (tmp_path / "data" / part).symlink_to(FIXTURE_DATA / part, target_is_directory=True)
    elsewhere = mtsql(args, tmp_path, {"MTSQL_DATA": str(tmp_path / "data")})
    assert elsewhere.returncode == 0 and "eval-base" in elsewhere.stderr, elsewhere.stderr
    assert not (tmp_path / "runs").exists()
