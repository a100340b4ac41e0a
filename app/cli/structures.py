"""Budget structures (issue 15): ``allocations create/list/show/set-budget`` (team sub-budgets
of a dataset) and ``blocks`` (the spend per block of a time-partitioned dataset), over HTTP."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    NEW_DELTA,
    NEW_EPSILON,
    URL,
    Table,
    connect,
    console,
    fail,
    finite,
    left,
    print_json,
    used,
)

DATASET = Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")]
NAME = Annotated[str, typer.Argument(help="Allocation name (unique per dataset).", metavar="NAME")]

app = typer.Typer(
    help="Allocations: sub-budgets of a dataset per team or analyst. A charge naming an "
    "allocation must fit both the allocation's budget and the dataset's; allocations may add up "
    "to more than the dataset (the dataset's budget is the guarantee).",
    no_args_is_help=True,
)


def _table(rows: list[dict[str, Any]]) -> Table:
    t = Table(
        "name", "budget epsilon", "spent epsilon", "remaining epsilon", "exhausted", "entries"
    )
    for a in rows:
        t.add_row(
            a["name"],
            left(a["budget"]["epsilon"]),
            used(a["spent"]["epsilon"]),
            left(a["remaining"]["epsilon"]),
            "yes" if a["exhausted"] else "no",
            str(a.get("entries", "")),
        )
    return t


@app.command("create")
def allocations_create(
    dataset: DATASET,
    name: NAME,
    epsilon: Annotated[
        float,
        typer.Option(
            parser=finite, metavar="NUMBER", help="The allocation's budget epsilon [nats]."
        ),
    ],
    delta: Annotated[
        float,
        typer.Option(
            parser=finite, metavar="NUMBER", help="The allocation's budget delta [probability]."
        ),
    ],
    entry_delta_budget: Annotated[
        float | None,
        typer.Option(
            parser=finite,
            metavar="NUMBER",
            help="The part of the allocation's delta [probability] set aside for mechanisms with "
            "their own delta (the dataset must set a part aside too); 0 (default) refuses them "
            "through this allocation.",
            show_default=False,
        ),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Create an allocation of DATASET (admin key, audited)."""
    with connect(url, api_key) as s:
        a = s.call(
            lambda c: c.create_allocation(dataset, name, epsilon, delta, entry_delta_budget)
        ).raw
    if as_json:
        print_json(a)
    else:
        console.print(
            f"created allocation {a['name']} of {dataset}: budget epsilon "
            f"{left(a['budget']['epsilon'])}, delta {left(a['budget']['delta'])}",
            markup=False,
        )


@app.command("list")
def allocations_list(
    dataset: DATASET, url: URL = DEFAULT_URL, api_key: KEY = None, as_json: JSON_OUT = False
) -> None:
    """DATASET's allocations with their spend (viewer key)."""
    with connect(url, api_key) as s:
        rows = [a.raw for a in s.call(lambda c: c.allocations(dataset))]
    if as_json:
        print_json(rows)
    elif not rows:
        console.print(f"{dataset} has no allocations", markup=False)
    else:
        console.print(_table(rows))


@app.command("show")
def allocations_show(
    dataset: DATASET,
    name: NAME,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """One allocation of DATASET with its spend (viewer key)."""
    with connect(url, api_key) as s:
        a = s.call(lambda c: c.allocation(dataset, name)).raw
    if as_json:
        print_json(a)
    else:
        console.print(_table([a]))


@app.command("set-budget")
def allocations_set_budget(
    dataset: DATASET,
    name: NAME,
    epsilon: NEW_EPSILON = None,
    delta: NEW_DELTA = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Change an allocation's budget (admin key, audited)."""
    if epsilon is None and delta is None:
        fail("give --epsilon, --delta or both")
    with connect(url, api_key) as s:
        a = s.call(lambda c: c.update_allocation(dataset, name, epsilon=epsilon, delta=delta)).raw
    if as_json:
        print_json(a)
    else:
        console.print(_table([a]))


def blocks(
    dataset: DATASET,
    first: Annotated[
        str, typer.Option("--from", help="First block key, e.g. 2026-11-01, 2026-W45, 2026-11.")
    ],
    last: Annotated[str, typer.Option("--to", help="Last block key (inclusive).")],
    allocation: Annotated[
        str | None,
        typer.Option(help="Show this allocation's share of each block.", show_default=False),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Spend per block of a time-partitioned DATASET (viewer key); a block nobody charged has
    spent nothing."""
    with connect(url, api_key) as s:
        rows = [
            b.raw for b in s.call(lambda c: c.blocks(dataset, first, last, allocation=allocation))
        ]
    if as_json:
        print_json(rows)
        return
    t = Table("block", "spent epsilon", "remaining epsilon", "exhausted")
    for b in rows:
        t.add_row(
            b["block"],
            used(b["spent"]["epsilon"]),
            left(b["remaining"]["epsilon"]),
            "yes" if b["exhausted"] else "no",
        )
    console.print(t)


def register(cli: typer.Typer) -> None:
    """Add these commands to the top-level app."""
    cli.add_typer(app, name="allocations")
    cli.command("blocks")(blocks)


__all__ = ["app", "blocks", "register"]
