"""The ``data`` section: which datasets a run trains and is scored on, and their vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtsql.base.config import Items, operational, result

# Choice-valued settings: a value outside these is a config error when the config loads.


Dataset = Literal["sparc", "cosql", "spider", "spider_dk", "spider_syn", "spider_realistic", "bird"]
Split = Literal["dev", "train"]


@dataclass(frozen=True)
class DataConfig:
    """Which data a run uses. ``root: null`` means $MTSQL_DATA (else the packaged fixture)."""

    root: str | None = operational(None)  # where the data is: fingerprints hash what it holds (data_digest)
    require_full: bool = operational(
        False
    )  # refuse the packaged fixture subset (profiles whose numbers need the
    # full data); a check, and the data digest tells the two apart
    train_dataset: Dataset = result("cosql")
    train_split: Split = result("train")
    train_limit: Items | None = result(None)  # first N interactions (a slice for small profiles)
    train_flatten: bool = result(False)  # every training turn as a question of its own, without its dialogue
    per_dataset: bool = operational(
        False
    )  # `mtsql run`: one model per eval dataset that has a train split (run
    # <run>-<dataset>, scored on that dataset), as MTSQL-R1's release trains;
    # eval datasets without one are scored by train_dataset's model. Only the
    # pipeline reads it: each run's stages see its datasets in the fields above
    eval_datasets: tuple[Dataset, ...] = result(("cosql", "sparc"))
    eval_if_present: tuple[Dataset, ...] = result(
        ()
    )  # also scored when the data folder holds their eval split
    eval_split: Split = result("dev")
    eval_limit: Items | None = result(None)  # N interactions, picked by eval_pick
    eval_pick: Literal["first", "spread"] = result(
        "first"
    )  # spread: one database after another, those with a file
