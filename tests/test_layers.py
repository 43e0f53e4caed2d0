"""The import graph points one way: core, generation and engines never import stages or the joins
above them, and stages do not import each other (they meet through artifacts)."""

import ast
from pathlib import Path

import mtsql

ROOT = Path(mtsql.__file__).parent
UPPER = ("mtsql.__main__", "mtsql.cli", "mtsql.pipeline", "mtsql.runner", "mtsql.report", "mtsql.status", "mtsql.stages")


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.startswith("mtsql")}


def is_upper(name: str) -> bool:
    return any(name == u or name.startswith(u + ".") for u in UPPER)


def test_nothing_below_the_stages_imports_them_or_the_joins():
    wrong = {name: sorted(i for i in imports(path) if is_upper(i))
             for name, path in modules().items() if not is_upper(name)}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_stages_do_not_import_each_other():
    stages = {name: path for name, path in modules().items() if name.startswith("mtsql.stages.")}
    wrong = {name: sorted(i for i in imports(path) if i.startswith("mtsql.stages.") and i != name)
             for name, path in stages.items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def below(name: str, prefixes: tuple[str, ...]) -> list[str]:
    """The mtsql modules ``name`` imports that are, or lie inside, one of ``prefixes``."""
    return sorted(i for i in imports(modules()[name]) if any(i == p or i.startswith(p + ".") for p in prefixes))


def test_the_sql_layer_reads_no_config_or_data_and_the_config_no_sql():
    """sql/ scores files given their paths (the data folder's gold is found by evaluate_files.py), and
    the config checks curriculum labels against slices.py, which sql/ imports too."""
    wrong = {name: below(name, ("mtsql.config", "mtsql.data")) for name in modules()
             if name == "mtsql.sql" or name.startswith("mtsql.sql.")}
    wrong["mtsql.config"] = below("mtsql.config", ("mtsql.sql",))
    assert {k: v for k, v in wrong.items() if v} == {}
