"""Shared fixtures: a migrated database per test on SQLite and (in CI) on PostgreSQL.

PostgreSQL tests run when PRIVACY_LEDGER_TEST_POSTGRES_URL is set (``.ci/run`` sets it and
creates a fresh database); without it they are skipped with the reason printed. The number of
PostgreSQL tests that passed is written to PRIVACY_LEDGER_PG_REPORT (if set) so CI can fail
when none ran.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import mpmath
import pytest
from fastapi.testclient import TestClient
from hypothesis import settings
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import app.main as app_main
from app.accounting.kinds import KindSpec
from app.accounting.mechanisms import Mechanism
from app.config import Settings
from app.db import migrate
from app.db.engine import Database
from app.main import create_app
from app.principal import SYSTEM
from app.services import key_digest, reservations
from tests import toy_kind as toy_kind_module

# No deadline anywhere: an example's outcome never depends on how busy the machine is. And the
# same examples on every run (derandomize): `make test` passes or fails the same way twice in a
# row. A random run, to hunt for new counterexamples, is PRIVACY_LEDGER_HYPOTHESIS=explore (with
# pytest's --hypothesis-seed=N to repeat one); a failure it finds becomes an @example.
settings.register_profile("ledger", deadline=None, derandomize=True, database=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("PRIVACY_LEDGER_HYPOTHESIS", "ledger"))

# Every fresh test database carries the same installation salt (``TEST_SALT``), and a worker
# computes each (key, salt) digest once: the service's digest cache lives with its ``Database``,
# which each test makes anew, so every test's admin key cost one scrypt (about 70 ms, over
# 2,000 tests). The digests are the same values scrypt gives; tests that count scrypt calls
# wrap this function as they wrapped the plain one (a call is still a call).
TEST_SALT = "5eed" * 8
key_digest.scrypt_digest = functools.lru_cache(maxsize=4096)(key_digest.scrypt_digest)  # type: ignore[assignment]

# Keys made by tests (thousands: a viewer, a pipeline, a scoped admin per permission case) are
# digested at a tiny scrypt cost (N = 16) in this process: the production cost (N = 2**14,
# 16 MiB, ~50 ms) is a brute-force defence, not behaviour, and it made test_permissions,
# test_scoped_admin and test_key_changes take 72 s of CPU on SQLite instead of 42 s. Same
# function, same salt, same format; servers started as subprocesses keep the
# production cost, and test_key_storage checks the stored digest against scrypt at that cost
# (``production_kdf``).
PRODUCTION_SCRYPT_N = key_digest.SCRYPT_N
key_digest.SCRYPT_N = 2**4


@pytest.fixture
def production_kdf(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Key digests at the production scrypt cost for one test (the digest cache emptied before
    and after, so no digest crosses between the two costs)."""
    key_digest.scrypt_digest.cache_clear()  # type: ignore[attr-defined]
    monkeypatch.setattr(key_digest, "SCRYPT_N", PRODUCTION_SCRYPT_N)
    yield
    key_digest.scrypt_digest.cache_clear()  # type: ignore[attr-defined]


def _worker_database(url: str | None) -> str | None:
    """Under pytest-xdist (``make test`` runs two workers) each worker gets its own PostgreSQL
    database, ``<the CI database>_<worker>``, created here on first use and dropped when the
    worker ends: tests truncate their database, so two workers must never share one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not url or not worker:
        return url
    base = make_url(url)
    name = f"{base.database}_{worker}"
    _on_server(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    return base.set(database=name).render_as_string(hide_password=False)


def _on_server(url: str, *statements: str) -> None:
    """Run ``statements`` (CREATE / DROP DATABASE) on the server of ``url``, outside any
    transaction, from its ``postgres`` database."""
    engine = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


PG_URL = _worker_database(os.environ.get("PRIVACY_LEDGER_TEST_POSTGRES_URL"))
ADMIN_KEY = "test-admin-key-0123456789-abcdefghijklmnop"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
BACKENDS = ["sqlite", "postgres"]

_TABLES = [
    "allocation_block",
    "dataset_block",
    "allocation",
    "dataset_pld",
    "audit_event",
    "idempotency_record",
    "rejection",
    "reservation",
    "ledger_entry",
    "dataset_total",
    "dataset",
    "api_key",
    "app_setting",
]
_pg_passed = 0
_pg_ready = False


def pytest_report_header(config: pytest.Config) -> str:
    if PG_URL:
        return f"postgres: {PG_URL.rsplit('@', 1)[-1]}"
    return "postgres: PRIVACY_LEDGER_TEST_POSTGRES_URL not set, PostgreSQL tests will be skipped"


LONG_FIRST = ("tests/packaging/", "tests/e2e/", "tests/db/", "tests/client/", "tests/test_live")
"""Where the suite's longest tests are (wheels and venvs built, browsers, server processes):
collected first, so that pytest-xdist's two workers end on short tests. In path order they came
last, and one worker ran them for about a minute while the other, done, waited."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules under ``LONG_FIRST`` before the others, in its order; the order within a
    module kept."""

    def rank(item: pytest.Item) -> int:
        where = [i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)]
        return where[0] if where else len(LONG_FIRST)

    items.sort(key=rank)  # stable


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _pg_passed
    if report.when == "call" and report.passed and "[postgres" in report.nodeid:
        _pg_passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller counts
        _drop_worker_database()
        return
    out = os.environ.get("PRIVACY_LEDGER_PG_REPORT")
    if out:
        Path(out).write_text(str(_pg_passed))


def _drop_worker_database() -> None:
    if not PG_URL or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _on_server(PG_URL, f'DROP DATABASE IF EXISTS "{make_url(PG_URL).database}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _no_background_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The apps built in tests never sweep by themselves (tests sweep with
    ``reservations.sweep_expired``): a sweep fired by the clock, every second of an app's life,
    raced the tests that back-date holds (``expire_active_holds``) and then check how they were
    settled, e.g. it charged a hold in the moment it was expired before the test made it active
    again. tests/api/test_sweeper.py turns the sweeper on to test it."""
    monkeypatch.setattr(app_main, "SWEEP_INTERVAL_SECONDS", 24 * 3600.0)
    monkeypatch.setattr(app_main, "SWEEP_AT_EXPIRY", False)


@pytest.fixture(autouse=True)
def _mpmath_precision_is_restored() -> Iterator[None]:
    """A test that changes mpmath's global working precision must not change the next test's."""
    dps = mpmath.mp.dps
    yield
    mpmath.mp.dps = dps


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once; each test copies it."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    _store_test_salt(f"sqlite:///{path}")
    return path


def _store_test_salt(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO app_setting (key, value) VALUES (:k, :v)"),
                {"k": key_digest.SALT_SETTING, "v": TEST_SALT},
            )
    finally:
        engine.dispose()


def _reset_postgres(url: str) -> None:
    global _pg_ready
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if not _pg_ready:
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
        if not _pg_ready:
            migrate.upgrade(url)
            _pg_ready = True
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {', '.join(_TABLES)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()
    _store_test_salt(url)


def _fresh_database(backend: str, directory: Path, sqlite_template: Path) -> str:
    """A migrated, empty database: a copy of the SQLite template in ``directory``, or the CI
    PostgreSQL truncated (skipped, with the reason printed, where there is none)."""
    if backend == "sqlite":
        path = directory / "ledger.db"
        shutil.copy(sqlite_template, path)
        return f"sqlite:///{path}"
    if not PG_URL:
        reason = "PostgreSQL tests skipped: PRIVACY_LEDGER_TEST_POSTGRES_URL is not set"
        print(reason)
        pytest.skip(reason)
    _reset_postgres(PG_URL)
    return PG_URL


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    """A freshly migrated, empty database: SQLite file, or the CI PostgreSQL (truncated)."""
    return _fresh_database(request.param, tmp_path, sqlite_template)


@pytest.fixture(scope="module", params=BACKENDS)
def module_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> str:
    """``db_url`` shared by the tests of one module: for a live server they all talk to (about
    5 s to start on a loaded 2-core machine, once per module and backend instead of once per
    test), each test making datasets of its own names. pytest finalises a module's fixtures
    before it runs a test of another module, so no other test truncates the database while the
    server runs."""
    return _fresh_database(request.param, tmp_path_factory.mktemp("module"), sqlite_template)


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite database only (for tests that are about SQLite itself)."""
    path = tmp_path / "ledger.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


def make_settings(url: str, **overrides: Any) -> Settings:
    return Settings(database_url=url, admin_key=ADMIN_KEY, auto_migrate=False, **overrides)


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    """TestClient on a fresh database; admin key ``ADMIN_KEY`` exists."""
    app = create_app(make_settings(db_url))
    with TestClient(app) as c:
        c.headers.update(ADMIN)
        yield c


@pytest.fixture
def toy_kind(monkeypatch: pytest.MonkeyPatch) -> KindSpec:
    """A test-only kind without a PLD builder in the registry for one test (tests/toy_kind.py)."""
    return toy_kind_module.register(monkeypatch)


@pytest.fixture(autouse=True)
def _toy_kind_for_its_cases(request: pytest.FixtureRequest) -> None:
    """A test case marked ``toy_kind`` (the toy kind's case of a test run over every kind,
    ``tests.kind_examples.each_kind``) runs with the toy kind registered."""
    if request.node.get_closest_marker("toy_kind") is not None:
        request.getfixturevalue("toy_kind")


@pytest.fixture
def sqlite_client(sqlite_url: str) -> Iterator[TestClient]:
    """TestClient on a fresh SQLite database only (for large matrices that need no PG copy)."""
    app = create_app(make_settings(sqlite_url))
    with TestClient(app) as c:
        c.headers.update(ADMIN)
        yield c


def expire_active_holds(db_url: str) -> None:
    """Back-date every active reservation (and each dataset's earliest expiry beside its held
    sum) so that the holds are due, as if their time-to-live had passed."""
    past = datetime.now(UTC) - timedelta(seconds=1)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE reservation SET expires_at = :t WHERE status = 'active'"), {"t": past}
            )
            conn.execute(
                text("UPDATE dataset_total SET held_next_expiry = :t WHERE held_count > 0"),
                {"t": past},
            )
    finally:
        engine.dispose()


def run_sql(db_url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """One statement in its own transaction on ``db_url``, behind the service's back (to corrupt
    or back-date what it stored, or read it raw); its rows, if it returns any."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def reserve_hold(db: Database, dataset_id: str, mechanism: Mechanism) -> None:
    """An active hold of ``mechanism`` on the dataset, through the service (an hour to live)."""
    reservations.reserve(
        db,
        SYSTEM,
        dataset_id,
        mechanism=mechanism,
        wire=mechanism.to_dict(),
        ttl_seconds=3600,
        label=None,
        metadata=None,
        max_ttl_seconds=7200,
    )


def dry_run_status(
    client: TestClient, dataset_id: str, mechanism: dict[str, Any], **extra: Any
) -> int:
    """The status of a dry-run charge of ``mechanism`` (200 admitted or 409 refused, nothing
    else; ``extra``: the charge's other fields, e.g. ``allocation`` or ``blocks``)."""
    r = client.post(
        f"/v1/datasets/{dataset_id}/charges",
        params={"dry_run": "true"},
        json={"mechanism": mechanism, **extra},
    )
    assert r.status_code in (200, 409), r.text
    return r.status_code


def new_allocation(
    client: TestClient, ds: str, name: str, epsilon: float, delta: float = 1e-6
) -> dict[str, Any]:
    """Create allocation ``name`` of dataset ``ds`` with budget (epsilon, delta); return it."""
    r = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": name, "budget": {"epsilon": epsilon, "delta": delta}},
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def new_dataset(client: TestClient, name: str = "census", **fields: Any) -> dict[str, Any]:
    """Create a dataset (default budget epsilon=1, delta=1e-5) and return it."""
    body: dict[str, Any] = {"name": name, "budget": {"epsilon": 1.0, "delta": 1e-5}}
    body.update(fields)
    r = client.post("/v1/datasets", json=body)
    assert r.status_code == 201, r.text
    return r.json()
