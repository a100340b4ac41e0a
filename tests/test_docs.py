"""The lists the docs keep by hand stay in step with the code they describe: the CSV export's
columns (docs/operations.md), the CLI's commands (README.md) and the client's answer types
(docs/client.md). Each of these had fallen behind (allocation_id / block_from / block_to, the
blocks, allocations and archive commands, ChargeBatch / Allocation / Block)."""

from __future__ import annotations

import re
from pathlib import Path

import privacy_ledger_client
import typer.main

from app import responses
from app.cli import cli
from app.config import Settings
from app.services.ledger import CSV_COLUMNS

ROOT = Path(__file__).resolve().parent.parent


def _words(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made single spaces."""
    return " ".join(text.split())


def test_operations_lists_the_csv_exports_columns() -> None:
    text = _words((ROOT / "docs" / "operations.md").read_text())
    match = re.search(r"CSV with a header row \(`([^`]+)`", text)
    assert match, "the CSV export's header list is gone from docs/operations.md"
    assert [c.strip() for c in match.group(1).split(",")] == list(CSV_COLUMNS)


def test_budgets_md_names_the_structure_members_of_each_export() -> None:
    """budgets.md said the JSON Lines rows carry ``block_from`` / ``block_to``: those are CSV
    columns; a JSON Lines row is an entry answer, with ``blocks`` (audit h2, F5)."""
    text = _words((ROOT / "docs" / "budgets.md").read_text())
    match = re.search(
        r"CSV rows carry ((?:`\w+`(?:, | and )?)+); JSON Lines rows .*? carry ((?:`\w+`(?:, | and )?)+)",
        text,
    )
    assert match, "the export members are gone from docs/budgets.md"
    csv_named, jsonl_named = (re.findall(r"`(\w+)`", match.group(i)) for i in (1, 2))
    assert csv_named == ["allocation_id", "allocation_name", "block_from", "block_to"]
    assert set(csv_named) <= set(CSV_COLUMNS)
    assert jsonl_named == ["allocation_id", "allocation_name", "blocks"]
    assert set(jsonl_named) <= set(responses.Entry.model_fields)
    assert not {"block_from", "block_to"} & set(responses.Entry.model_fields)


def test_the_readmes_command_table_names_every_command() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("| commands | what |")
    table = readme[start : readme.index("\n\n", start)]
    named = {m for cell in re.findall(r"`([^`]+)`", table) for m in [_words(cell)]}
    root = typer.main.get_command(cli)
    missing = []
    for name, command in getattr(root, "commands", {}).items():
        subcommands = getattr(command, "commands", {})
        paths = [name] + [f"{name} {sub}" for sub in subcommands]
        for path in paths:
            if not any(cell == path or cell.startswith(path + " ") for cell in named):
                missing.append(path)
    assert missing == []


def test_client_md_lists_every_answer_type() -> None:
    text = _words((ROOT / "docs" / "client.md").read_text())
    match = re.search(r"\*\*Answers\*\* are frozen dataclasses \(([^)]*)\)", text)
    assert match, "the list of answer types is gone from docs/client.md"
    listed = set(re.findall(r"`(\w+)`", match.group(1)))
    exported = {
        name
        for name in privacy_ledger_client.__all__
        if isinstance(cls := getattr(privacy_ledger_client, name), type)
        and issubclass(cls, privacy_ledger_client.Model)
        and cls is not privacy_ledger_client.Model
    }
    assert exported - listed == set()


def test_the_readmes_configuration_table_names_every_setting() -> None:
    """Every ``Settings`` field is read from ``PRIVACY_LEDGER_<NAME>``; the README's table
    left out four (the body limit, both page sizes and the longest reservation), so an operator
    met their 413 and 422 answers with no setting named anywhere but operations.md."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("| variable | default | meaning |")
    table = readme[start : readme.index("\n\n", start)]
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| `(PRIVACY_LEDGER_\w+)` \| ([^|]*) \|", table, re.MULTILINE)
    }
    fields = Settings.model_fields
    assert set(rows) == {f"PRIVACY_LEDGER_{name.upper()}" for name in fields}
    for name, field in fields.items():
        default = field.default
        if default is None or name == "database_url":
            continue
        shown = rows[f"PRIVACY_LEDGER_{name.upper()}"].strip().strip("`")
        expected = str(default).lower() if isinstance(default, bool) else str(default)
        assert shown == expected, name


def test_client_md_names_every_client_method_and_builder() -> None:
    """A method or builder the page never names is one a pipeline author cannot find:
    ``archive_dataset`` / ``unarchive_dataset`` and the generic builders (``pure_dp``,
    ``approx_dp``, ``zcdp``, ``rdp``, ``exponential``) were in the client and nowhere in the
    docs."""
    text = (ROOT / "docs" / "client.md").read_text()
    named = set(re.findall(r"`(\w+)[`(]", text))
    internal = {"send", "close", "aclose"}  # the plumbing under every method; the with block
    methods = {
        name
        for cls in (privacy_ledger_client.LedgerClient, privacy_ledger_client.AsyncLedgerClient)
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }
    builders = {
        name
        for name in privacy_ledger_client.__all__
        if name[0].islower() and callable(getattr(privacy_ledger_client, name))
    }
    assert (methods | builders) - internal - named == set()
