"""Shared fixtures: the packaged data subset, and the full data folder when $MTSQL_DATA is set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mtsql.paths import FIXTURE_DATA

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def fixture_root() -> Path:
    return FIXTURE_DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full shared data folder; tests that need it are skipped when $MTSQL_DATA is unset."""
    value = os.environ.get("MTSQL_DATA")
    if not value or not (Path(value) / "sparc" / "dev.json").exists():
        pytest.skip("needs the full data folder: set MTSQL_DATA (CI sets ../shared/data)")
    return Path(value)
