"""A forced downgrade below 0006 drops ``dataset_pld`` (a ``pld`` dataset's composed
distributions) but keeps the datasets; the upgrade back re-created none, and the dataset's charges
and every ``verify`` then answered 500 (stop 32 operations audit). The upgrade now recomposes
them from the ledger and the active holds."""

from __future__ import annotations

from app.accounting.mechanisms import Gaussian, Laplace, Mechanism
from app.db import migrate
from app.db.engine import Database
from app.principal import SYSTEM
from app.services import charges, datasets, verification
from tests.conftest import reserve_hold, run_sql


def _charge(db: Database, dataset_id: str, m: Mechanism) -> float:
    return charges.charge(db, SYSTEM, dataset_id, mechanism=m, wire=m.to_dict()).spent.epsilon


def test_a_pld_dataset_works_again_after_a_forced_downgrade_and_the_upgrade(
    db_url: str,
) -> None:
    db = Database(db_url)
    try:
        ds = datasets.create_dataset(
            db,
            SYSTEM,
            name="p",
            budget_epsilon=5.0,
            budget_delta=1e-6,
            accounting="pld",
            adaptive=False,
        )
        for m in (Laplace(epsilon=0.1), Laplace(epsilon=0.1), Gaussian(sigma=4.0)):
            before = _charge(db, ds.id, m)
        reserve_hold(db, ds.id, Gaussian(sigma=8.0))
    finally:
        db.dispose()
    migrate.downgrade(db_url, "0005", force=True)
    assert run_sql(db_url, "SELECT count(*) FROM dataset WHERE accounting = 'pld'") == [(1,)]
    migrate.upgrade(db_url)
    db = Database(db_url)
    try:
        # as `privacy-ledger migrate` does after the schema: the downgrade dropped the formulas
        # stamp, and charges wait (503) until the stored curves are re-derived
        verification.rederive_if_formulas_changed(db)
        report = verification.verify(db, SYSTEM)
        assert report.ok, report  # the recomposed distributions are the ledger's and the hold's
        after = _charge(db, ds.id, Laplace(epsilon=0.1))
        assert after > before  # one more entry, on the ledger's distribution, not an empty one
    finally:
        db.dispose()
