"""A profile and its overrides read into one mapping, with where each key came from.

A YAML profile may inherit another (``base: path``, relative to it); ``a.b=value`` overrides go on top.
``Origins`` names the file or override of each dotted key, so a config error can say where to look.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from mtsql.base.errors import UsageError
from mtsql.base.user_yaml import parse_yaml, read_yaml


class Origins:
    """Where each dotted key's value came from (a file or an override), for error messages."""

    def __init__(self, origins: dict[str, str], default: str):
        self.origins, self.default = origins, default

    def of(self, key: str) -> str:
        """The origin of ``key``, of the nearest section above it, else of the last key set below it
        (an unknown section such as ``samp`` comes from wherever ``samp.n`` was set)."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found:
                return found
        below = [origin for dotted, origin in self.origins.items() if dotted.startswith(f"{key}.")]
        return below[-1] if below else self.default


def read_raw(path: str | Path | None, overrides: typing.Iterable[str]) -> tuple[dict, Origins]:
    """A YAML profile (with ``base:`` inheritance) and ``a.b=value`` overrides as one mapping, and where
    each of its keys came from: the file that set it, or the override."""
    raw: dict = {}
    origins: dict[str, str] = {}
    if path is not None:
        raw = _read_yaml_chain(Path(path), (), origins)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"override {item!r}: expected key.sub=value")
        value = parse_yaml(text, f"override {item!r}") if text.strip() else None
        _set_dotted(raw, key.strip().split("."), value)
        origins[key.strip()] = f"override {item!r}"
    return raw, Origins(origins, str(path) if path is not None else "<defaults>")


def _read_yaml_chain(path: Path, seen: tuple[Path, ...], origins: dict[str, str]) -> dict:
    path = path.expanduser()
    if path.resolve() in seen:
        raise UsageError(f"{path}: 'base:' chain loops back to itself")
    try:
        data = read_yaml(path) or {}
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is not None and not isinstance(base, str):
        raise UsageError(
            f"{path}: 'base' names one profile to inherit from (a path relative to this file); "
            f"got {base!r} ({type(base).__name__})"
        )
    parent = {} if base is None else _read_yaml_chain(path.parent / base, seen + (path.resolve(),), origins)
    origins.update(dict.fromkeys(_leaf_keys(data), str(path)))
    return _deep_merge(parent, data)


def _leaf_keys(tree: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        keys += _leaf_keys(value, f"{dotted}.") if isinstance(value, dict) and value else [dotted]
    return keys


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _set_dotted(tree: dict, keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        node = tree.get(key)
        if not isinstance(node, dict):
            node = tree[key] = {}
        tree = node
    tree[keys[-1]] = value
