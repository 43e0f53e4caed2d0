"""Datasets: SParC, CoSQL and Spider turns from a data folder of the shared layout, and BIRD's from
its own folder (:mod:`mtsql.core.data.bird`).

    turns = load_turns("cosql", "dev")            # official dev.json, gold-file order
    turns = load_turns("cosql", "train", limit=50)  # official train.json, else the raw dialogues
    turns = load_turns("spider", "dev")           # every question an interaction of one turn
    turns = load_turns("bird", "dev")             # <data>/bird/dev (or $MTSQL_BIRD/dev), with evidence

``limit`` keeps the first N interactions (whole dialogues, never a cut one).
"""

from __future__ import annotations

import functools
import hashlib
import typing
from dataclasses import replace
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA, bird_dir, data_dir, database_path
from mtsql.core.data.bird import BirdSplit, bird_split, load_bird
from mtsql.core.data.cosql_raw import load_raw_dialogues
from mtsql.core.data.official import load_official
from mtsql.core.data.records import Turn
from mtsql.core.data.robustness import ROBUSTNESS_SETS, TYPE_KEY, check_present, question_key, schema_tables
from mtsql.core.data.settings import DataConfig, Dataset, Split
from mtsql.core.data.spider import load_spider
from mtsql.core.sql import hardness_of
from mtsql.core.sql.schema import check_databases

DATASETS = typing.get_args(Dataset)
SINGLE_TURN_DATASETS = (
    "spider",
    *ROBUSTNESS_SETS,
    "bird",
)  # no dialogues: no interaction match, no turn buckets
SPLITS = typing.get_args(Split)
RAW_COSQL_TRAIN = Path("extras") / "cosql_train_full_dialogues_from_QDA-SQL.json"

__all__ = [
    "DATASETS",
    "SINGLE_TURN_DATASETS",
    "SPLITS",
    "Turn",
    "data_root",
    "dataset_file",
    "eval_turns",
    "eval_dataset_names",
    "gold_file",
    "load_turns",
    "split_file",
    "tables_file",
    "tables_files",
    "train_pool",
]


def _check(dataset: str, split: str) -> None:
    if dataset not in DATASETS:
        raise UsageError(f"unknown dataset '{dataset}': choose one of {', '.join(DATASETS)}")
    if split not in SPLITS:
        raise UsageError(f"unknown split '{split}': choose one of {', '.join(SPLITS)}")


def data_root(cfg: DataConfig) -> Path:
    """The data folder a config reads (``data.root``, else $MTSQL_DATA, else the packaged fixture): it
    must exist, and with ``data.require_full`` it must not be the fixture."""
    root = data_dir(cfg.root)
    if not root.is_dir():
        raise UsageError(
            f"data folder {root} does not exist: point data.root (or MTSQL_DATA) at the folder "
            "that holds sparc/, cosql/ and database/"
        )
    if cfg.require_full and root == FIXTURE_DATA:
        raise UsageError(
            "data.require_full is set: this profile's numbers need the full data, but neither data.root "
            "nor MTSQL_DATA is set, so the packaged fixture subset would be used; set MTSQL_DATA to "
            "the data folder, or data.require_full=false to try the profile on the fixture"
        )
    return root


def dataset_file(dataset: str, split: str, root: Path | None = None) -> Path:
    """The file a split is read from: ``<root>/<dataset>/<split>.json``, or CoSQL's raw train dialogues."""
    _check(dataset, split)
    root = root or data_dir()
    if dataset == "bird":
        return bird_dir(root) / split / f"{split}.json"
    official = root / dataset / f"{split}.json"
    if official.exists() or not (dataset == "cosql" and split == "train"):
        return official
    return root / RAW_COSQL_TRAIN


def has_split(dataset: str, split: str, root: Path | None = None) -> bool:
    return dataset_file(dataset, split, root).exists()


def per_dataset_groups(cfg: DataConfig, root: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(train dataset, the eval datasets its model is scored on) for ``data.per_dataset``: one group per
    eval dataset with a ``train_split``, each scored on itself; the others join ``train_dataset``'s."""
    own = [
        name
        for name in cfg.eval_datasets
        if name != cfg.train_dataset and has_split(name, cfg.train_split, root)
    ]
    rest = tuple(name for name in cfg.eval_datasets if name not in own)
    return [*([(cfg.train_dataset, rest)] if rest else []), *((name, (name,)) for name in own)]


def split_file(dataset: str, split: str, root: Path) -> Path:
    """The file of a split (:func:`dataset_file`), which must exist."""
    if dataset == "bird":
        return bird_split(split, root).questions
    path = dataset_file(dataset, split, root)
    check_present(dataset, path, root)
    if not path.exists():
        hint = "only CoSQL has a raw train split here" if split == "train" else f"is {root} the data folder?"
        raise UsageError(
            f"{path}: no official {dataset} {path.name} in this data folder ({hint}); put one at that path"
        )
    return path


def gold_file(dataset: str, root: Path | None = None) -> Path:
    _check(dataset, "dev")
    return (root or data_dir()) / dataset / "dev_gold.txt"


def tables_file(dataset: str, root: Path | None = None) -> Path:
    """The ``tables.json`` of a dataset's databases (a robustness set without one: Spider's)."""
    _check(dataset, "dev")
    return schema_tables(dataset, root or data_dir())


def tables_files(root: Path | None = None, dataset: str | None = None) -> list[Path]:
    """Every tables.json of the data folder a schema may come from: ``dataset``'s own first, then the
    others in the order of ``DATASETS`` (BIRD's: its dev then its train split's)."""
    root = root or data_dir()

    def own(name: str) -> list[Path]:
        return (
            [bird_dir(root) / split / f"{split}_tables.json" for split in SPLITS]
            if name == "bird"
            else [tables_file(name, root)]
        )

    names = [*([dataset] if dataset else []), *DATASETS]
    return list(dict.fromkeys(path for name in names for path in own(name)))


def dev_db_ids(dataset: str, root: Path | None = None) -> set[str]:
    path = (root or data_dir()) / dataset / "dev_db_ids.txt"
    return set(path.read_text().split()) if path.exists() else set()


def load_turns(
    dataset: str,
    split: str,
    *,
    root: Path | None = None,
    limit: int | None = None,
    with_hardness: bool = True,
) -> list[Turn]:
    """Every turn of a split in file order, as uniform records (hardness from the parsed gold)."""
    root = root or data_dir()
    path = split_file(dataset, split, root)
    exclude = frozenset(dev_db_ids(dataset, root)) if path.name == RAW_COSQL_TRAIN.name else frozenset()
    turns = list(_read_split(path, dataset, split, exclude, hashlib.blake2b(path.read_bytes()).hexdigest()))
    if limit is not None:
        turns = [t for t in turns if t.interaction_index < limit]
    if with_hardness and dataset != "bird":  # BIRD's golds have difficulties, not Spider's hardness
        turns = _with_hardness(turns, root)
    return turns


@functools.lru_cache(maxsize=16)
def _read_split(
    path: Path, dataset: str, split: str, exclude_dbs: frozenset[str], digest: str
) -> tuple[Turn, ...]:
    """The turns of one split file, parsed once per content (``digest``: an edited file is read again): a
    pipeline plans and runs several stages on the same splits."""
    del digest  # the cache key only
    if path.name == RAW_COSQL_TRAIN.name:
        return tuple(load_raw_dialogues(path, exclude_dbs=set(exclude_dbs), split=split))
    if dataset == "bird":
        return tuple(load_bird(BirdSplit(path.parent, split)))
    if dataset in SINGLE_TURN_DATASETS:
        return tuple(
            load_spider(
                path,
                split,
                dataset=dataset,
                question_key=question_key(dataset),
                type_key=TYPE_KEY.get(dataset),
            )
        )
    return tuple(load_official(path, dataset, split))


def train_pool(cfg: DataConfig, root: Path, *, with_hardness: bool = True) -> list[Turn]:
    """The training turns of a config that can be rewarded: their database exists and their gold parses
    (a gold the official parser rejects has no hardness and can never score exact match). With
    ``train_flatten`` each turn is a one-turn interaction of its own (single-turn training data).
    Without hardness (a quick look), golds are not parsed, so none is left out for failing to."""
    turns = load_turns(
        cfg.train_dataset, cfg.train_split, root=root, limit=cfg.train_limit, with_hardness=with_hardness
    )
    if cfg.train_flatten:
        turns = [t.alone() for t in turns]
    databases = {db: database_path(db, root) for db in sorted({t.db_id for t in turns})}
    check_databases(databases.values())  # named, never left out
    present = {db for db, path in databases.items() if path.is_file()}
    return [
        t
        for t in turns
        if (t.hardness is not None or not with_hardness or t.dataset == "bird") and t.db_id in present
    ]


def eval_dataset_names(cfg: DataConfig, root: Path) -> tuple[str, ...]:
    """The datasets an evaluation scores: ``eval_datasets``, then those of ``eval_if_present`` whose eval
    split is in the data folder (BIRD and Spider-Realistic are not shipped)."""
    present = (
        name
        for name in cfg.eval_if_present
        if name not in cfg.eval_datasets and has_split(name, cfg.eval_split, root)
    )
    return (*cfg.eval_datasets, *present)


def eval_turns(cfg: DataConfig, dataset: str, root: Path, *, with_hardness: bool = True) -> list[Turn]:
    """The evaluation slice of ``dataset``: ``eval_limit`` interactions of ``eval_split`` (all
    without a limit), the first ones or, with ``eval_pick: spread``, those of :func:`spread_pick`."""
    if cfg.eval_limit is None or cfg.eval_pick == "first":
        chosen = load_turns(dataset, cfg.eval_split, root=root, limit=cfg.eval_limit, with_hardness=False)
    else:
        turns = load_turns(dataset, cfg.eval_split, root=root, with_hardness=False)
        picked = spread_pick(turns, cfg.eval_limit, root)
        chosen = [t for t in turns if t.interaction_index in picked]
    check_databases(
        database_path(db, root) for db in sorted({t.db_id for t in chosen})
    )  # named, never scored as 0
    return _with_hardness(chosen, root) if with_hardness and dataset != "bird" else chosen


def spread_pick(turns: list[Turn], limit: int, root: Path) -> set[int]:
    """``limit`` interaction indices taken in turn from each database that has a database file (in
    the order databases first appear; each database's interactions in file order), so that a small
    slice covers many databases rather than the first one or two of the file, and every turn can be
    scored for execution."""
    by_db: dict[str, list[int]] = {}
    for turn in turns:
        indices = by_db.setdefault(turn.db_id, [])
        if not indices or indices[-1] != turn.interaction_index:
            indices.append(turn.interaction_index)
    queues = [indices for db_id, indices in by_db.items() if database_path(db_id, root).is_file()]
    chosen: set[int] = set()
    for rank in range(max(map(len, queues), default=0)):
        for indices in queues:
            if rank < len(indices) and len(chosen) < limit:
                chosen.add(indices[rank])
    return chosen


def _with_hardness(turns: list[Turn], root: Path) -> list[Turn]:
    return [replace(t, hardness=hardness_of(t.gold_sql, t.db_id, data_root=root)) for t in turns]
