"""The import graph points one way, down the layer folders of src/mtsql (docs/architecture.md):
base (the config mechanism, errors, files, the artifact store) < core (data, sql, agent, rewards, scored
rows) < engines (backends, rollout, trainers, verl, LLaMA-Factory, models) < stages < app (cli, pipeline,
runner, status, report). Stages do not import each other (they meet through artifacts). Inside core
the order is ``CORE_ORDER``."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import mtsql

from .source_code import source_nodes

ROOT = Path(mtsql.__file__).parent
SRC = ROOT.parent
LAYERS = ("base", "core", "engines", "stages", "app")
CORE_ORDER = (
    "sql",
    "data",
    "agent",
    "rewards",
    "trajectories",
    "measures",
    "chat_format",
    "episode_tokens",
    "evaluation_files",
    "bird_evaluation",
    "results",
)  # the folders and modules of core/, lowest first


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> set[str]:
    """The mtsql modules a module imports: at its top, inside functions, and by name in a string (a
    registry's ``"mtsql.engines.backends.hf"``, imported with importlib when it is used)."""
    names = set()
    for node in source_nodes(path):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in named_modules():
            names.add(node.value)
    return {n for n in names if n.startswith("mtsql")}


@functools.cache
def named_modules() -> frozenset[str]:
    """The modules a string can name (the package itself, ``mtsql``, is also a word in log keys)."""
    return frozenset(modules()) - {"mtsql"}


def layer(name: str) -> int:
    """The rank of a module's layer folder (the package's face, which defines nothing: below them all;
    ``mtsql.__main__``: above them all)."""
    if name == "mtsql":
        return -1
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_every_module_lives_in_a_layer_folder():
    loose = sorted(name for name in modules() if layer(name) == len(LAYERS) and name != "mtsql.__main__")
    assert loose == []


def test_no_import_runs_up_a_layer():
    wrong = {
        name: sorted(i for i in imports(path) if layer(i) > layer(name)) for name, path in modules().items()
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_stages_do_not_import_each_other():
    stages = {name: path for name, path in modules().items() if name.startswith("mtsql.stages.")}
    wrong = {
        name: sorted(i for i in imports(path) if i.startswith("mtsql.stages.") and i != name)
        for name, path in stages.items()
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def below(name: str, prefixes: tuple[str, ...]) -> list[str]:
    """The mtsql modules ``name`` imports that are, or lie inside, one of ``prefixes``."""
    return sorted(
        i for i in imports(modules()[name]) if any(i == p or i.startswith(p + ".") for p in prefixes)
    )


def test_the_sql_layer_reads_no_config_or_data_and_the_config_no_sql():
    """sql/ scores files given their paths (the data folder's gold is found by evaluate_files.py), and
    the config checks curriculum labels against slices.py, which sql/ imports too."""
    wrong = {
        name: below(name, ("mtsql.base.config", "mtsql.core.data"))
        for name in modules()
        if name == "mtsql.core.sql" or name.startswith("mtsql.core.sql.")
    }
    wrong["mtsql.base.config"] = below("mtsql.base.config", ("mtsql.core.sql",))
    assert {k: v for k, v in wrong.items() if v} == {}


def core_rank(name: str) -> int:
    """The rank in ``CORE_ORDER`` of a module inside core (the folder or module it lies in); -1 for
    ``mtsql.core`` itself, which defines nothing."""
    parts = name.split(".")
    return CORE_ORDER.index(parts[2]) if len(parts) > 2 else -1


def test_core_has_no_folder_or_module_outside_its_order():
    units = {name.split(".")[2] for name in modules() if name.startswith("mtsql.core.")}
    assert sorted(units - set(CORE_ORDER)) == []


def test_no_import_inside_core_runs_up_its_order():
    core = {name: path for name, path in modules().items() if name.startswith("mtsql.core.")}
    wrong = {
        name: sorted(
            i for i in imports(path) if i.startswith("mtsql.core.") and core_rank(i) > core_rank(name)
        )
        for name, path in core.items()
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def section_classes(path: Path) -> list[str]:
    """The config sections a module defines: classes with fields declared ``result(...)`` or
    ``operational(...)``."""

    def declares_settings(cls: ast.ClassDef) -> bool:
        return any(
            isinstance(s, ast.AnnAssign)
            and isinstance(s.value, ast.Call)
            and getattr(s.value.func, "id", None) in ("result", "operational")
            for s in cls.body
        )

    return sorted(
        node.name for node in source_nodes(path) if isinstance(node, ast.ClassDef) and declares_settings(node)
    )


def test_base_keeps_the_config_mechanism_and_no_section():
    """Each section lives beside the code that reads it (#49): base/config.py is the mechanism only, and no
    section is defined under base (the trackers' schema is composed with ``run`` in app/config.py;
    base/trackers.py reads it through a Protocol)."""
    assert len((ROOT / "base" / "config.py").read_text().splitlines()) < 450
    sections = {
        name: section_classes(path) for name, path in modules().items() if name.startswith("mtsql.base.")
    }
    assert {name: found for name, found in sections.items() if found} == {}
    assert section_classes(ROOT / "app" / "config.py") == ["Config", "TrackersConfig"], (
        "the check sees sections"
    )


def test_base_imports_nothing_above_it_even_at_run_time():
    """Importing every module of base, in a fresh interpreter, loads no module of core, engines, stages or app
    (test_no_import_runs_up_a_layer reads the source; this catches what importing does besides)."""
    base = sorted(name for name in modules() if name.startswith("mtsql.base"))
    code = (
        f"import importlib, sys; [importlib.import_module(m) for m in {base!r}]; "
        "print(' '.join(sorted(m for m in sys.modules "
        "if m.startswith('mtsql.') and not m.startswith('mtsql.base'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert loaded == []


def test_every_stage_has_every_hook_and_the_runner_asks_no_module_what_it_has():
    """Stages follow ``runner.Stage``: a hook a stage has not is None, so the runner (and a type checker)
    reads hooks as attributes instead of probing modules with ``hasattr`` (#49)."""
    from mtsql.app.runner import STAGES, Stage

    assert [name for name, module in STAGES.items() if not isinstance(module, Stage)] == []
    hooks = {name for name in Stage.__annotations__ if not name.startswith("__")}
    assert hooks == {"VIEW", "INPUTS", "plan", "hashed", "engine_identity", "check"}
    assert "hasattr(" not in (ROOT / "app" / "runner.py").read_text()
