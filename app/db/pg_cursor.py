"""A psycopg cursor whose ``description`` is built when it is read, not on every execute.

SQLAlchemy reads ``cursor.description`` after every statement, but when the statement's result
metadata is cached (every statement this service runs more than once) it only checks that the
description is not None. psycopg builds the whole list of ``Column`` objects on each read: 34
columns (a dataset's state) cost about 30 us of CPU per statement, on every charge and budget
read. ``LazyDescriptionCursor.description`` answers the same None / not None at once and builds
the columns, from the same result, only if something reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import psycopg
from psycopg import Column
from psycopg.pq import ExecStatus

_TUPLES = (ExecStatus.TUPLES_OK, ExecStatus.SINGLE_TUPLE, ExecStatus.TUPLES_CHUNK)


class LazyDescription(Sequence[Column]):
    """The ``Column`` list psycopg's ``description`` gives for the cursor's current result,
    built on first use; reading it after the cursor has moved to another result is an error
    (psycopg's eager list would describe the old one: nothing here keeps one that long)."""

    __slots__ = ("_columns", "_cursor", "_result")

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor
        self._result = cursor.pgresult
        self._columns: list[Column] | None = None

    def _built(self) -> list[Column]:
        if self._columns is None:
            if self._cursor.pgresult is not self._result:
                raise RuntimeError("cursor.description read after the cursor moved on")
            self._columns = [Column(self._cursor, i) for i in range(len(self))]
        return self._columns

    def __len__(self) -> int:
        return self._result.nfields if self._result is not None else 0

    @overload
    def __getitem__(self, index: int) -> Column: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Column]: ...
    def __getitem__(self, index: int | slice) -> Column | Sequence[Column]:
        return self._built()[index]

    def __iter__(self) -> Iterator[Column]:
        return iter(self._built())

    def __repr__(self) -> str:
        return repr(self._built())


class LazyDescriptionCursor(psycopg.Cursor[Any]):
    """``psycopg.Cursor`` with ``description`` built on use (module docstring); None exactly
    when psycopg's would be None."""

    @property
    def description(self) -> LazyDescription | None:  # type: ignore[override]
        res = self.pgresult
        if res and (res.nfields or res.status in _TUPLES):
            return LazyDescription(self)
        return None


__all__ = ["LazyDescription", "LazyDescriptionCursor"]
