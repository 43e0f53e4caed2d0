"""YAML a user writes (profiles, pipeline files), read strictly: PyYAML's safe loader, except that a
mapping giving one key twice is refused (PyYAML keeps the last value without a word), and every error is
one line naming the file and the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from mtsql.base.errors import UsageError
from mtsql.base.files import read_text

MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *defaults`: the keys it brings in may be overridden


class UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that gives a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first_line.get(key)
            except TypeError:  # an unhashable key: the safe loader's own error names it
                continue
            if earlier is not None:
                raise ConstructorError(
                    problem=f"key {key!r} is given twice (first on line {earlier}); keep one",
                    problem_mark=key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, path: Path | str) -> Any:
    """The data of YAML ``text`` read from ``path``; invalid YAML or a key given twice is a ``UsageError``."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}{where}: invalid YAML ({problem})") from None


def read_yaml(path: Path) -> Any:
    """``parse_yaml`` of a UTF-8 file (an ``OSError`` is left to the caller, who knows what the file is
    for)."""
    return parse_yaml(read_text(path), path)
