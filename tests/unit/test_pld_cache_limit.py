"""The PLD construction cache's size is a setting (PRIVACY_LEDGER_PLD_CACHE_MB, default 256 MiB
per process): an outside soak test saw each worker grow toward it, and the operator had no way
to trade that memory for constructions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.accounting import pld_mechanisms as pm
from app.accounting.pld_mechanisms import CACHE_BYTES
from app.config import Settings
from app.main import create_app


@pytest.fixture(autouse=True)
def _default_limit_restored() -> Iterator[None]:
    yield
    pm.set_cache_limit(CACHE_BYTES)
    pm.clear_cache()


def _fill() -> None:
    pm.clear_cache()
    for sigma in (2.0, 3.0, 4.0):
        pm.gaussian(sigma, 1.0, 1)


def test_a_lower_limit_evicts_the_least_recently_used_and_zero_keeps_nothing() -> None:
    _fill()
    full = pm.cache_info()
    assert full.entries == 3 and full.bytes > 0
    pm.set_cache_limit(full.bytes - 1)  # one entry too many: the oldest goes
    assert pm.cache_info().entries == 2 and pm.cache_info().bytes < full.bytes
    pm.set_cache_limit(0)
    assert pm.cache_info().entries == 0 and pm.cache_info().bytes == 0
    before = pm.cache_info().misses
    pm.gaussian(2.0, 1.0, 1)
    pm.gaussian(2.0, 1.0, 1)  # built again: nothing is kept
    assert pm.cache_info().misses == before + 2 and pm.cache_info().entries == 0
    with pytest.raises(ValueError, match="at least 0"):
        pm.set_cache_limit(-1)


def test_the_setting_sets_the_limit(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    create_app(Settings(database_url=url, auto_migrate=False, pld_cache_mb=3))
    _fill()
    assert pm._CACHE.max_bytes == 3 * 2**20
    with pytest.raises(ValueError, match="pld_cache_mb"):
        Settings(database_url=url, pld_cache_mb=-1)
