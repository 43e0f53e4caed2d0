"""The ``extra`` pass-through both training engines take the same way.

``sft.extra`` (LLaMA-Factory YAML keys) and ``rl.verl.extra`` (verl Hydra overrides) reach the engine
as given, but a key mtsql already sets is an error unless ``extra_override`` allows it: a stray
``learning_rate`` in ``extra`` must not silently replace ``sft.learning_rate``.
"""

from __future__ import annotations

from collections.abc import Iterable

from mtsql.base.errors import UsageError


def clashes(extra_keys: Iterable[str], own_keys: Iterable[str]) -> list[str]:
    """The extra keys that would replace one of ``own_keys``: the same dotted key, or one that
    contains it or lies inside it (``trainer`` clashes with ``trainer.logger`` and the reverse)."""
    own = list(own_keys)

    def inside(key: str, outer: str) -> bool:
        return key == outer or key.startswith(outer + ".")

    return sorted({key for key in extra_keys if any(inside(key, o) or inside(o, key) for o in own)})


def check_extra(extra_keys: Iterable[str], own_keys: Iterable[str], *, setting: str, allowed: bool) -> None:
    """Fail when ``setting`` (``sft.extra`` or ``rl.verl.extra``) would replace keys mtsql sets, unless
    ``allowed`` (its ``extra_override``)."""
    found = clashes(extra_keys, own_keys)
    if found and not allowed:
        raise UsageError(
            f"{setting} sets {', '.join(found)}, which mtsql already sets from its own settings: "
            f"change those settings instead, or set {setting}_override: true to let {setting} win"
        )
