"""Who is calling: a role, the key's id and its scope; and the credentials a request presents.

``Credentials`` (a presented key and the least role the route needs) are checked inside the
service's own transaction, in the same worker thread as the work itself (one thread hop per
request); ``Principal`` is what authentication yields. ``SYSTEM`` is the service acting on its
own behalf (CLI commands on the server, the reservation sweeper, start-up tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class Role(StrEnum):
    """Roles in increasing power: each includes the ones before it."""

    VIEWER = "viewer"
    PIPELINE = "pipeline"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Role.VIEWER: 0, Role.PIPELINE: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: key id, role and the datasets it is scoped to (None = all)."""

    key_id: str | None
    role: Role
    dataset_ids: tuple[str, ...] | None = None
    # budget structures: the allocations this key must charge to (None = not limited)
    allocations: tuple[str, ...] | None = None
    key_name: str | None = None  # the key's label, shown beside its id on the entries it makes
    # when the key's row was read and found active (None: a principal trusted as given, such
    # as SYSTEM): a write confirms the key again under its lock if a revocation may have
    # committed since (``app.services.auth.confirm_active``)
    checked_at: datetime | None = field(default=None, compare=False)

    def has_role(self, role: Role) -> bool:
        return self.role.rank >= role.rank

    def can_see(self, dataset_id: str) -> bool:
        return self.dataset_ids is None or dataset_id in self.dataset_ids

    def may_charge(self, allocation: str | None) -> str | None:
        """Why this key may not charge to ``allocation`` (None when it may): a key limited to
        allocations must name one of them."""
        if self.allocations is None or allocation in self.allocations:
            return None
        if allocation is None:
            return (
                "this key is limited to allocations "
                f"{list(self.allocations)}: name one of them in 'allocation'"
            )
        return (
            f"this key may not charge allocation {ascii(allocation)[:80]}; it is limited to "
            f"{list(self.allocations)}"
        )

    def may_change_budgets(self) -> str | None:
        """Why this key may not create datasets or change budgets, rules, archiving or
        allocations (None when it may): a key limited to allocations charges them, and changing
        a budget (its own allocation's included) would lift the limit it was given."""
        if self.allocations is None:
            return None
        return (
            f"this key is limited to allocations {list(self.allocations)}: it may charge them "
            "but not create datasets or change budgets, rules, archiving or allocations; use "
            "an admin key not limited to allocations"
        )

    def covers(
        self, dataset_ids: Sequence[str] | None, allocations: Sequence[str] | None = None
    ) -> bool:
        """Whether a key scoped to ``dataset_ids`` (None = all) and limited to ``allocations``
        (None = not limited) reaches nothing this principal cannot: the keys a scoped or
        allocation-limited admin may list and revoke."""
        if self.allocations is not None and (
            allocations is None or not set(allocations) <= set(self.allocations)
        ):
            return False
        if self.dataset_ids is None:
            return True
        return dataset_ids is not None and set(dataset_ids) <= set(self.dataset_ids)


@dataclass(frozen=True)
class Credentials:
    """The key a request presented (None when absent; not in the repr) and the least role its
    route needs."""

    token: str | None = field(repr=False)
    role: Role


Caller = Credentials | Principal
"""What a service is given: credentials to check, or an already trusted principal."""

SYSTEM = Principal(key_id=None, role=Role.ADMIN)

__all__ = ["SYSTEM", "Caller", "Credentials", "Principal", "Role"]
