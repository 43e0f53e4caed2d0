"""Nothing unbounded, a pipeline checked whole (issue 50): one test per row, each a command a user types,
refused in one line with exit code 2 and nothing written (``test_bad_input.assert_refused``).

Rows 4, 5 and 12: every size has an upper bound, checked when the config loads (one line naming the key,
the value and the bound), and ``sample.max_new_tokens`` is held to the model's context. Rows 13 and 27: a
profile's ``base:`` is one file, and a YAML file that gives a key twice is refused. Rows 9, 17 and 29: a
pipeline's steps are all checked before the first runs (each step's overrides, distinct labels, no step
that leaves the run). A command that would have allocated or run before the fix carries a timeout: it
must be refused before it starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.engines.models import registry

from .test_bad_input import SMALL, Case, assert_refused, mtsql

TINY = ("--config", "{tiny}", *SMALL)


def write(name: str, text: str):
    """A setup that writes ``text`` to ``name`` in the test's folder."""

    def setup(tmp: Path) -> None:
        (tmp / name).write_text(text)

    return setup


def pipeline(*steps: str):
    """A setup that writes ``p.yaml`` with these steps (each the YAML of one list item, without its dash)."""
    return write(
        "p.yaml", "steps:\n" + "".join("  - " + step.replace("\n", "\n    ") + "\n" for step in steps)
    )


def model_folder(context: int):
    """A setup that makes ``model/``: a model folder whose config.json says its context."""

    def setup(tmp: Path) -> None:
        (tmp / "model").mkdir()
        (tmp / "model" / "config.json").write_text(
            json.dumps({"model_type": "qwen3", "max_position_embeddings": context})
        )

    return setup


GOLD = "stage: sample\noverrides: [sample.policy=gold]"  # a step that would run at once, without a model


# ---------------------------------------------------------------------------------------------
# Rows 4 and 5: rounds and samples without end, refused before anything is planned or allocated

PROMPT = [
    Case(
        "r4 sft-iterate --rounds",
        ("sft-iterate", *TINY, "--rounds", "1000000000", "--dry-run"),
        ("'sft.rounds'", "1000000000", "<= 100"),
    ),
    Case(
        "r4 pipeline sft.rounds",
        ("run", "p.yaml", *TINY),
        ("steps[0] (sft-iterate)", "'sft.rounds'", "1000000000", "<= 100"),
        setup=pipeline("stage: sft-iterate\noverrides: [sft.rounds=1000000000, sft.first_round_policy=gold]"),
    ),
    Case(
        "r5 sample.n",
        ("sample", *TINY, "sample.policy=gold", "sample.n=1000000000"),
        ("'sample.n'", "1000000000", "<= 1024"),
    ),
    Case(
        "r5 sample.n dry run",
        ("sample", *TINY, "sample.n=1000000000", "--dry-run"),
        ("'sample.n'", "1000000000", "<= 1024"),
    ),
]


@pytest.mark.timeout(60)  # before the fix, each ran for minutes (rounds planned, samples allocated)
@pytest.mark.parametrize("case", PROMPT, ids=lambda c: c.id)
def test_rows_4_5_rounds_and_samples_are_bounded_before_anything_starts(case, tmp_path):
    assert_refused(case, tmp_path)


# ---------------------------------------------------------------------------------------------
# Row 12 and the other sizes: an absolute ceiling, and the model's context for what a message generates

SIZES = [
    Case(
        "r12 max_new_tokens absurd",
        ("sample", *TINY, "sample.max_new_tokens=10000000000000", "--dry-run"),
        ("'sample.max_new_tokens'", "10000000000000", "1048576"),
    ),
    Case(
        "r12 max_new_tokens past the alias's context",
        ("sample", *TINY, "sample.max_new_tokens=200000", "--dry-run"),
        ("'sample.max_new_tokens'", "200000", "<= 32768", "tiny-qwen3", "max_position_embeddings"),
    ),
    Case(
        "r12 max_new_tokens past the tiny profile's model's context",
        ("sample", "--config", "{tiny}", "runs_dir={runs}", "sample.max_new_tokens=9000", "--dry-run"),
        ("'sample.max_new_tokens'", "9000", "<= 8192", "smollm2-135m"),
    ),
    Case(
        "r12 max_new_tokens past a folder's context",
        ("sample", *TINY, "model.name=model", "sample.max_new_tokens=5000", "--dry-run"),
        ("'sample.max_new_tokens'", "5000", "<= 4096", "max_position_embeddings"),
        setup=model_folder(4096),
    ),
    Case(
        "r12 rl.max_message_tokens past the context",
        ("rl", *TINY, "rl.max_message_tokens=40000", "--dry-run"),
        ("'rl.max_message_tokens'", "40000", "<= 32768"),
    ),
    *(
        Case(f"ceiling {setting}", ("config", "show", "--config", "{tiny}", setting), words)
        for setting, words in (
            ("rl.n=100000", ("'rl.n'", "100000", "<= 1024")),
            ("evaluate.vote=5000", ("'evaluate.vote'", "5000", "<= 1024")),
            ("evaluate.samples=5000", ("'evaluate.samples'", "5000", "<= 1024")),
            ("sample.batch_size=100000000", ("'sample.batch_size'", "100000000", "<= 65536")),
            ("rl.batch_size=100000000", ("'rl.batch_size'", "100000000")),
            ("sft.grad_accum=100000000", ("'sft.grad_accum'", "100000000")),
            ("data.eval_limit=1000000000000", ("'data.eval_limit'", "1000000000000", "<= 10000000")),
            ("data.train_limit=1000000000000", ("'data.train_limit'", "1000000000000")),
            ("env.max_messages=1000000", ("'env.max_messages'", "1000000", "<= 1024")),
            ("rl.max_response_len=100000000", ("'rl.max_response_len'", "100000000", "1048576")),
            ("sft.cutoff_len=100000000", ("'sft.cutoff_len'", "100000000", "1048576")),
            ("sql.timeout_s=1e12", ("'sql.timeout_s'", "604800")),
            ("sample.openai.concurrency=100000", ("'sample.openai.concurrency'", "100000", "<= 1024")),
            ("rl.verl.n_gpus_per_node=100000", ("'rl.verl.n_gpus_per_node'", "100000")),
            ("env.observation_chars=5", ("'env.observation_chars'", "5", ">= 100")),
        )
    ),
]


@pytest.mark.parametrize("case", SIZES, ids=lambda c: c.id)
def test_row_12_every_size_has_an_upper_bound(case, tmp_path):
    assert_refused(case, tmp_path)


def test_row_12_a_size_at_its_bound_is_accepted(tmp_path):
    model_folder(4096)(tmp_path)
    shown = mtsql(
        [
            "config",
            "show",
            "model.name=model",
            "sample.max_new_tokens=4096",
            "sft.rounds=100",
            "sample.n=1024",
        ],
        tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert "max_new_tokens: 4096" in shown.stdout and "rounds: 100" in shown.stdout


def test_row_12_a_rope_scaling_factor_stretches_the_context(tmp_path):
    """A config.json with YaRN scaling (as Qwen3's model card suggests for long inputs) holds factor
    times the original context, as vLLM derives it: a budget past max_position_embeddings but within that
    is fine."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(
        json.dumps(
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            }
        )
    )
    assert registry.model_context(str(tmp_path / "model")) == 131072
    shown = mtsql(["config", "show", "model.name=model", "sample.max_new_tokens=100000"], tmp_path)
    assert shown.returncode == 0, shown.stderr


def test_row_12_a_built_alias_has_the_context_its_recipe_declares(tiny_qwen3):
    """The context the config reads before an alias is built is the one the built folder says."""
    config = json.loads((tiny_qwen3 / "config.json").read_text())
    assert config["max_position_embeddings"] == registry.model_context("tiny-qwen3") == 32768


# ---------------------------------------------------------------------------------------------
# Rows 13 and 27: a profile's base is one file; a key given twice is refused

PROFILE_BASE = "sample:\n  n: 2\n"

YAML = [
    Case(
        "r13 base as a list",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        ("p.yaml", "'base'", "list"),
        setup=lambda tmp: (
            write("a.yaml", PROFILE_BASE)(tmp),
            write("p.yaml", "base: [a.yaml, a.yaml]\n")(tmp),
        ),
    ),
    Case(
        "r13 base as a mapping",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        ("p.yaml", "'base'", "dict"),
        setup=write("p.yaml", "base: {file: a.yaml}\n"),
    ),
    Case(
        "r27 key twice in a section",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        ("p.yaml line 4", "'n'", "twice", "line 2"),
        setup=write("p.yaml", "sample:\n  n: 2\n  top_p: 0.9\n  n: 4\n"),
    ),
    Case(
        "r27 section twice",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        ("p.yaml line 3", "'sample'", "twice", "line 1"),
        setup=write("p.yaml", "sample:\n  n: 2\nsample:\n  n: 4\n"),
    ),
    Case(
        "r27 key twice in a flow mapping",
        ("config", "show", "--config", "{tmp}/p.yaml"),
        ("p.yaml line 1", "'n'", "twice"),
        setup=write("p.yaml", "sample: {n: 2, n: 4}\n"),
    ),
    Case(
        "r27 key twice in a base profile",
        ("sample", "--config", "{tmp}/p.yaml", "--dry-run"),
        ("a.yaml line 3", "'n'", "twice"),
        setup=lambda tmp: (
            write("a.yaml", "sample:\n  n: 2\n  n: 3\n")(tmp),
            write("p.yaml", "base: a.yaml\n")(tmp),
        ),
    ),
    Case(
        "r27 key twice in an override's mapping",
        ("config", "show", "sample={{n: 2, n: 3}}"),
        ("override 'sample={{n: 2, n: 3}}'", "'n'", "twice"),
    ),  # {{ }}: braces, as format() reads them
    Case(
        "r27 key twice in a pipeline step",
        ("run", "p.yaml", *TINY, "--dry-run"),
        ("p.yaml line 4", "'stage'", "twice"),
        setup=write("p.yaml", "steps:\n  - stage: sample\n    label: a\n    stage: evaluate\n"),
    ),
]


@pytest.mark.parametrize("case", YAML, ids=lambda c: c.id)
def test_rows_13_27_profile_yaml_is_read_strictly(case, tmp_path):
    assert_refused(case, tmp_path)


def test_row_27_a_merge_key_may_still_be_overridden(tmp_path):
    """``<<: *sample`` brings keys in that the mapping itself may set again: that is no key given twice."""
    write("p.yaml", "sample: &sample {n: 2, temperature: 0.5}\nrl:\n  <<: *sample\n  n: 4\n")(tmp_path)
    shown = mtsql(["config", "show", "--config", "p.yaml"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    rl = shown.stdout[shown.stdout.index("\nrl:") :]
    assert "  n: 4\n" in rl and "  temperature: 0.5\n" in rl


# ---------------------------------------------------------------------------------------------
# Rows 9, 17 and 29: a pipeline is checked whole before its first step runs

PIPELINES = [
    Case(
        "r9 two steps of one label",
        ("run", "p.yaml", *TINY),
        ("steps[1] (sample)", "'s'", "steps[0]", "label of its own"),
        setup=pipeline(
            f"{GOLD}\nlabel: s", "stage: sample\nlabel: s\noverrides: [sample.policy=gold, sample.n=2]"
        ),
    ),
    Case(
        "r9 two evaluations of one label",
        ("run", "p.yaml", *TINY),
        ("steps[2] (evaluate)", "'eval-x'", "steps[0]"),
        setup=pipeline(
            "stage: evaluate\nlabel: eval-x\nmodel: base",
            GOLD,
            "stage: evaluate\nlabel: eval-x\nmodel: base\noverrides: [env.max_messages=1]",
        ),
    ),
    Case(
        "r9 a label that a later sft-iterate writes",
        ("run", "p.yaml", *TINY, "--dry-run"),
        ("steps[1] (sft-iterate)", "'sample-r1'", "steps[0]"),
        setup=pipeline(f"{GOLD}\nlabel: sample-r1", "stage: sft-iterate"),
    ),
    Case(
        "r17 a later step's invalid override",
        ("run", "p.yaml", *TINY),
        ("steps[2] (sample)", "override 'sample.n=0'", "'sample.n'"),
        setup=pipeline(GOLD, "stage: reject", "stage: sample\nlabel: more\noverrides: [sample.n=0]"),
    ),
    Case(
        "r17 a later step's unknown key",
        ("run", "p.yaml", *TINY),
        ("steps[1] (evaluate)", "unknown key 'sample.nn'"),
        setup=pipeline(GOLD, "stage: evaluate\nmodel: base\noverrides: [sample.nn=2]"),
    ),
    Case(
        "r17 a later step's label that is a path",
        ("run", "p.yaml", *TINY),
        ("steps[1] (sample)", "../elsewhere"),
        setup=pipeline(GOLD, "stage: sample\nlabel: ../elsewhere"),
    ),
    Case(
        "r17 a later step's reserved label",
        ("run", "p.yaml", *TINY),
        ("steps[1] (evaluate)", "'report'", "reserved"),
        setup=pipeline(GOLD, "stage: evaluate\nmodel: base\nlabel: report"),
    ),
    Case(
        "r17 an rl step without a curriculum step",
        ("run", "p.yaml", *TINY),
        ("steps[1] (rl)", "curriculum step before it"),
        setup=pipeline(GOLD, "stage: rl"),
    ),
    Case(
        "r29 a step's run=",
        ("run", "p.yaml", *TINY),
        ("steps[1] (evaluate)", "'run=elsewhere'", "outside run 'tiny'"),
        setup=pipeline(GOLD, "stage: evaluate\nmodel: base\noverrides: [run=elsewhere]"),
    ),
    Case(
        "r29 a step's runs_dir=",
        ("run", "p.yaml", *TINY),
        ("steps[1] (sample)", "'runs_dir=other'", "outside run"),
        setup=pipeline(GOLD, "stage: sample\nlabel: two\noverrides: [runs_dir=other, sample.policy=gold]"),
    ),
]


@pytest.mark.timeout(120)  # before the fix, the first steps ran (and wrote) before the refusal
@pytest.mark.parametrize("case", PIPELINES, ids=lambda c: c.id)
def test_rows_9_17_29_a_pipeline_is_checked_whole_before_it_starts(case, tmp_path):
    assert_refused(case, tmp_path)


def two_train_splits(tmp: Path) -> None:
    """``data/``: the packaged data, with SParC's dev split standing in for a train split of its own, so that
    ``data.per_dataset`` makes two runs (tiny-cosql, then tiny-sparc); and ``p.yaml``."""
    (tmp / "data" / "sparc").mkdir(parents=True)
    for entry in FIXTURE_DATA.iterdir():
        if entry.name != "sparc":
            (tmp / "data" / entry.name).symlink_to(entry)
    for entry in (FIXTURE_DATA / "sparc").iterdir():
        (tmp / "data" / "sparc" / entry.name).symlink_to(entry)
    (tmp / "data" / "sparc" / "train.json").symlink_to(FIXTURE_DATA / "sparc" / "dev.json")
    pipeline(GOLD, "stage: sample\nlabel: more\noverrides: [sample.n=0]")(tmp)


@pytest.mark.timeout(120)
def test_row_17_every_run_of_a_per_dataset_pipeline_is_checked_before_the_first(tmp_path):
    """With data.per_dataset, the first run's steps used to run before a bad step was met."""
    assert_refused(
        Case(
            "r17 per dataset",
            (
                "run",
                "p.yaml",
                *TINY,
                "data.root={tmp}/data",
                "data.per_dataset=true",
                "data.eval_datasets=[cosql, sparc]",
            ),
            ("steps[1] (sample)", "override 'sample.n=0'"),
            setup=two_train_splits,
        ),
        tmp_path,
    )
