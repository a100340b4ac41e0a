"""Group commit: units of work queued for one key run together in one transaction.

A charge on a busy dataset spends most of its life holding that dataset's lock: the database
round trips and the durable commit, while the other charges of the dataset queue behind it.
Units of work submitted for the same key while a group is running are run together in the next
group, by one thread, in arrival order: one lock acquisition and one durable commit for all of
them. Each unit sees what the units before it left (they run one after another inside the
shared transaction), and a unit's answer is released only after the commit, so an answer still
means durable.

* A unit's own failure (one of ``own_errors``, e.g. a 422 or a refusal) is that unit's answer
  alone; such an error must be raised before the unit writes anything.
* Any other failure (a bug, a database error, a failed commit) rolls the whole group back and
  every unit in it gets that error, so none of them is acknowledged.
* The thread that opens a group is one of the submitters (no background thread): when its group
  is done it hands the lead to the oldest waiting submitter, so no caller's answer waits for
  groups that came after its own.
* A group takes its units once it holds the key's lock (``open_group`` calls ``take``), not
  before it asks for it: units submitted while the lock is awaited (held by another process's
  group, say) join the group instead of forming the next one, which would wait for the lock
  again.

This is "flat combining" (Hendler, Incze, Shavit, Tzafrir, SPAA 2010) applied to commits.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
C = TypeVar("C")

MAX_GROUP = 64
"""At most this many units in one transaction (bounds one transaction's size and latency)."""


@dataclass(eq=False)
class _Unit(Generic[C]):
    work: Callable[[C], Any]
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False
    value: Any = None
    error: BaseException | None = None


@dataclass
class GroupStats:
    """Counts of what the groups did (for tests and metrics): units run, groups committed."""

    units: int = 0
    groups: int = 0


class GroupCommit:
    """Runs submitted units of work in shared transactions, grouped by key."""

    def __init__(self, max_group: int = MAX_GROUP) -> None:
        self.max_group = max_group
        self.stats = GroupStats()
        self._mutex = threading.Lock()
        self._queues: dict[Any, deque[_Unit[Any]]] = {}

    def submit(
        self,
        key: Any,
        open_group: Callable[[Callable[[], int]], AbstractContextManager[C]],
        work: Callable[[C], T],
        own_errors: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Run ``work(context)`` inside a group for ``key`` and return its result.

        ``open_group(take)`` opens the shared transaction (entering it begins and locks, leaving
        it normally commits) and calls ``take()`` once it holds the lock: ``take`` gathers the
        group's units and returns how many there are. ``context`` is what it yields.
        """
        unit: _Unit[C] = _Unit(work)
        with self._mutex:
            queue = self._queues.get(key)
            if queue is None:  # nobody is running a group for this key: lead one now
                self._queues[key] = deque([unit])
                unit.lead = True
            else:
                queue.append(unit)
        if not unit.lead:
            unit.done.wait()
        if unit.lead:
            self._lead(key, open_group, own_errors)
        if unit.error is not None:
            raise unit.error
        return unit.value  # type: ignore[no-any-return]

    def _lead(
        self,
        key: Any,
        open_group: Callable[[Callable[[], int]], AbstractContextManager[C]],
        own_errors: tuple[type[BaseException], ...],
    ) -> None:
        with self._mutex:
            queue = self._queues[key]
        group: list[_Unit[Any]] = []
        taken = False

        def take() -> int:
            nonlocal taken
            if not taken:  # once: the leader's own unit is the oldest, so it is always taken
                taken = True
                with self._mutex:
                    group.extend(queue.popleft() for _ in range(min(len(queue), self.max_group)))
            return len(group)

        try:
            with open_group(take) as context:
                take()  # in case ``open_group`` did not
                for u in group:
                    try:
                        u.value = u.work(context)
                    except own_errors as exc:
                        u.error = exc
        except BaseException as exc:  # the whole group is rolled back: nobody is acknowledged
            take()  # a group that failed to open fails the units it would have run
            for u in group:
                u.value, u.error = None, exc
        with self._mutex:
            self.stats.units += len(group)
            self.stats.groups += 1
            if queue:
                queue[0].lead = True  # the oldest waiter runs the next group
                queue[0].done.set()
            else:
                del self._queues[key]
        for u in group:
            u.lead = False
            u.done.set()


__all__ = ["MAX_GROUP", "GroupCommit", "GroupStats"]
