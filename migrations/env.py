"""Alembic environment: runs against a connection passed in attributes, ``sqlalchemy.url``, or
(plain ``alembic`` from the repository root, configured by ``[tool.alembic]`` in pyproject.toml)
``PRIVACY_LEDGER_DATABASE_URL``. ``-x force=true`` lets a downgrade drop a populated ledger."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from app.config import get_settings
from app.db.engine import own_sqlite_transactions
from app.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    if config.file_config.has_option(config.config_ini_section, "sqlalchemy.url"):
        return config.get_main_option("sqlalchemy.url") or get_settings().database_url
    return get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    if engine.dialect.name == "sqlite":
        # each revision in one transaction, its DDL included: with pysqlite's own transaction
        # control a revision's ALTER TABLE / CREATE TABLE before its first row change were
        # committed one by one, and a migrator killed half way left them behind (every later
        # ``migrate`` then failed on "duplicate column name")
        own_sqlite_transactions(engine, "BEGIN IMMEDIATE")
    with engine.connect() as conn:
        context.configure(
            connection=conn,
            target_metadata=target_metadata,
            render_as_batch=conn.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
