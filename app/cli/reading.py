"""Reading a dataset's state and history: ``status``, ``budget``, ``ledger`` (a table, or the
server's CSV / JSON Lines export, streamed), ``rejections`` and ``audit`` (over HTTP)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer
from privacy_ledger_client import LedgerClient, LedgerEntry

from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    UNIT_WORDS,
    URL,
    Session,
    Table,
    connect,
    console,
    describe,
    fail,
    left,
    print_json,
    state_label,
    used,
    uses_rho,
    when,
)

DATASET = Annotated[str, typer.Argument(help="Dataset name or id.", metavar="DATASET")]
PAGE = 1000
"""Entries per request when streaming a ledger (the server's largest page)."""

CONTRIBUTION_LIMIT = 100_000
"""``status`` reads at most this many ledger entries to attribute the spend to mechanism kinds."""


def _entries(
    s: Session, dataset: str, limit: int | None, **filters: str | None
) -> Iterator[LedgerEntry]:
    """Ledger entries newest first (``filters``: only those), one page request at a time, at
    most ``limit``."""
    cursor: str | None = None
    seen = 0
    while True:
        size = PAGE if limit is None else min(PAGE, limit - seen)
        if size <= 0:
            return
        page = s.call(LedgerClient.ledger, dataset, limit=size, cursor=cursor, **filters)
        for e in page.entries:
            yield e
            seen += 1
        cursor = page.next_cursor
        if not cursor or not page.entries:
            return


def _contributions(s: Session, dataset: str) -> dict[str, float]:
    """Epsilon each mechanism kind added to the spend, in ledger order: entry i adds its
    ``spent_epsilon`` minus the one before it (the spend under the dataset's own filter, so the
    additions sum to the current spend)."""
    rows = sorted(
        (
            (e.seq or e.id, e.kind or e.mechanism.get("mechanism", "?"), e.spent_epsilon or 0.0)
            for e in _entries(s, dataset, None)
        ),
    )
    added: dict[str, float] = {}
    before = 0.0
    for _, kind, after in rows:
        added[kind] = added.get(kind, 0.0) + (after - before)
        before = after
    return added


@dataclass(frozen=True)
class _Partition:
    """What a time-partitioned dataset's tables add (docs/budgets.md): its budget applies to each
    block, an optional lifetime budget caps the composition of all charges, and ``/budget``
    summarises the blocks."""

    unit: str
    lifetime: dict[str, Any] | None
    blocks: dict[str, Any] | None

    @classmethod
    def of(
        cls, unit: str | None, lifetime: dict[str, Any] | None, blocks: dict[str, Any] | None
    ) -> _Partition | None:
        """None for a dataset that is not partitioned (no ``unit``)."""
        return None if unit is None else cls(unit, lifetime, blocks)


def _budget_rows(table: Table, budget: dict[str, Any], partition: _Partition | None) -> None:
    """The budget; on a partitioned dataset, labelled per block, and the lifetime budget."""
    text = f"epsilon {left(budget['epsilon'])}, delta {left(budget['delta'])}"
    if partition is None:
        table.add_row("budget", text)
        return
    unit = UNIT_WORDS.get(partition.unit, partition.unit)
    table.add_row("budget per block", f"{text} for each {unit} of data (UTC)")
    life = partition.lifetime
    table.add_row(
        "lifetime budget",
        f"epsilon {left(life['epsilon'])}, delta {left(life['delta'])} over all charges composed"
        if life
        else "none: every block has its own budget (a person in many blocks has no bound "
        "across them)",
    )


def _spend_rows(
    table: Table, answer: dict[str, Any], partition: _Partition | None, *, holds: bool
) -> None:
    """spent, rho (rho filters), reserved (``holds``: the ``/budget`` answer), remaining and, on
    a partitioned dataset, the blocks. There ``spent`` composes every charge, and ``remaining``
    is what the lifetime budget leaves or, with none, a block nobody charged has."""
    sp, rem = answer["spent"], answer["remaining"]
    composed = ", all charges composed" if partition is not None else ""
    table.add_row(
        "spent",
        f"epsilon {used(sp['epsilon'])} at delta {used(sp['delta'])} ({sp['method']}){composed}",
    )
    if partition is None:
        where = ""
        left_words = (
            "after holds (an indication)" if holds else "(an indication; the filter decides)"
        )
    elif partition.lifetime:
        where = " of the lifetime budget"
        left_words = where.lstrip() + (" after holds" if holds else "") + " (an indication)"
    else:
        where = " in a block nobody charged"
        left_words = where.lstrip() + " (no lifetime budget)"
    if uses_rho(answer["filter"]):
        rule = "" if holds else " (the filter admits while the rho sum fits)"
        table.add_row("rho", f"{used(sp['rho'])} spent, {left(rem['rho'])} left{where}{rule}")
    if holds:
        table.add_row("reserved", _reserved(answer.get("reserved")))
    table.add_row("remaining", f"epsilon {left(rem['epsilon'])} {left_words}")
    if partition is not None and partition.blocks is not None:
        _block_rows(table, partition.blocks)


def _reserved(reserved: dict[str, Any] | None) -> str:
    """``/budget``'s ``reserved``: the epsilon the active holds add to the spend, how many there
    are and when the first expires (None: no active hold)."""
    if not reserved or not reserved.get("count"):
        return "epsilon 0 (no active holds)"
    n = reserved["count"]
    expiry = reserved.get("next_expiry")
    text = f"epsilon {used(reserved.get('epsilon'))} by {n} active hold{'' if n == 1 else 's'}"
    return text + (f" (the first expires {when(expiry)} UTC)" if expiry else "")


def _block_rows(table: Table, blocks: dict[str, Any]) -> None:
    """``/budget``'s ``blocks`` summary: blocks charged and exhausted, the most-spent one."""
    table.add_row(
        "blocks",
        f"{blocks['charged_blocks']} charged, {blocks['exhausted_blocks']} exhausted "
        "(a block nobody charged has its whole budget)",
    )
    top = blocks.get("most_spent")
    table.add_row(
        "most-spent block",
        f"{top['block']}: epsilon {used(top['spent']['epsilon'])} spent, "
        f"{left(top['remaining']['epsilon'])} left" + (" (exhausted)" if top["exhausted"] else "")
        if top
        else "none charged yet",
    )


def status(
    dataset: DATASET,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Budget, spend, what remains, and what each mechanism kind cost (viewer key). On rho
    filters (zCDP, Gaussian DP) the cost is each kind's rho; on RDP and PLD datasets it is the
    epsilon each kind added to the spend, read from the ledger. On a partitioned dataset: the
    budget per block, the lifetime budget and a summary of the blocks."""
    with connect(url, api_key) as s:
        d = s.call(lambda c: c.dataset(dataset)).raw
        rho_based = uses_rho(d["filter"])
        counts = d.get("mechanism_counts") or {}
        added: dict[str, float] | None = None
        if counts and not rho_based and d["entries"] <= CONTRIBUTION_LIMIT:
            added = _contributions(s, d["id"])
        # a partitioned dataset's blocks are summarised by /budget only (not for --json, which
        # stays the dataset's answer)
        blocks = (
            s.call(lambda c: c.budget(d["id"])).raw.get("blocks")
            if d.get("partition") and not as_json
            else None
        )
    if as_json:
        print_json({**d, "epsilon_added": added} if added is not None else d)
        return
    table = Table(title=f"{d['name']} ({d['id']})", show_header=False)
    table.add_column("what")
    table.add_column("value")
    unit = (d.get("partition") or {}).get("unit")
    partition = _Partition.of(unit, d.get("lifetime_budget"), blocks)
    _budget_rows(table, d["budget"], partition)
    table.add_row(
        "accounting",
        f"{d['accounting']}, {'adaptive' if d['adaptive'] else 'non-adaptive'}; "
        f"filter {d['filter']}",
    )
    if d.get("entry_delta_budget"):
        table.add_row(
            "entry delta budget",
            f"{left(d['entry_delta_budget'])} of the delta, for mechanisms with their own delta",
        )
    if d.get("lifetime_entry_delta_budget"):
        table.add_row(
            "lifetime entry delta budget",
            f"{left(d['lifetime_entry_delta_budget'])} of the lifetime delta, for their deltas "
            "over all blocks",
        )
    _spend_rows(table, d, partition, holds=False)
    table.add_row("entries", str(d["entries"]))
    table.add_row("state", state_label(d))
    console.print(table)
    if not counts:
        return
    if rho_based:
        total = sum(c.get("rho") or 0.0 for c in counts.values())
        by = Table(title="mechanisms by rho (what this filter composes)")
        for col in ("kind", "entries", "invocations", "rho", "share"):
            by.add_column(col)
        for kind, c in sorted(counts.items(), key=lambda kv: -(kv[1].get("rho") or 0.0)):
            share = f"{100 * (c.get('rho') or 0.0) / total:.1f}%" if total > 0 else "-"
            by.add_row(kind, str(c["entries"]), str(c["count"]), used(c.get("rho")), share)
    else:
        by = Table(
            title="mechanisms by epsilon added to the spend "
            f"(at delta {used(d['spent']['delta'])}, in ledger order)"
        )
        for col in ("kind", "entries", "invocations", "epsilon added", "share"):
            by.add_column(col)
        total = sum(added.values()) if added else 0.0
        ranked = sorted(counts.items(), key=lambda kv: -(added or {}).get(kv[0], 0.0))
        for kind, c in ranked:
            eps = None if added is None else added.get(kind, 0.0)
            share = f"{100 * eps / total:.1f}%" if eps is not None and total > 0 else "-"
            by.add_row(kind, str(c["entries"]), str(c["count"]), used(eps), share)
        if added is None:
            by.caption = f"more than {CONTRIBUTION_LIMIT} entries: not attributed"
        else:
            _since_budget_change(by, total, d["spent"])
    console.print(by)


def _since_budget_change(by: Table, attributed: float, spent: dict[str, Any]) -> None:
    """Each entry stores the spend right after it at the budget delta of its time, so the kinds'
    additions add up to the last entry's spend: after a change of the budget delta (or totals
    rebuilt from re-derived curves) that is not the spend now. A last row then brings them to
    it (``inf`` where no finite epsilon holds at the current delta), rounded up as every spend."""
    now = spent["epsilon"]
    if now is not None and now == attributed:
        return
    gap = math.inf if now is None else now - attributed
    by.add_row("(budget delta changed)", "-", "-", used(gap), "-")
    by.caption = (
        "each entry adds its spend at the budget delta of its time; the last row brings them to "
        + (
            f"the spend now at delta {used(spent['delta'])}"
            if now is not None
            else f"the spend now: no finite epsilon at delta {used(spent['delta'])}"
        )
    )


def budget(
    dataset: DATASET,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Budget, spend, what remains after active reservations, and the entry count (viewer key).
    On a partitioned dataset: the budget per block, the lifetime budget and a summary of the
    blocks."""
    with connect(url, api_key) as s:
        b = s.call(lambda c: c.budget(dataset)).raw
    if as_json:
        print_json(b)
        return
    table = Table(title=f"budget of {b['name']} ({b['dataset_id']})", show_header=False)
    table.add_column("what")
    table.add_column("value")
    blocks = b.get("blocks")  # with ``lifetime``: partitioned datasets only
    unit = blocks.get("unit") if blocks else None
    partition = _Partition.of(unit, (b.get("lifetime") or {}).get("budget"), blocks)
    _budget_rows(table, b["budget"], partition)
    table.add_row("filter", f"{b['filter']} ({b['accounting']})")
    _spend_rows(table, b, partition, holds=True)
    table.add_row("entries", str(b["entries"]))
    table.add_row("state", state_label(b))
    console.print(table)


def ledger(
    dataset: DATASET,
    output_format: Annotated[
        Literal["table", "csv", "jsonl"],
        typer.Option(
            "--format",
            help="table for people (the newest entries); csv or jsonl (one JSON entry per "
            "line): the server's export, every entry the filters keep, oldest first, with its "
            "columns, streamed as it arrives.",
        ),
    ] = "table",
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Table only: at most this many entries, newest first [entries] (default: 50). "
            "The csv and jsonl export has no limit.",
            show_default=False,
        ),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Only this mechanism kind.", show_default=False)
    ] = None,
    allocation: Annotated[
        str | None,
        typer.Option(help="Only entries charged to this allocation.", show_default=False),
    ] = None,
    block: Annotated[
        str | None,
        typer.Option(
            help="Partitioned datasets: only entries whose block range covers this block "
            "(e.g. 2026-11-23).",
            show_default=False,
        ),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Ledger entries (viewer key): a table of the newest (--json: the same entries as the
    server answers them, a JSON list), or with --format csv / jsonl the server's export
    (GET /v1/datasets/{id}/ledger?format=csv|jsonl), oldest first."""
    filters = {"kind": kind, "allocation": allocation, "block": block}
    if as_json and output_format != "table":
        fail(f"--json prints the table's entries as JSON; --format {output_format} is the export")
    if output_format != "table":
        if limit is not None:
            fail(
                f"--limit applies to the table only: --format {output_format} is the server's "
                "export of every entry the filters keep, oldest first (pipe it through head or "
                "tail for fewer)"
            )
        with connect(url, api_key) as s:
            s.call(LedgerClient.export_ledger, dataset, sys.stdout, output_format, **filters)
        return
    with connect(url, api_key) as s:
        if as_json:
            limited = 50 if limit is None else limit
            print_json([e.raw for e in _entries(s, dataset, limited, **filters)])
            return
        table = Table(title=f"ledger of {dataset} (newest first)")
        columns = ("#", "time (UTC)", "mechanism", "count", "label", "charged by")
        for col in (*columns, "spent ε after", "source"):
            table.add_column(col)
        for e in _entries(s, dataset, 50 if limit is None else limit, **filters):
            table.add_row(
                str(e.seq),
                when(e.raw.get("created_at")),
                describe({k: v for k, v in e.mechanism.items() if k != "count"}),
                str(e.count),
                e.label or "",
                _charged_by(e),
                used(e.spent_epsilon),
                e.source or "",
            )
        console.print(table)


def _charged_by(e: LedgerEntry) -> str:
    """Who charged an entry, as the dashboard says it: the key's label (or id), then the team
    (allocation) in parentheses."""
    who = e.key_name or e.key_id or "-"
    return f"{who} ({e.allocation_name})" if e.allocation_name else who


def rejections(
    dataset: Annotated[
        str | None,
        typer.Option(help="Only this dataset (name or id).", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many [rejections].")] = 50,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Charges and reservations refused for budget, newest first (of one dataset with a
    viewer key or better; of all datasets with an admin key)."""
    items: list[dict[str, Any]] = []
    with connect(url, api_key) as s:
        ref = s.dataset_id(dataset) if dataset else None
        cursor: str | None = None
        while len(items) < limit:
            size = min(PAGE, limit - len(items))
            page = s.call(LedgerClient.rejections, ref, limit=size, cursor=cursor)
            items += [r.raw for r in page.rejections]
            cursor = page.next_cursor
            if not cursor or not page.rejections:
                break
    if as_json:
        print_json(items)
        return
    table = Table(title="rejections (newest first)")
    for col in ("id", "time (UTC)", "dataset", "operation", "mechanism", "spent ε", "asked ε"):
        table.add_column(col)
    for r in items:
        table.add_row(
            str(r["id"]),
            when(r.get("created_at")),
            r["dataset_id"],
            r.get("operation") or "",
            describe(r.get("mechanism")),
            used((r.get("spent") or {}).get("epsilon")),
            used((r.get("requested") or {}).get("epsilon")),
        )
    console.print(table)


def audit(
    dataset: Annotated[
        str | None,
        typer.Option(help="Only events about this dataset (name or id).", show_default=False),
    ] = None,
    action: Annotated[
        str | None,
        typer.Option(
            help="Only this action (e.g. budget.raised, dataset.changed, key.created).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many [events].")] = 50,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """The audit trail (budget, dataset and key changes), newest first (admin key)."""
    items: list[dict[str, Any]] = []
    with connect(url, api_key) as s:
        ref = s.dataset_id(dataset) if dataset else None
        before: int | None = None
        while len(items) < limit:
            size = min(PAGE, limit - len(items))
            events = s.call(LedgerClient.audit, ref, action, limit=size, before_id=before)
            items += [e.raw for e in events]
            if not events:
                break
            before = events[-1].id
    if as_json:
        print_json(items)
        return
    table = Table(title="audit trail (newest first)")
    for col in ("id", "time (UTC)", "action", "dataset", "target", "key", "details"):
        table.add_column(col)
    for e in items:
        table.add_row(
            str(e["id"]),
            when(e.get("created_at")),
            e["action"],
            e.get("dataset_id") or "",
            e.get("target_id") or "",
            e.get("key_id") or "",
            _brief(e.get("details")),
        )
    console.print(table)


def _brief(details: dict[str, Any] | None, width: int = 60) -> str:
    """An audit event's details in one short line (``--json`` has them whole)."""
    text = json.dumps(details or {}, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def register(cli: typer.Typer) -> None:
    for fn in (status, budget, ledger, rejections, audit):
        cli.command(fn.__name__)(fn)


__all__ = ["audit", "budget", "ledger", "register", "rejections", "status"]
