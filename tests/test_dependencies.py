"""What pyproject.toml declares is what src/ imports, and `pip install mtsql` (no extra) is enough for the
light commands: scoring a prediction file, exporting a run, and evaluating a model behind a chat API, in a
process where importing any package of the ``engines`` extra fails."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA

from .backends.test_chat import Server, completion
from .inprocess import steps_in_one_process
from .source_code import modules, source_nodes

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "mtsql"
tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# Declared, needed at run time, and imported by the engines' libraries rather than by mtsql: tiktoken
# (transformers builds the tiny Qwen3 tokenizer from tiktoken ranks with it) and cachetools (verl's agent
# loop imports it without declaring it).
NOT_IMPORTED = {"tiktoken", "cachetools"}
# The import names of the engines extra's distributions, refused in the light process.
ENGINE_IMPORTS = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "huggingface_hub": "huggingface_hub",
    "llamafactory": "llamafactory",
    "peft": "peft",
    "verl": "verl",
    "omegaconf": "omegaconf",
    "hydra-core": "hydra",
    "cachetools": "cachetools",
    "gguf": "gguf",
    "tiktoken": "tiktoken",
    "psutil": "psutil",
}


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_distributions() -> dict[str, set[str]]:
    """distribution -> the src files that import one of its modules (top level or inside a function)."""
    owners = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for path in modules(SRC):
        for node in source_nodes(path):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("mtsql", "__future__"):
                    continue
                for dist in owners.get(top, [top]):
                    found.setdefault(name_of(dist), set()).add(str(path.relative_to(SRC)))
    return found


def declared(*extras: str) -> set[str]:
    lists = [PROJECT["dependencies"], *(PROJECT["optional-dependencies"][e] for e in extras)]
    return {name_of(r) for requirements in lists for r in requirements if not r.startswith("mtsql")}


def test_every_package_src_imports_is_declared_and_every_declared_one_is_imported():
    imported = imported_distributions()
    undeclared = {
        dist: sorted(files)
        for dist, files in imported.items()
        if dist not in declared("engines", "gpu", "trackers")
    }
    assert undeclared == {}, "imported by src/ but not declared in pyproject.toml"
    unused = declared("engines") - set(imported) - NOT_IMPORTED
    assert unused == set(), "declared in pyproject.toml but imported nowhere in src/"
    assert {name_of(name) for name in ENGINE_IMPORTS} == declared("engines") - declared()


def test_the_scoring_tokenizers_are_pinned_exactly():
    pins = {name_of(r): r for r in PROJECT["dependencies"]}
    assert re.fullmatch(r"nltk==[\d.]+", pins["nltk"]) and re.fullmatch(r"sqlparse==[\d.]+", pins["sqlparse"])
    assert importlib.metadata.version("nltk") == pins["nltk"].split("==")[1]


REFUSE = """
import sys
REFUSED = set({names!r})
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            print("REFUSED " + name, file=sys.stderr)
            raise ImportError("an engine package in the light install: " + name)
sys.meta_path.insert(0, Refuse())
"""


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> tuple[Path, Server]:
    """The light commands, each run once in one process where every package of the engines extra fails to
    import: scoring the gold queries as a prediction file, exporting a run, and the whole evaluate stage
    (rollouts, tools, official scoring) against a chat API that always answers."""
    from .report.test_export import with_items

    here = tmp_path_factory.mktemp("light")
    gold = (FIXTURE_DATA / "sparc" / "dev_gold.txt").read_text().splitlines()
    (here / "pred.txt").write_text("\n".join(line.split("\t")[0] for line in gold) + "\n")
    run, _ = with_items(here / "runs" / "tiny")
    server = Server(
        [(200, completion("<answer_sql>SELECT count(*) FROM singer"))], models=("gpt-test",), key=None
    )
    steps = {
        "score": ("evaluate", "--dataset", "sparc", "--pred", here / "pred.txt", "--out", here / "scored"),
        "export": ("export", run, "--format", "csv"),
        "chat": (
            "evaluate",
            "--config",
            REPO / "configs" / "profiles" / "tiny.yaml",
            f"runs_dir={here / 'chat'}",
            "data.eval_limit=1",
            "sample.backend=chat",
            f"sample.chat.base_url={server.url}",
            "sample.chat.model=gpt-test",
            "sample.chat.api_key_env=null",
        ),
    }
    argv = steps_in_one_process(
        {name: [str(a) for a in args] for name, args in steps.items()},
        prelude=REFUSE.format(names=sorted(set(ENGINE_IMPORTS.values()))),
    )
    try:
        done = subprocess.run(
            argv,
            cwd=here,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "MTSQL_DATA": str(FIXTURE_DATA), "COLUMNS": "200"},
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    return here, server


def light_step(here: Path, name: str) -> None:
    """Assert that step ``name`` of ``light`` ended well without importing an engine package."""
    code, err = int((here / f"{name}.rc").read_text()), (here / f"{name}.err").read_text()
    assert code == 0 and "REFUSED" not in err, err


def test_scoring_a_prediction_file_and_exporting_need_no_engine(light):
    here, _ = light
    light_step(here, "score")
    summary = json.loads((here / "scored" / "summary.json").read_text())
    assert summary["exact"]["question"]["accuracy"] == 1.0
    light_step(here, "export")
    assert (here / "runs" / "tiny" / "export" / "items.csv").read_text().count("\n") == 4  # header, 3 items


def test_a_chat_api_evaluation_needs_no_engine(light):
    here, server = light
    light_step(here, "chat")
    metrics = json.loads(next((here / "chat").rglob("metrics.json")).read_text())
    assert metrics["model_name"] == "gpt-test" and metrics["usage"]["requests"] == len(server.requests) > 0
    assert {name: block["turns"] > 0 for name, block in metrics["datasets"].items()} == {
        "cosql": True,
        "sparc": True,
    }
