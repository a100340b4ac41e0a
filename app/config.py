"""Settings from the environment (prefix ``PRIVACY_LEDGER_``), one object for the whole app."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIN_ADMIN_KEY_LENGTH = 32
"""Shortest ``PRIVACY_LEDGER_ADMIN_KEY`` accepted (generated keys carry 256 random bits)."""


class Settings(BaseSettings):
    """Service settings. Every field can be set as ``PRIVACY_LEDGER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PRIVACY_LEDGER_", extra="ignore")

    database_url: str = "sqlite:///./privacy_ledger.db"
    admin_key: str | None = Field(
        default=None,
        repr=False,  # a secret
        description=(
            "If set, an admin key with exactly this value is ensured at start-up; at least "
            f"{MIN_ADMIN_KEY_LENGTH} characters (empty: unset)."
        ),
    )
    auto_migrate: bool = Field(
        default=True, description="Bring the schema to head at start-up (advisory-locked on PG)."
    )
    metrics_key_required: bool = Field(
        default=False,
        description=(
            "Require an unscoped API key (any role) for GET /metrics, which names every dataset "
            "id; off by default so that Prometheus can scrape without one."
        ),
    )
    max_body_bytes: int = Field(
        default=1_048_576, description="Largest request body (declared or streamed): else 413."
    )
    max_page_size: int = Field(default=1000, description="Most ledger entries in one page.")
    default_page_size: int = Field(
        default=50, description="Ledger entries in a page when the request gives no limit."
    )
    log_level: str = "INFO"
    log_json: bool = True
    reservation_max_ttl_seconds: int = 7 * 24 * 3600
    idempotency_retention_days: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Delete each Idempotency-Key's stored first answer this many days after it was made "
            "(every replica checks hourly); a retry after that is a new request. Unset: kept for "
            "ever (one row of about 1 kB per keyed charge, refusal or reservation)."
        ),
    )
    pld_cache_mb: int = Field(
        default=256,
        ge=0,
        description=(
            "Most MiB of privacy loss distributions each worker process keeps cached (least "
            "recently used out; 0: none kept). A worker's memory grows toward about this much "
            "above its ~200 MB base as pld datasets and composes use new mechanisms."
        ),
    )

    @field_validator("idempotency_retention_days", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("admin_key")
    @classmethod
    def _strong_admin_key(cls, value: str | None) -> str | None:
        if not value:
            return None
        if len(value) < MIN_ADMIN_KEY_LENGTH:
            raise ValueError(
                f"PRIVACY_LEDGER_ADMIN_KEY must be at least {MIN_ADMIN_KEY_LENGTH} characters, "
                f"got {len(value)}; generate one with: python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))' (or leave it unset: the server then creates "
                "an admin key and prints it once)"
            )
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings read once from the environment."""
    return Settings()


def invalid_settings(exc: ValidationError) -> list[str]:
    """One line per invalid setting of ``exc``: its environment variable and why."""
    return [
        f"PRIVACY_LEDGER_{'_'.join(str(p) for p in e['loc']).upper()}: "
        f"{e['msg'].removeprefix('Value error, ')}"
        for e in exc.errors()
    ]


def settings_or_exit() -> Settings:
    """``get_settings()`` at start-up: an invalid setting stops the process with a message
    naming it (no traceback)."""
    try:
        return get_settings()
    except ValidationError as exc:
        lines = [f"  {line}" for line in invalid_settings(exc)]
        raise SystemExit("privacy-ledger: invalid configuration\n" + "\n".join(lines)) from None


__all__ = [
    "MIN_ADMIN_KEY_LENGTH",
    "Settings",
    "get_settings",
    "invalid_settings",
    "settings_or_exit",
]
