"""``privacy-ledger datasets``: list, create and update datasets (over HTTP)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from app.accounting.registry import kind_names
from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    NEW_DELTA,
    NEW_EPSILON,
    URL,
    Table,
    budget_text,
    choice,
    connect,
    console,
    fail,
    finite,
    left,
    print_json,
    state_label,
    used,
)

Accounting = Literal["rdp", "zcdp", "pld"]
Partition = Literal["day", "week", "month"]
Archived = Literal["false", "true", "all"]


def _state(d: dict[str, Any]) -> str:
    """The API's state (ok / WARNING / EXHAUSTED: one rule, docs/operations.md), and archived."""
    return state_label(d) + (" (archived)" if d.get("archived") else "")


KIND = choice(kind_names(), "mechanism kind")

app = typer.Typer(
    help="List, create and update datasets (a budget each).",
    rich_markup_mode=None,
    invoke_without_command=True,
    no_args_is_help=False,
)

ACCOUNTING_HELP = (
    "How the ledger is composed: rdp (Renyi DP, the default), zcdp (zero-concentrated DP) or "
    "pld (privacy loss distributions; needs --no-adaptive). zcdp gives DP-SGD no amplification "
    "by subsampling (it keeps each entry's rho only): use rdp for training runs."
)
ADAPTIVE_HELP = (
    "Whether a pipeline may choose a mechanism's parameters after seeing earlier outputs "
    "(adaptive filters cost a little budget; --no-adaptive is tighter)."
)
ENTRY_DELTA_BUDGET = Annotated[
    float | None,
    typer.Option(
        parser=finite,
        metavar="NUMBER",
        help="Adaptive datasets: the part of the budget delta [probability] set aside for "
        "mechanisms with their own delta (approx_dp; zcdp or rdp with delta), admitted while "
        "their deltas add up to at most it; the filter converts at the budget delta less it. "
        "0 (default) refuses them. Only before the first charge.",
        show_default=False,
    ),
]
LIFETIME_ENTRY_DELTA_BUDGET = Annotated[
    float | None,
    typer.Option(
        parser=finite,
        metavar="NUMBER",
        help="Partitioned adaptive datasets with a lifetime budget and --entry-delta-budget: the "
        "part of the lifetime budget's delta [probability] set aside for mechanisms with their "
        "own delta, whose deltas add up over all blocks there. Only before the first charge.",
        show_default=False,
    ),
]
ALLOW_HELP = (
    "Allow only this mechanism kind (repeat for several; default: every kind). Only gaussian "
    "gives the Gaussian-DP filter."
)


@app.callback()
def datasets_list(
    ctx: typer.Context,
    archived: Annotated[
        Archived,
        typer.Option(help="false: datasets in use (default); true: archived ones only; all: both."),
    ] = "false",
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """List datasets with budget, spend and what remains (the default action)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(url, api_key) as s:
        items = [d.raw for d in s.call(lambda c: c.datasets(archived=archived))]
    if as_json:
        print_json(items)
        return
    table = Table(title="datasets")
    for col in ("name", "id", "accounting / filter", "budget ε, δ", "spent ε", "left ε", "entries"):
        table.add_column(col)
    table.add_column("state")
    for d in items:
        table.add_row(
            d["name"],
            d["id"],
            f"{d['accounting']} / {d['filter']}",
            budget_text(d, short=True),
            used(d["spent"]["epsilon"]),
            left(d["remaining"]["epsilon"]),
            str(d["entries"]),
            _state(d),
        )
    console.print(table)


@app.command("create")
def datasets_create(
    name: Annotated[
        str, typer.Argument(help="Dataset name (unique; usable wherever an id is).", metavar="NAME")
    ],
    epsilon: Annotated[
        float,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="Budget epsilon [nats]: the total privacy loss allowed.",
        ),
    ],
    delta: Annotated[
        float,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="Budget delta [probability]: the total failure probability.",
        ),
    ],
    accounting: Annotated[Accounting, typer.Option(help=ACCOUNTING_HELP)] = "rdp",
    adaptive: Annotated[bool, typer.Option("--adaptive/--no-adaptive", help=ADAPTIVE_HELP)] = True,
    allow: Annotated[
        list[str] | None,
        typer.Option(parser=KIND, metavar="KIND", help=ALLOW_HELP, show_default=False),
    ] = None,
    description: Annotated[
        str | None, typer.Option(help="Free text shown with the dataset.", show_default=False)
    ] = None,
    partition: Annotated[
        Partition | None,
        typer.Option(
            help="Time-partitioned data: the budget then applies to each block of this unit "
            "(UTC days, ISO weeks or months), and every charge names the blocks it reads.",
            show_default=False,
        ),
    ] = None,
    lifetime_epsilon: Annotated[
        float | None,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="Partitioned datasets: a cap [nats] on the composition of all charges, which "
            "protects a person present in many blocks (with --lifetime-delta).",
            show_default=False,
        ),
    ] = None,
    lifetime_delta: Annotated[
        float | None,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="Partitioned datasets: the lifetime cap's delta [probability].",
            show_default=False,
        ),
    ] = None,
    entry_delta_budget: ENTRY_DELTA_BUDGET = None,
    lifetime_entry_delta_budget: LIFETIME_ENTRY_DELTA_BUDGET = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Create a dataset with a budget (admin key)."""
    fields: dict[str, Any] = {"accounting": accounting, "adaptive": adaptive}
    if partition is not None:
        fields["partition"] = {"unit": partition}
    if (lifetime_epsilon is None) != (lifetime_delta is None):
        fail("--lifetime-epsilon and --lifetime-delta go together")
    if lifetime_epsilon is not None:
        fields["lifetime_budget"] = {"epsilon": lifetime_epsilon, "delta": lifetime_delta}
    if allow:
        fields["allowed_mechanisms"] = list(allow)
    if description is not None:
        fields["description"] = description
    if entry_delta_budget is not None:
        fields["entry_delta_budget"] = entry_delta_budget
    if lifetime_entry_delta_budget is not None:
        fields["lifetime_entry_delta_budget"] = lifetime_entry_delta_budget
    with connect(url, api_key) as s:
        d = s.call(lambda c: c.create_dataset(name, epsilon, delta, **fields)).raw
    if as_json:
        print_json(d)
    else:
        console.print(
            f"created {d['name']} ({d['id']}): {budget_text(d)}; accounting {d['accounting']}, "
            f"filter {d['filter']}",
            markup=False,
        )


@app.command("update")
def datasets_update(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")],
    epsilon: NEW_EPSILON = None,
    delta: NEW_DELTA = None,
    name: Annotated[str | None, typer.Option(help="New name.", show_default=False)] = None,
    description: Annotated[
        str | None, typer.Option(help="New description ('' clears it).", show_default=False)
    ] = None,
    accounting: Annotated[
        Accounting | None,
        typer.Option(
            help=ACCOUNTING_HELP + " Only before the first charge.",
            show_default=False,
        ),
    ] = None,
    adaptive: Annotated[
        bool | None,
        typer.Option(
            "--adaptive/--no-adaptive",
            help=ADAPTIVE_HELP + " Only before the first charge. Unchanged when not given.",
            show_default=False,
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            parser=KIND,
            metavar="KIND",
            help=ALLOW_HELP + " Only before the first charge.",
            show_default=False,
        ),
    ] = None,
    allow_all: Annotated[
        bool,
        typer.Option("--allow-all", help="Allow every mechanism kind again."),
    ] = False,
    lifetime_epsilon: Annotated[
        float | None,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="Partitioned datasets: new lifetime budget epsilon [nats] (a new lifetime "
            "budget needs --lifetime-delta too).",
            show_default=False,
        ),
    ] = None,
    lifetime_delta: Annotated[
        float | None,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="New lifetime budget delta [probability].",
            show_default=False,
        ),
    ] = None,
    entry_delta_budget: ENTRY_DELTA_BUDGET = None,
    lifetime_entry_delta_budget: LIFETIME_ENTRY_DELTA_BUDGET = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Change a dataset's budget, name or description (admin key; audited)."""
    changes: dict[str, Any] = {}
    budget = {k: v for k, v in {"epsilon": epsilon, "delta": delta}.items() if v is not None}
    if budget:
        changes["budget"] = budget
    lifetime = {"epsilon": lifetime_epsilon, "delta": lifetime_delta}
    if any(v is not None for v in lifetime.values()):
        changes["lifetime_budget"] = {k: v for k, v in lifetime.items() if v is not None}
    if name is not None:
        changes["name"] = name
    if description is not None:
        changes["description"] = description or None
    if accounting is not None:
        changes["accounting"] = accounting
    if adaptive is not None:
        changes["adaptive"] = adaptive
    if entry_delta_budget is not None:
        changes["entry_delta_budget"] = entry_delta_budget
    if lifetime_entry_delta_budget is not None:
        changes["lifetime_entry_delta_budget"] = lifetime_entry_delta_budget
    if allow and allow_all:
        fail("give --allow or --allow-all, not both")
    if allow:
        changes["allowed_mechanisms"] = list(allow)
    if allow_all:
        changes["allowed_mechanisms"] = None
    if not changes:
        fail("nothing to change: give --epsilon, --delta, --name, --description, ...")
    with connect(url, api_key) as s:
        ref = s.dataset_id(dataset)
        d = s.call(lambda c: c.update_dataset(ref, **changes)).raw
    if as_json:
        print_json(d)
    else:
        composed = ", all charges composed" if d.get("partition") else ""
        console.print(
            f"updated {d['name']} ({d['id']}): {budget_text(d)}; spent "
            f"{used(d['spent']['epsilon'])}{composed}",
            markup=False,
        )


def _archive(dataset: str, archived: bool, url: str, api_key: str | None, as_json: bool) -> None:
    with connect(url, api_key) as s:
        ref = s.dataset_id(dataset)
        d = s.call(lambda c: c.archive_dataset(ref) if archived else c.unarchive_dataset(ref)).raw
    if as_json:
        print_json(d)
    elif archived:
        console.print(
            f"archived {d['name']} ({d['id']}): it refuses charges and reservations; its ledger "
            f"stays readable (privacy-ledger datasets --archived all lists it)",
            markup=False,
        )
    else:
        console.print(f"unarchived {d['name']} ({d['id']}): it takes charges again", markup=False)


@app.command("archive")
def datasets_archive(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")],
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Retire a finished dataset (admin key; audited; undo with `unarchive`)."""
    _archive(dataset, True, url, api_key, as_json)


@app.command("unarchive")
def datasets_unarchive(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")],
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Take an archived dataset back into use (admin key; audited)."""
    _archive(dataset, False, url, api_key, as_json)


__all__ = ["app"]
