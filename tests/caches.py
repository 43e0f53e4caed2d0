"""``clear_caches``: forget what the SQL layer and the split reader cached in this process, so that a test
or a benchmark starts cold (what ``gold_cache.persisted`` saved on disk stays)."""

from __future__ import annotations

from mtsql.core.data import _read_split
from mtsql.core.sql import gold_cache
from mtsql.core.sql.exec_match import _remove_distinct_tokens, testsuite_databases
from mtsql.core.sql.executor import forget_cached
from mtsql.core.sql.schema import load_foreign_key_maps, load_schema
from mtsql.core.sql.scoring import _first_database, _foreign_keys_digest


def clear_caches() -> None:
    """Forget cached schemas, foreign-key maps, parsed golds, gold results and split files in this process."""
    for cached in (
        _read_split,
        load_schema,
        load_foreign_key_maps,
        _remove_distinct_tokens,
        testsuite_databases,
        _foreign_keys_digest,
        _first_database,
    ):
        cached.cache_clear()
    gold_cache.clear()
    forget_cached()
