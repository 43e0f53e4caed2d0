"""How a configuration is declared, read and checked; the sections themselves live beside their owners.

A section is a frozen dataclass next to the code that reads it (``core/agent/settings.py`` for ``env``
and ``sql``, ``engines/llamafactory/settings.py`` for ``sft``, ...; ``app/config.py`` composes them
into ``Config`` and is where ``load_config`` lives). This module is the mechanism they share: numeric
bounds (``Range`` and the size aliases), the ``result`` / ``operational`` call of each field,
engine-owned sub-sections, validating what ``config_files.read_raw`` read (YAML profiles with ``base:``
inheritance and dotted overrides) into dataclasses (``build``: an unknown key, a value of the wrong type
or outside its bounds is a ``UsageError`` naming the key, where it came from and the closest valid key
or the bound), and the typed view a stage has of a config (``StageView``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from mtsql.base.config_files import Origins
from mtsql.base.errors import UsageError
from mtsql.base.paths import bird_dir
from mtsql.base.provenance import data_digest

if typing.TYPE_CHECKING:
    from mtsql.base.trackers import TrackerSettings


@dataclass(frozen=True)
class Range:
    """The bounds of a numeric setting, checked when the config loads: ``low`` and ``high`` are
    inclusive unless ``low_open`` / ``high_open``; None is unbounded. ``most``: a ceiling that is no part of
    the setting's meaning, only far above any sensible value (a size with a few zeros too many)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    most: float | None = None

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below and (self.most is None or value <= self.most)

    def broken_by(self, value: float) -> str:
        """The bound ``value`` breaks, as the error says it: ``>= 1``, ``in (0, 1]``, ``<= 1024``."""
        return f"<= {self.most}" if self.most is not None and value > self.most else str(self)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


# Numeric settings with a range (a value outside it is a config error when the config loads).
AtLeast1 = Annotated[int, Range(1)]  # counts, sizes, lengths: 0 would be no work at all
AtLeast0 = Annotated[int, Range(0)]
Positive = Annotated[float, Range(0, low_open=True)]
NonNegative = Annotated[float, Range(0)]
Share = Annotated[float, Range(0, 1, low_open=True)]  # (0, 1]: a probability mass or a memory share
Port = Annotated[int, Range(1, 65535)]

# Sizes a user types, bounded above as well: a few zeros too many is refused in one line when the config
# loads, before anything is allocated or planned. Each ceiling is far above any run mtsql is meant for.
MAX_TOKENS = 2**20  # 1,048,576: above the context of any model (sample.max_new_tokens is also held to the
# model's own context: ``model_context``)
Tokens = Annotated[int, Range(1, most=MAX_TOKENS)]  # token lengths and budgets
Chars = Annotated[int, Range(1, most=10**7)]  # characters of an observation or a result preview
Samples = Annotated[int, Range(1, most=1024)]  # samples (or kept trajectories) per question
Messages = Annotated[int, Range(1, most=1024)]  # assistant messages of one question's episode
Rounds = Annotated[int, Range(1, most=100)]  # self-taught SFT rounds: each is three artifacts
Items = Annotated[
    int, Range(1, most=10**7)
]  # interactions, turns or training steps: the datasets hold ~10**4
Items0 = Annotated[int, Range(0, most=10**7)]
Batch = Annotated[int, Range(1, most=2**16)]  # batch sizes, gradient accumulation, requests in flight
Devices = Annotated[int, Range(1, most=1024)]  # machines, GPUs or processes per machine
Layers = Annotated[int, Range(0, most=1024)]  # decoder layers
Rank = Annotated[int, Range(1, most=2**16)]  # LoRA rank and alpha
Seconds = Annotated[float, Range(0, low_open=True, most=7 * 24 * 3600)]  # timeouts: at most a week


# The fingerprint policy, field by field. A ``result`` setting can change what a stage produces: the
# fingerprint of every stage that reads its section covers it. An ``operational`` setting changes only
# how a stage runs (speed, memory, which machine or port, what it logs, where files are) and is left out,
# so changing it reruns nothing. Every field makes one of the two calls (tests/test_config.py checks).
HASHED = "hashed"


def result(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A setting that can change a stage's output: fingerprints cover it."""
    return field(default=default, metadata={HASHED: True}, **kwargs)


def operational(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A setting that changes how a stage runs, never what it produces: fingerprints leave it out."""
    return field(default=default, metadata={HASHED: False}, **kwargs)


# Engine-owned sub-sections. A section with a ``SELECTOR`` (``sample.backend``, ``rl.engine``) holds one
# sub-section per engine of its family's registry, ``ENGINES`` (``sample.vllm``, ``rl.verl``): each engine
# declares its own settings dataclass next to its code (``engines/*/settings.py``), and the selector's valid
# values are the registry's names. A fingerprint covers the selected engine's sub-section only, so a setting
# of an engine the stage does not run never reruns it.
@dataclass(frozen=True)
class Engine:
    """One line of a family's registry: the engine's settings (``cfg.<section>.<name>``) and its code, a
    module named in full (imported only when the engine is used; the code digest of a stage follows the name)
    and, for a family of classes, the class in it."""

    settings: type
    module: str
    attribute: str | None = None


def engines_of(section: type[EngineOwned]) -> dict[str, type]:
    """The settings class of each engine of a section's family, by name, in registry order."""
    return {name: engine.settings for name, engine in section.ENGINES.items()}


@dataclass(frozen=True)
class EngineOwned:
    """A section whose ``SELECTOR`` field names one of the engines of its family's registry (``ENGINES``);
    ``owned[name]`` is engine ``name``'s settings (its defaults where the config sets none), which the section
    also gives as a typed property, ``cfg.<section>.<engine>``, so that readers and type checkers see its
    fields."""

    SELECTOR: typing.ClassVar[str]
    ENGINES: typing.ClassVar[Mapping[str, Engine]]  # the family's registry
    SELECTOR_EXTRA: typing.ClassVar[tuple[str, ...]] = ()  # values resolved before a stage runs (auto)
    owned: dict[str, Any] = field(default_factory=dict, metadata={HASHED: True}, repr=False)

    def __post_init__(self) -> None:
        given = dict(self.owned)
        object.__setattr__(
            self,
            "owned",
            {name: given.get(name) or settings() for name, settings in engines_of(type(self)).items()},
        )

    def choices(self) -> tuple[str, ...]:
        return (*self.SELECTOR_EXTRA, *engines_of(type(self)))

    def selected(self) -> str | None:
        """The engine the selector names (None while it is still ``auto``)."""
        name = getattr(self, self.SELECTOR)
        return name if name in self.owned else None

    def with_engine(self, name: str, **settings: Any) -> EngineOwned:
        """A copy with some of engine ``name``'s settings changed."""
        return dataclasses.replace(
            self, owned={**self.owned, name: dataclasses.replace(self.owned[name], **settings)}
        )


def hashed_settings(value: Any) -> Any:
    """What fingerprints cover of a section: its ``result`` fields and, where engines own sub-sections,
    the ``result`` fields of the selected engine's only (a top-level setting: its value)."""
    if not dataclasses.is_dataclass(value):
        return to_dict(value)
    covered = {f.name: to_dict(getattr(value, f.name)) for f in _fields(value) if f.metadata[HASHED]}
    if isinstance(value, EngineOwned) and value.selected():
        covered[value.selected()] = hashed_settings(value.owned[value.selected()])
    return covered


def to_dict(cfg: Any) -> Any:
    """A config (or section) as plain YAML-able data: tuples become lists; each engine's sub-section is a
    key of its section (``sample: {backend: vllm, vllm: {...}, ...}``)."""
    if dataclasses.is_dataclass(cfg):
        out = {f.name: to_dict(getattr(cfg, f.name)) for f in _fields(cfg)}
        if isinstance(cfg, EngineOwned):
            out.update((name, to_dict(settings)) for name, settings in cfg.owned.items())
        return out
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    return cfg


def _fields(section: Any) -> tuple[dataclasses.Field, ...]:
    """A section's own settings (an engine-owned section's ``owned`` is its engines' sub-sections)."""
    return tuple(f for f in dataclasses.fields(section) if f.name != "owned")


def replace(cfg: Any, **sections: dict) -> Any:
    """A copy of ``cfg`` with some fields of some sections changed: replace(cfg, sample={"n": 4})."""
    changed = {}
    for name, values in sections.items():
        current = getattr(cfg, name)
        changed[name] = (
            dataclasses.replace(current, **values) if dataclasses.is_dataclass(current) else values
        )
    return dataclasses.replace(cfg, **changed)


NOTHING_REMOVED: Mapping[str, str] = types.MappingProxyType({})


def build(
    cls: type, raw: Any, *, source: str | Origins, prefix: str, removed: Mapping[str, str] = NOTHING_REMOVED
) -> Any:
    """Validate a mapping into dataclass ``cls``; errors name the dotted key and where it came from.
    ``removed``: dotted keys no longer read, with what the error says to use instead."""
    where = source if isinstance(source, Origins) else Origins({}, source)
    name = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UsageError(f"{where.of(name)}: '{name}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in _fields(cls)]
    engines = engines_of(cls) if issubclass(cls, EngineOwned) else {}
    values, owned = {}, {}
    for key, value in raw.items():
        if key in engines:
            owned[key] = build(
                engines[key],
                value if value is not None else {},
                source=where,
                prefix=f"{prefix}{key}.",
                removed=removed,
            )
            continue
        if key not in names:
            names = [*names, *engines]
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            hint = f"; {removed[f'{prefix}{key}']}" if f"{prefix}{key}" in removed else hint
            raise UsageError(f"{where.of(f'{prefix}{key}')}: unknown key '{prefix}{key}'{hint}")
        values[key] = _coerce(hints[key], value, where=where, key=f"{prefix}{key}", removed=removed)
    if not engines:
        return cls(**values)
    section = cls(**values, owned=owned)
    selector = f"{prefix}{cls.SELECTOR}"
    if getattr(section, cls.SELECTOR) not in section.choices():
        raise UsageError(
            f"{where.of(selector)}: '{selector}' must be one of {', '.join(section.choices())}; "
            f"got {getattr(section, cls.SELECTOR)!r}"
        )
    return section


def _coerce(
    tp: Any, value: Any, *, where: Origins, key: str, removed: Mapping[str, str] = NOTHING_REMOVED
) -> Any:
    if dataclasses.is_dataclass(tp):
        return build(tp, value if value is not None else {}, source=where, prefix=f"{key}.", removed=removed)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        value = _coerce(args[0], value, where=where, key=key)
        for bounds in (a for a in tp.__metadata__ if isinstance(a, Range)):
            if not bounds.holds(value):
                raise UsageError(f"{where.of(key)}: '{key}' must be {bounds.broken_by(value)}; got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(
                f"{where.of(key)}: '{key}' must be a mapping, got {value!r} ({type(value).__name__})"
            )
        return dict(value)
    if origin is Literal:
        if value not in args:
            raise UsageError(
                f"{where.of(key)}: '{key}' must be one of {', '.join(map(str, args))}; got {value!r}"
            )
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where=where, key=key)
            except UsageError as exc:
                errors.append(exc)
        raise errors[-1]
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            value = [value]
        inner = args[0] if args else Any
        return tuple(_coerce(inner, v, where=where, key=key) for v in value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # PyYAML reads `1e-6` (no dot) as a string
        with contextlib.suppress(ValueError):  # not a number: the type error below names the key
            value = float(value)
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{where.of(key)}: '{key}' must be a finite number; got {value!r}")
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise UsageError(
            f"{where.of(key)}: '{key}' must be {tp.__name__}, got {value!r} ({type(value).__name__})"
        )
    return value


@dataclass(frozen=True)
class StageView:
    """A stage's typed view of a config. A subclass declares, as typed fields, the sections the stage reads
    (``sample: SampleConfig``, ``seed: int``); a stage gets an instance of it (``of``) and nothing else
    of the config, so what a stage reads and what its fingerprint covers (``hashed``: the ``result``
    settings of those fields) are the same thing by construction, and an undeclared section is an
    ``AttributeError`` at run time and for a type checker. Every view also has where results are stored
    (``run``, ``runs_dir``) and shown (``trackers``), which are not what they are, and ``data_root``, the
    resolved data folder: with a ``data`` field the fingerprint covers what it holds
    (``data_digest``), not where it is; without one it is None."""

    run: str
    runs_dir: str
    trackers: TrackerSettings
    data_root: Path | None

    @classmethod
    def sections(cls) -> tuple[str, ...]:
        """The sections the stage reads: the fields a subclass declares, in their order."""
        own = {f.name for f in dataclasses.fields(StageView)}
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in own)

    @classmethod
    def of(cls, cfg: Any, *, data_root: Path) -> typing.Self:
        """The view of config ``cfg`` (``data_root``: its resolved data folder)."""
        names = cls.sections()
        unknown = set(names) - {f.name for f in dataclasses.fields(cfg)}
        if unknown:
            raise ValueError(f"{cls.__name__} declares unknown config sections {sorted(unknown)}")
        return cls(
            run=cfg.run,
            runs_dir=cfg.runs_dir,
            trackers=cfg.trackers,
            data_root=Path(data_root) if "data" in names else None,
            **{name: getattr(cfg, name) for name in names},
        )

    def replace(self, **sections: dict) -> typing.Self:
        """This view with some fields of its sections changed: ``view.replace(sample={"n": 1})``."""
        return replace(self, **sections)

    def hashed(
        self, sections: typing.Iterable[str] | None = None, *, without: typing.Iterable[str] = ()
    ) -> dict:
        """What a fingerprint covers: the ``result`` settings of the declared sections (or of some of them,
        ``sections``) but the dotted settings ``without`` (that the stage overrides), and, with section
        ``data``, the digest of the data folder's content."""
        names = self.sections() if sections is None else tuple(sections)
        covered = {name: hashed_settings(getattr(self, name)) for name in names}
        for dotted in without:
            section, _, key = dotted.partition(".")
            del covered[section][key]
        if "data" in names and self.data_root is not None:
            covered["data_digest"] = data_digest(self.data_root)
            bird = bird_dir(self.data_root)
            if bird.is_dir() and not bird.resolve().is_relative_to(self.data_root.resolve()):
                covered["bird_digest"] = data_digest(bird)  # BIRD kept elsewhere ($MTSQL_BIRD) counts too
        return covered

    def unhashed(self) -> dict:
        """What the fingerprint leaves out but an artifact should still record: the ``operational``
        settings of the declared sections and, with section ``data``, the data folder's path."""
        kept = {
            name: _operational(getattr(self, name))
            for name in self.sections()
            if dataclasses.is_dataclass(getattr(self, name))
        }
        kept = {name: fields for name, fields in kept.items() if fields}
        if self.data_root is not None:
            kept["data_root"] = str(self.data_root)
        return kept


def _operational(section: Any) -> dict:
    """A section's ``operational`` settings, with those of its selected engine."""
    kept = {f.name: to_dict(getattr(section, f.name)) for f in _fields(section) if not f.metadata[HASHED]}
    if isinstance(section, EngineOwned) and section.selected():
        engine = _operational(section.owned[section.selected()])
        kept.update({section.selected(): engine} if engine else {})
    return kept
