"""Settings from the environment (prefix ``PRIVACY_LEDGER_``), one object for the whole app."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service settings. Every field can be set as ``PRIVACY_LEDGER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PRIVACY_LEDGER_", extra="ignore")

    database_url: str = "sqlite:///./privacy_ledger.db"
    admin_key: str | None = Field(
        default=None,
        description="If set, an admin key with exactly this value is ensured at start-up.",
    )
    auto_migrate: bool = Field(
        default=True, description="Bring the schema to head at start-up (advisory-locked on PG)."
    )
    max_body_bytes: int = 1_048_576
    max_metadata_bytes: int = 16_384
    max_metadata_depth: int = 8
    max_label_length: int = 200
    max_page_size: int = 1000
    default_page_size: int = 50
    log_level: str = "INFO"
    log_json: bool = True
    reservation_max_ttl_seconds: int = 7 * 24 * 3600


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings read once from the environment."""
    return Settings()


__all__ = ["Settings", "get_settings"]
