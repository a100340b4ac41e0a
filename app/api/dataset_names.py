"""Dataset names: what a name may look like, so that every dataset is reachable by its name.

A name is 1-200 characters: ASCII letters and digits, ``.``, ``_``, ``:``, ``-`` and space; it
starts with a letter or digit and does not end with a space; it does not start with ``ds_`` (in
any case), the prefix of dataset ids. So a name is one URL path segment (no ``/``, never ``.``
or ``..``) and never shadows or looks like an id: ``/v1/datasets/{id or name}`` finds it.
Datasets named otherwise before this rule stay reachable by id.

A new allocation's name follows the same rule with ``al_``, the prefix of allocation ids, in
place of ``ds_`` (``NewAllocationName``): the ledger's ``?allocation=`` takes a name or an id,
and a name shaped like another allocation's id mixed the two allocations' entries. A charge,
reservation or key still names an existing allocation with the dataset rule
(``AllocationName``), so an allocation named ``al_...`` before this rule stays usable.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from app.api.safe_text import unsafe_reason
from app.services.tallies import ALLOCATION_ID_PREFIX

NAME_MAX_LENGTH = 200
NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9._: -]*[A-Za-z0-9._:-])?$"
ID_PREFIX = "ds_"


def _rule(what: str, prefix: str) -> str:
    return (
        f"{what} name is 1-200 characters of ASCII letters, digits, '.', '_', ':', '-' and "
        "space, starts with a letter or digit, does not end with a space and does not start "
        f"with '{prefix}' (the prefix of {what.split()[-1]} ids)"
    )


NAME_RULE = _rule("a dataset", ID_PREFIX)
ALLOCATION_NAME_RULE = _rule("an allocation", ALLOCATION_ID_PREFIX)

_NAME = re.compile(NAME_PATTERN)


def name_problem(name: str, what: str = "a dataset", prefix: str = ID_PREFIX) -> str | None:
    """Why ``name`` is not a valid name of ``what`` ("a dataset", "an allocation"), whose ids
    start with ``prefix`` (None when it is)."""
    rule, noun = _rule(what, prefix), what.split()[-1]
    unsafe = unsafe_reason(name)
    if unsafe is not None:
        return f"{what} name {unsafe}; {rule}"
    if not 1 <= len(name) <= NAME_MAX_LENGTH or _NAME.fullmatch(name) is None:
        return f"invalid {noun} name {ascii(name)[:80]}: {rule}"
    if name[: len(prefix)].lower() == prefix:
        return f"invalid {noun} name {name!r}: it would look like {what} id; {rule}"
    return None


def _check(value: Any) -> Any:
    if isinstance(value, str) and (problem := name_problem(value)) is not None:
        raise PydanticCustomError("dataset_name", "{problem}", {"problem": problem})
    return value


def _check_allocation(value: Any) -> Any:
    problem = (
        name_problem(value, "an allocation", ALLOCATION_ID_PREFIX)
        if isinstance(value, str)
        else None
    )
    if problem is not None:
        raise PydanticCustomError("allocation_name", "{problem}", {"problem": problem})
    return value


def _field(rule: str, prefix: str) -> Any:
    a, b = prefix[0], prefix[1]
    return Field(
        min_length=1,
        max_length=NAME_MAX_LENGTH,
        pattern=NAME_PATTERN,
        description=rule,
        json_schema_extra={"not": {"pattern": f"^[{a.upper()}{a}][{b.upper()}{b}]_"}},
    )


# the BeforeValidator runs first: one message that states the rule
DatasetName = Annotated[str, _field(NAME_RULE, ID_PREFIX), BeforeValidator(_check)]
NewAllocationName = Annotated[
    str,
    _field(ALLOCATION_NAME_RULE, ALLOCATION_ID_PREFIX),
    BeforeValidator(_check_allocation),
]

__all__ = [
    "ALLOCATION_NAME_RULE",
    "NAME_PATTERN",
    "NAME_RULE",
    "DatasetName",
    "NewAllocationName",
    "name_problem",
]
