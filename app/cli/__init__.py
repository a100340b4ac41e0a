"""The ``privacy-ledger`` command (also ``python -m app.cli``).

On the server (the database directly): ``serve``, ``migrate``, ``verify`` (``--server`` asks a
running server instead) and ``keys create --local``. Everything else talks to a running server
through ``privacy_ledger_client``, found with ``--url`` / ``--api-key`` or
``PRIVACY_LEDGER_URL`` / ``PRIVACY_LEDGER_API_KEY``:

* ``datasets`` (list), ``datasets create``, ``datasets update``;
* ``charge``, ``reserve``, ``commit``, ``release`` (spending), ``calibrate``, ``compose``
  (planning);
* ``charge-dp-event`` (a dp_accounting DpEvent as JSON), ``charge-opacus`` (an Opacus
  accountant's history);
* ``status``, ``budget``, ``ledger`` (table, CSV or JSON Lines), ``rejections``, ``audit``;
* ``keys create`` / ``list`` / ``revoke``.

Every client command takes ``--json`` (``ledger``: ``--format``) for scripts. Exit status: 0 done,
1 error (the message names the setting to check), 2 refused for budget (nothing charged) or a
usage error.
"""

from __future__ import annotations

import traceback
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from privacy_ledger_client import __version__ as client_version
from typer.core import TyperGroup

from app.cli import charging, datasets, integrations, keys, reading, server, structures
from app.cli.common import JSON_ASKED, err_console, fail


class Commands(TyperGroup):
    """The root command group: an exception that escapes a command is a bug of the CLI (the
    user's input ends in an ``error:`` line where it is read: typer's checks of options, the
    client's refusals, ``Session.call``, ``database.opened``), so it is shown, as the Python
    traceback it is (without local variables, which hold the API key), followed by an
    ``error:`` line that says so."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort, BrokenPipeError):
            raise  # usage errors, exits, aborts, output piped to `head`: typer reports them
        except Exception as exc:
            err_console.print(traceback.format_exc(), markup=False, highlight=False, end="")
            fail(
                f"internal error ({type(exc).__name__}: {exc}). This is a bug in privacy-ledger, "
                "not in what you typed: please report it with the command and the traceback above"
            )


cli = typer.Typer(
    name="privacy-ledger",
    cls=Commands,
    help="A stateful privacy-budget accountant: serve it, migrate it, and talk to it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: no "<bool>" beside flags, no box drawing to parse
    pretty_exceptions_show_locals=False,  # a traceback's locals would show the API key
)


def _installed_version() -> str:
    try:
        return version("privacy-ledger")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"privacy-ledger {_installed_version()} (client {client_version})")
        raise typer.Exit()


@cli.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print the server and client versions and exit.",
        ),
    ] = False,
) -> None:
    """A stateful privacy-budget accountant: serve it, migrate it, and talk to it."""
    JSON_ASKED.set(False)  # (the command's own --json sets it again)


cli.command()(server.migrate)
cli.command()(server.serve)
cli.command()(server.verify)
cli.command("prune-idempotency")(server.prune_idempotency)
cli.add_typer(datasets.app, name="datasets")
charging.register(cli)
integrations.register(cli)
reading.register(cli)
cli.add_typer(keys.app, name="keys")
structures.register(cli)


def main() -> None:
    """Console-script entry point."""
    cli()


__all__ = ["cli", "main"]
