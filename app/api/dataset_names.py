"""Dataset names: what a name may look like, so that every dataset is reachable by its name.

A name is 1-200 characters: ASCII letters and digits, ``.``, ``_``, ``:``, ``-`` and space; it
starts with a letter or digit and does not end with a space; it does not start with ``ds_`` (in
any case), the prefix of dataset ids. So a name is one URL path segment (no ``/``, never ``.``
or ``..``) and never shadows or looks like an id: ``/v1/datasets/{id or name}`` finds it.
Datasets named otherwise before this rule stay reachable by id.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from app.api.safe_text import unsafe_reason

NAME_MAX_LENGTH = 200
NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9._: -]*[A-Za-z0-9._:-])?$"
ID_PREFIX = "ds_"
NAME_RULE = (
    "a dataset name is 1-200 characters of ASCII letters, digits, '.', '_', ':', '-' and space, "
    "starts with a letter or digit, does not end with a space and does not start with 'ds_' "
    "(the prefix of dataset ids)"
)

_NAME = re.compile(NAME_PATTERN)


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid dataset name (None when it is)."""
    unsafe = unsafe_reason(name)
    if unsafe is not None:
        return f"a dataset name {unsafe}; {NAME_RULE}"
    if not 1 <= len(name) <= NAME_MAX_LENGTH or _NAME.fullmatch(name) is None:
        return f"invalid dataset name {ascii(name)[:80]}: {NAME_RULE}"
    if name[: len(ID_PREFIX)].lower() == ID_PREFIX:
        return f"invalid dataset name {name!r}: it would look like a dataset id; {NAME_RULE}"
    return None


def _check(value: Any) -> Any:
    if isinstance(value, str) and (problem := name_problem(value)) is not None:
        raise PydanticCustomError("dataset_name", "{problem}", {"problem": problem})
    return value


DatasetName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=NAME_MAX_LENGTH,
        pattern=NAME_PATTERN,
        description=NAME_RULE,
        json_schema_extra={"not": {"pattern": "^[Dd][Ss]_"}},
    ),
    BeforeValidator(_check),  # runs first: one message that states the rule
]

__all__ = ["NAME_PATTERN", "NAME_RULE", "DatasetName", "name_problem"]
