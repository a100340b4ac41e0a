"""GroupCommit: concurrent units for one key share transactions, in order, each answered
after its group's commit; a unit's own error is its own; any other failure fails its group.
Grouping is checked by counting groups and units, never by timing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from app.db.group_commit import GroupCommit


class Own(Exception):
    """An error that belongs to one unit."""


class Ledger:
    """A toy transactional store: a group's writes become visible only on commit."""

    def __init__(self, fail_commit_when: int | None = None, fail_open: bool = False) -> None:
        self.committed: list[int] = []
        self.commits = 0
        self.sizes: list[int] = []  # the size of each group, taken under the lock
        self.fail_commit_when = fail_commit_when
        self.fail_open = fail_open
        self.inside = threading.Event()  # a group is open
        self.proceed = threading.Event()  # let the open group finish
        self.proceed.set()
        self.lock_free = threading.Event()  # another process's group holds the lock until set
        self.lock_free.set()

    @contextmanager
    def transaction(self, take: Callable[[], int]) -> Iterator[list[int]]:
        self.inside.set()
        self.lock_free.wait()  # the lock, awaited before the group takes its units
        if self.fail_open:
            raise RuntimeError("no such dataset")
        self.sizes.append(take())
        pending = list(self.committed)
        self.proceed.wait()  # the group runs (holding its units) until let go
        yield pending
        if self.fail_commit_when is not None and self.fail_commit_when in pending:
            raise RuntimeError("commit failed")
        self.committed = pending
        self.commits += 1


def _append(value: int):
    def work(pending: list[int]) -> int:
        if value < 0:
            raise Own(f"refused {value}")
        pending.append(value)
        return len(pending)

    return work


def test_a_lone_unit_runs_in_its_own_transaction() -> None:
    gc, store = GroupCommit(), Ledger()
    assert gc.submit("k", store.transaction, _append(1)) == 1
    assert gc.submit("k", store.transaction, _append(2)) == 2
    assert store.committed == [1, 2] and store.commits == 2
    assert (gc.stats.units, gc.stats.groups) == (2, 2)


QUEUE_POLLS = 120_000
"""Polls (1 ms apart, at least) for units to queue: a bound on work, not a deadline."""


def _queue_behind_an_open_group(gc: GroupCommit, store: Ledger, values: list[int]):
    """Start one unit whose group blocks, queue ``values`` behind it, then let it finish."""
    store.proceed.clear()
    pool = ThreadPoolExecutor(len(values) + 1)
    first = pool.submit(gc.submit, "k", store.transaction, _append(0), (Own,))
    assert store.inside.wait(10)
    futures = []
    for v in values:
        futures.append(pool.submit(gc.submit, "k", store.transaction, _append(v), (Own,)))
    # every unit is queued (not yet run) before the open group may finish; the polls are
    # counted, so a unit that never queues fails the test instead of hanging it
    for _ in range(QUEUE_POLLS):
        with gc._mutex:
            if len(gc._queues["k"]) == len(values):
                break
        threading.Event().wait(0.001)
    else:
        store.proceed.set()
        raise AssertionError(f"the units did not all queue behind the open group: {values}")
    store.proceed.set()
    pool.shutdown(wait=True)
    return first, futures


def test_units_queued_behind_an_open_group_share_the_next_transaction() -> None:
    gc, store = GroupCommit(), Ledger()
    first, futures = _queue_behind_an_open_group(gc, store, [1, 2, 3, 4, 5])
    assert first.result() == 1
    results = sorted(f.result() for f in futures)
    assert results == [2, 3, 4, 5, 6]  # each saw the units before it
    assert sorted(store.committed) == [0, 1, 2, 3, 4, 5]
    assert (gc.stats.units, gc.stats.groups) == (6, 2)
    assert store.commits == 2
    assert store.sizes == [1, 5]  # units queued while a group runs form the next group


def test_units_queued_while_the_lock_is_awaited_join_the_group() -> None:
    """A group takes its units once it holds the lock: those submitted while the lock was held
    elsewhere (by another process's group) run in the same transaction, not in one more."""
    gc, store = GroupCommit(), Ledger()
    store.lock_free.clear()
    values = [1, 2, 3, 4, 5]
    pool = ThreadPoolExecutor(len(values) + 1)
    first = pool.submit(gc.submit, "k", store.transaction, _append(0), (Own,))
    assert store.inside.wait(10)
    futures = [pool.submit(gc.submit, "k", store.transaction, _append(v), (Own,)) for v in values]
    for _ in range(QUEUE_POLLS):  # counted polls, as in _queue_behind_an_open_group
        with gc._mutex:
            if len(gc._queues["k"]) == 1 + len(values):  # the leader's own unit is queued too
                break
        threading.Event().wait(0.001)
    else:
        store.lock_free.set()
        raise AssertionError("the units did not all queue while the lock was awaited")
    store.lock_free.set()
    pool.shutdown(wait=True)
    assert sorted([first.result(), *(f.result() for f in futures)]) == [1, 2, 3, 4, 5, 6]
    assert (gc.stats.units, gc.stats.groups) == (6, 1)
    assert store.sizes == [6] and store.commits == 1


def test_a_group_that_fails_to_open_fails_the_units_it_would_have_run() -> None:
    gc, store = GroupCommit(), Ledger(fail_open=True)
    with pytest.raises(RuntimeError, match="no such dataset"):
        gc.submit("k", store.transaction, _append(1))
    assert (gc.stats.units, gc.stats.groups) == (1, 1) and not gc._queues
    assert store.committed == []


def test_a_units_own_error_leaves_the_rest_of_its_group_committed() -> None:
    gc, store = GroupCommit(), Ledger()
    first, futures = _queue_behind_an_open_group(gc, store, [1, -7, 3])
    outcomes = []
    for f in futures:
        try:
            outcomes.append(f.result())
        except Own as exc:
            outcomes.append(str(exc))
    assert "refused -7" in outcomes
    assert sorted(store.committed) == [0, 1, 3]
    assert gc.stats.groups == 2


def test_a_failed_commit_fails_every_unit_of_that_group_and_no_other() -> None:
    gc, store = GroupCommit(), Ledger(fail_commit_when=3)
    first, futures = _queue_behind_an_open_group(gc, store, [2, 3, 4])
    assert first.result() == 1  # its own group committed before
    for f in futures:
        with pytest.raises(RuntimeError, match="commit failed"):
            f.result()
    assert store.committed == [0]


def test_group_size_is_capped() -> None:
    gc, store = GroupCommit(max_group=2), Ledger()
    _first, futures = _queue_behind_an_open_group(gc, store, [1, 2, 3, 4, 5])
    assert sorted(f.result() for f in futures) == [2, 3, 4, 5, 6]
    assert gc.stats.groups == 1 + 3  # the open one, then groups of 2, 2, 1
    assert store.sizes == [1, 2, 2, 1]


def test_many_threads_and_keys_lose_nothing() -> None:
    gc = GroupCommit(max_group=8)
    stores = {k: Ledger() for k in "abc"}

    def one(i: int) -> tuple[str, int]:
        key = "abc"[i % 3]
        return key, gc.submit(key, stores[key].transaction, _append(i))

    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(one, range(600)))
    for key, store in stores.items():
        mine = [n for k, n in results if k == key]
        assert sorted(mine) == list(range(1, 201))  # positions 1..200, each exactly once
        assert sorted(store.committed) == sorted(i for i in range(600) if "abc"[i % 3] == key)
    assert gc.stats.units == 600 and not gc._queues
