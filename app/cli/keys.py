"""``privacy-ledger keys``: create, list and revoke API keys (over HTTP, or ``--local`` straight
into the database on the server). Datasets are given by name or id."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    URL,
    Table,
    connect,
    console,
    fail,
    print_json,
)
from app.cli.database import DATABASE_URL, opened, settings
from app.principal import SYSTEM, Role

app = typer.Typer(
    help="Create, list and revoke API keys (admin key).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("create")
def keys_create(
    role: Annotated[
        Literal["admin", "pipeline", "viewer"],
        typer.Option(
            help="admin (everything), pipeline (charge and reserve) or viewer (read only).",
        ),
    ],
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            help="Limit the key to this dataset, by name or id (repeat for several; default: "
            "every dataset).",
            metavar="DATASET",
            show_default=False,
        ),
    ] = None,
    label: Annotated[
        str | None, typer.Option(help="Who or what the key is for.", show_default=False)
    ] = None,
    allocation: Annotated[
        list[str] | None,
        typer.Option(
            help="Limit the key to this allocation (team sub-budget) of its dataset: its "
            "charges must name one of them (repeat for several).",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="Write to the database directly (on the server; PRIVACY_LEDGER_DATABASE_URL) "
            "instead of calling the API.",
        ),
    ] = False,
    database_url: DATABASE_URL = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Create a key; its secret is printed once and stored only as a salted digest."""
    refs = list(dataset or [])
    if database_url and not local:
        fail("--database-url writes to the database directly: add --local")
    if local:
        if allocation:
            fail("--allocation needs the API (drop --local)")
        # the server's modules, loaded here only: every other command is a client's
        from app.db.engine import Database
        from app.errors import ProblemError
        from app.services import datasets as dataset_service
        from app.services import keys as key_service

        database_url = database_url or settings().database_url
        with opened(database_url, "create a key in", existing=True):
            db = Database(database_url)
            try:
                ids = [dataset_service.get_dataset(db, SYSTEM, ref).id for ref in refs]
                created = key_service.create_key(db, SYSTEM, Role(role), ids or None, label)
                answer = created.model_dump(mode="json")
            except ProblemError as exc:
                fail(exc.detail)
            finally:
                db.dispose()
    else:
        with connect(url, api_key) as s:
            ids = [s.dataset_id(ref) for ref in refs]
            answer = s.call(
                lambda c: c.create_key(role, ids or None, label, allocations=allocation or None)
            ).raw
    if as_json:
        print_json(answer)
    else:
        scope = ", ".join(refs) if refs else "every dataset"
        limited = answer.get("allocations")
        if limited:
            scope += f", limited to {_allocations(limited)}"
        console.print(
            f"{answer['role']} key {answer['id']} for {scope} (shown once, store it now):\n"
            f"{answer['key']}",
            markup=False,
        )


def _allocations(names: list[str]) -> str:
    """The allocations a key is limited to: ``allocation team-a`` or ``allocations a, b`` (its
    charges must name one of them)."""
    return f"allocation{'s' if len(names) > 1 else ''} {', '.join(names)}"


@app.command("list")
def keys_list(url: URL = DEFAULT_URL, api_key: KEY = None, as_json: JSON_OUT = False) -> None:
    """List keys with their role, datasets and the allocations they are limited to (never the
    secrets)."""
    with connect(url, api_key) as s:
        items = [k.raw for k in s.call(lambda c: c.keys())]
        names = {d.id: d.name for d in s.call(lambda c: c.datasets())}
    if as_json:
        print_json(items)
        return
    table = Table(title="API keys")
    for col in ("id", "role", "datasets", "allocations", "label", "created", "revoked"):
        table.add_column(col)
    for k in items:
        table.add_row(
            k["id"],
            k["role"],
            ", ".join(names.get(i, i) for i in k["datasets"]) if k["datasets"] else "all",
            # none: the key's charges need not name an allocation
            ", ".join(k["allocations"]) if k.get("allocations") else "any",
            k.get("label") or "",
            str(k.get("created_at") or ""),
            str(k.get("revoked_at") or ""),
        )
    console.print(table)


@app.command("revoke")
def keys_revoke(
    key_id: Annotated[
        str,
        typer.Argument(help="The key's id (from `keys list`), not its secret.", metavar="KEY_ID"),
    ],
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Revoke a key (idempotent); requests with it are refused from now on."""
    with connect(url, api_key) as s:
        answer = s.call(lambda c: c.revoke_key(key_id)).raw
    if as_json:
        print_json(answer)
    else:
        console.print(f"revoked {answer['id']}", markup=False)


__all__ = ["app"]
