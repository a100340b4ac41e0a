"""Migrations are reversible and the migrated schema matches the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.db import migrate
from app.db.models import Base


def _diff(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_schema_matches_models_and_round_trips(db_url: str) -> None:
    assert _diff(db_url) == []
    assert _tables(db_url) == set(Base.metadata.tables)
    migrate.downgrade(db_url, "base")
    assert _tables(db_url) == set()
    migrate.upgrade(db_url)
    assert _diff(db_url) == []
