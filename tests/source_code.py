"""mtsql's own source, parsed once per test process, for the tests that read the code itself (layers,
declared dependencies, the backend interface, one dtype resolver)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import mtsql

SRC = Path(mtsql.__file__).parent


@functools.cache
def source_nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of module ``path`` (``ast.walk`` order)."""
    return tuple(ast.walk(ast.parse(path.read_text())))


def modules(under: Path = SRC) -> list[Path]:
    """The .py files under ``under`` (default: the whole package), sorted."""
    return sorted(under.rglob("*.py"))
