"""A dataset and its running totals as one record: read as a snapshot, or locked for writing.

``load`` reads the ``dataset`` row and its ``dataset_total`` row in one statement (by id, or by
unique name). With ``lock=True`` it takes the row locks that serialise every write on the
dataset's budget across processes and replicas: ``SELECT ... FOR NO KEY UPDATE`` of both rows on
PostgreSQL (both, so that a concurrent budget change is seen in full once its lock is released;
NO KEY so that foreign-key checks of inserted ledger rows are not blocked), and on SQLite the
database write lock that ``Database.write`` took with ``BEGIN IMMEDIATE``.

``save`` writes the totals back in one ``UPDATE`` when something changed. Budget reads and
admission therefore cost O(1) in the ledger length and in the number of active reservations.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Insert, Row, Select, Table, bindparam, select, update
from sqlalchemy.orm import Session

from app.accounting.adaptive import RenyiFilter
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind, Spend
from app.accounting.pld import Pld
from app.accounting.running import RunningSum
from app.db.codec import curve_columns, held_from_bytes, held_to_bytes, rdp_from_bytes
from app.db.engine import core
from app.db.models import AppSetting, Dataset, DatasetPld, DatasetTotal, utcnow
from app.errors import NotFound
from app.principal import Principal
from app.services.auth import KEYS_REVOKED_AT
from app.services.tallies import Tallies, stored_filter

_TOTALS = cast(Table, DatasetTotal.__table__)
_D = Dataset.__table__.c
_T = _TOTALS.c
_COLUMNS = (
    _D.id,
    _D.name,
    _D.description,
    _D.budget_epsilon,
    _D.budget_delta,
    _D.accounting,
    _D.adaptive,
    _D.allowed_mechanisms,
    _D.filter,
    _D.filter_bound,
    _D.filter_params,
    _D.created_at,
    _D.updated_at,
    _D.archived_at,
    _D.warning_threshold,
    _D.entry_delta_budget,
    _T.orders_version,
    _T.rho,
    _T.rdp,
    _T.pure_eps,
    _T.gaussian_only,
    _T.delta,
    _T.entry_count,
    _T.mechanism_counts,
    _T.spent_epsilon,
    _T.spent_method,
    _T.last_entry_at,
    _T.held_count,
    _T.held,
    _T.held_next_expiry,
    # budget structures (issue 15)
    _D.partition_unit,
    _D.lifetime_budget_epsilon,
    _D.lifetime_budget_delta,
    _D.lifetime_filter_bound,
    _D.lifetime_filter_params,
    _D.lifetime_entry_delta_budget,
)


# when a key was last revoked, so that a write can tell whether its key needs confirming
# (``app.services.auth.may_be_revoked``). SQLite: read with the lock, at no extra round trip
# (``BEGIN IMMEDIATE`` took the write lock before any statement, so the read is current).
# PostgreSQL: read again in a statement of its own once the lock is held, since a statement
# that waited for a row lock still reads everything else as of its start, and a revocation
# that committed during the wait would go unseen.
_REVOKED_AT = select(AppSetting.value).where(AppSetting.key == KEYS_REVOKED_AT)
_KEYS_REVOKED_AT = _REVOKED_AT.scalar_subquery().label("keys_revoked_at")


def _by(column: Any, *extra: Any) -> Select[Any]:
    return (
        select(*_COLUMNS, *extra).join_from(Dataset, DatasetTotal).where(column == bindparam("ref"))
    )


_SELECT_BY_ID = _by(_D.id)
_SELECT_BY_NAME = _by(_D.name)
_LOCK_BY_ID = _SELECT_BY_ID.with_for_update(key_share=True)  # PostgreSQL
_LOCK_BY_NAME = _SELECT_BY_NAME.with_for_update(key_share=True)
_SQLITE_LOCK_BY_ID = _by(_D.id, _KEYS_REVOKED_AT)  # SQLite: the write lock is already held
_SQLITE_LOCK_BY_NAME = _by(_D.name, _KEYS_REVOKED_AT)


@dataclass
class DatasetState:
    """A dataset's settings and running totals inside one transaction.

    The admission functions update it in memory (``dirty``); ``save`` writes it back.
    """

    id: str
    name: str
    description: str | None
    accounting: str
    adaptive: bool
    allowed_mechanisms: list[str] | None
    filter: Filter
    created_at: datetime
    updated_at: datetime
    committed: PrivacyCurve
    spent: Spend
    entry_count: int
    mechanism_counts: dict[str, Any]
    last_entry_at: datetime | None
    held: RunningSum
    held_next_expiry: datetime | None
    dirty: bool = False
    # PostgreSQL: an admitted entry's INSERT also writes the totals (one round trip less) when
    # it is the only unit of its group; a group of several writes them once, on ``save``
    totals_with_entry: bool = True
    # PostgreSQL, a group of several units: ids drawn for its entries, and the entries appended
    # but not yet inserted (``admission.locked`` inserts them in one statement before the totals)
    entry_ids: deque[int] = field(default_factory=deque)
    pending_entries: list[dict[str, Any]] = field(default_factory=list)
    # pld datasets, under the lock: the composed PLD of the ledger and of the active holds
    pld: Pld | None = None
    pld_held: Pld | None = None
    pld_dirty: bool = False
    # budget structures (issue 15): the block unit of a partitioned dataset, the filter of its
    # lifetime budget, and the allocation and block tallies loaded under the lock
    partition_unit: str | None = None
    lifetime: Filter | None = None
    structures: Tallies | None = None
    # read under the lock (None otherwise): the ``KEYS_REVOKED_AT`` setting
    keys_revoked_at: str | None = None
    # whether the totals row's own held_count column (what /metrics reads, which ``save``
    # writes from ``held``) disagreed with the held sum's count when read; ``verify`` reports it
    held_count_drift: bool = False

    def tallies(self) -> Tallies:
        """The budget-structure tallies of this transaction (loaded on demand)."""
        if self.structures is None:
            self.structures = Tallies(self.id, self.filter.kind)
        return self.structures

    archived_at: datetime | None = None
    warning_threshold: float = 0.8

    @property
    def is_pld(self) -> bool:
        return self.filter.kind is FilterKind.PLD

    @property
    def budget(self) -> Budget:
        return self.filter.budget

    @property
    def totals_filter(self) -> Filter:
        """The filter the dataset's totals (``spent``) are stated under: its own, or on a
        partitioned dataset with a lifetime budget (whose totals compose every block's charges)
        the lifetime budget's. ``/budget``, ``/spend``, ``/curves`` and the stored spend all
        use it, so that they describe one composition under one rule."""
        if self.partition_unit is not None and self.lifetime is not None:
            return self.lifetime
        return self.filter

    @property
    def held_curve(self) -> PrivacyCurve | None:
        """The sum of the active reservations' curves (None when there are none)."""
        return self.held.total()


@functools.lru_cache(maxsize=1024)
def _renyi_filter_of(key: tuple[Any, ...]) -> RenyiFilter:
    filter_name, version, epsilon, delta, orders, weights, thresholds = key
    return RenyiFilter.from_dict(
        {
            "filter": filter_name,
            "version": version,
            "epsilon": epsilon,
            "delta": delta,
            "orders": orders,
            "weights": weights,
            "thresholds": thresholds,
        }
    )


def _renyi_filter(params: dict[str, Any]) -> RenyiFilter:
    """``RenyiFilter.from_dict(params)``, remembered by value: a frozen filter, validated once
    per distinct stored value (its validation was a third of building a dataset's state)."""
    key = (
        params.get("filter"),
        params.get("version"),
        float(params["epsilon"]),
        float(params["delta"]),
        tuple(float(x) for x in params["orders"]),
        tuple(float(x) for x in params["weights"]),
        tuple(float(x) for x in params["thresholds"]),
    )
    return _renyi_filter_of(key)


def _state(row: Row[Any]) -> DatasetState:
    budget = Budget(row.budget_epsilon, row.budget_delta)
    lifetime = (
        None
        if row.lifetime_budget_epsilon is None
        else stored_filter(
            FilterKind(row.filter),
            Budget(row.lifetime_budget_epsilon, row.lifetime_budget_delta),
            row.lifetime_filter_bound,
            row.lifetime_filter_params,
            row.lifetime_entry_delta_budget,
        )
    )
    # the stored spend is at the delta of the filter it was computed under (``totals_filter``)
    spent_delta = (
        lifetime.budget.delta
        if lifetime is not None and row.partition_unit is not None
        else budget.delta
    )
    held = held_from_bytes(row.held, row.orders_version)
    committed = PrivacyCurve(
        rho=row.rho,
        rdp=rdp_from_bytes(row.rdp, row.orders_version),
        pure_eps=row.pure_eps,
        gaussian_only=row.gaussian_only,
        delta=row.delta,
    )
    return DatasetState(
        id=row.id,
        name=row.name,
        description=row.description,
        accounting=row.accounting,
        adaptive=row.adaptive,
        allowed_mechanisms=row.allowed_mechanisms,
        filter=Filter(
            FilterKind(row.filter),
            budget,
            row.filter_bound,
            _renyi_filter(row.filter_params) if row.filter_params else None,
            row.entry_delta_budget,
        ),
        created_at=row.created_at,
        updated_at=row.updated_at,
        committed=committed,
        spent=Spend(row.spent_epsilon, spent_delta, row.spent_method),
        entry_count=row.entry_count,
        mechanism_counts=row.mechanism_counts or {},
        last_entry_at=row.last_entry_at,
        held=held,
        held_count_drift=row.held_count != held.count,
        held_next_expiry=row.held_next_expiry,
        partition_unit=row.partition_unit,
        lifetime=lifetime,
        archived_at=row.archived_at,
        warning_threshold=row.warning_threshold,
        keys_revoked_at=row._mapping.get("keys_revoked_at"),
    )


def load(
    session: Session | Connection, ref: str, principal: Principal, *, lock: bool = False
) -> DatasetState:
    """The dataset ``ref`` (id first, then unique name) visible to ``principal``, read in a
    Session or a Core connection (``Database.read_core``).

    A dataset outside a scoped key's datasets is answered like a missing one (404).
    """
    conn = core(session)  # Core: no ORM bookkeeping for a plain row
    postgresql = conn.dialect.name == "postgresql"
    if not lock:
        by_id, by_name = _SELECT_BY_ID, _SELECT_BY_NAME
    elif postgresql:
        by_id, by_name = _LOCK_BY_ID, _LOCK_BY_NAME
    else:
        by_id, by_name = _SQLITE_LOCK_BY_ID, _SQLITE_LOCK_BY_NAME
    row = conn.execute(by_id, {"ref": ref}).first()
    if row is None:
        row = conn.execute(by_name, {"ref": ref}).first()
    if row is None or not principal.can_see(row.id):
        raise NotFound(f"no dataset {ref!r}")
    st = _state(row)
    if lock and postgresql:
        st.keys_revoked_at = conn.execute(_REVOKED_AT).scalar()
    if lock and st.is_pld:
        load_pld(session, st)
    return st


_PLD = cast(Table, DatasetPld.__table__)
_LOAD_PLD = select(_PLD.c.state, _PLD.c.held).where(_PLD.c.dataset_id == bindparam("id"))
_SAVE_PLD = (
    update(_PLD)
    .where(_PLD.c.dataset_id == bindparam("key_dataset_id"))
    .values(
        state=bindparam("state", type_=_PLD.c.state.type),
        held=bindparam("held", type_=_PLD.c.held.type),
        updated_at=bindparam("updated_at", type_=_PLD.c.updated_at.type),
    )
)


def load_pld(session: Session | Connection, st: DatasetState) -> None:
    """Read a ``pld`` dataset's composed PLD (and its holds') into ``st`` (a few MiB at most)."""
    row = core(session).execute(_LOAD_PLD, {"id": st.id}).one()
    st.pld = Pld.from_bytes(row.state)
    st.pld_held = Pld.from_bytes(row.held) if row.held is not None else None


def state_of(dataset: Row[Any]) -> DatasetState:
    """The state of a row selected with ``columns()`` (listings)."""
    return _state(dataset)


def columns() -> Select[Any]:
    """``SELECT`` of every column ``DatasetState`` needs, ``dataset`` joined to its totals."""
    return select(*_COLUMNS).join_from(Dataset, DatasetTotal)


_SAVED = (
    "orders_version",
    "rho",
    "rdp",
    "pure_eps",
    "gaussian_only",
    "delta",
    "entry_count",
    "mechanism_counts",
    "spent_epsilon",
    "spent_method",
    "last_entry_at",
    "updated_at",
    "held_count",
    "held",
    "held_next_expiry",
)
# built once: a statement built per call costs more than the UPDATE itself (cache key, coercion)
_SAVE = (
    update(_TOTALS)
    .where(_T.dataset_id == bindparam("key_dataset_id"))
    .values({name: bindparam(name, type_=_T[name].type) for name in _SAVED})
)


def _totals(st: DatasetState, now: datetime) -> dict[str, Any]:
    """The totals row's values for ``st``, keyed as ``_SAVE`` binds them."""
    return {
        "key_dataset_id": st.id,
        **curve_columns(st.committed),
        "entry_count": st.entry_count,
        "mechanism_counts": st.mechanism_counts,
        "spent_epsilon": st.spent.epsilon,
        "spent_method": st.spent.method,
        "last_entry_at": st.last_entry_at,
        "updated_at": now,
        "held_count": st.held.count,
        "held": held_to_bytes(st.held),
        "held_next_expiry": st.held_next_expiry,
    }


def save(session: Session, st: DatasetState, now: datetime | None = None) -> None:
    """Write the totals back (one ``UPDATE``) if anything changed since ``load``."""
    if st.structures is not None:
        st.structures.save(session, now)
    if not st.dirty:
        return
    values = _totals(st, now or utcnow())
    session.connection().execute(_SAVE, values)
    st.dirty = False
    if st.pld_dirty:
        assert st.pld is not None
        session.connection().execute(
            _SAVE_PLD,
            {
                "key_dataset_id": st.id,
                "state": st.pld.to_bytes(),
                "held": st.pld_held.to_bytes() if st.pld_held is not None else None,
                "updated_at": values["updated_at"],
            },
        )
        st.pld_dirty = False


# PostgreSQL: the totals written by the statement that inserts a ledger entry (a data-modifying
# CTE), so that an admitted charge costs one round trip less. Every name bound is prefixed
# ("t_" here, the statement's own otherwise): SQLAlchemy adds to an UPDATE a SET for any
# execution parameter named like one of its table's columns.
_SAVE_AS_CTE = (
    update(_TOTALS)
    .where(_T.dataset_id == bindparam("t_key_dataset_id"))
    .values({name: bindparam("t_" + name, type_=_T[name].type) for name in _SAVED})
    .cte("saved_totals")
)


def saving_totals(statement: Insert) -> Insert:
    """``statement`` that also writes the totals (PostgreSQL; see ``saved_totals``)."""
    return statement.add_cte(_SAVE_AS_CTE)


def saved_totals(st: DatasetState, now: datetime) -> dict[str, Any] | None:
    """The parameters of ``saving_totals`` for the totals of ``st`` as they are now, marking
    them saved; None when they cannot be saved that way (a ``pld`` dataset's PLD is saved with
    its totals by ``save``)."""
    if st.is_pld:
        return None
    values = {"t_" + k: v for k, v in _totals(st, now).items()}
    st.dirty = False
    return values


__all__ = [
    "DatasetState",
    "columns",
    "load",
    "load_pld",
    "save",
    "saved_totals",
    "saving_totals",
    "state_of",
]
