"""Database layer: SQLAlchemy 2 typed models and engine/session setup (SQLite + PostgreSQL)."""
