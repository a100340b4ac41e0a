"""The lists the docs keep by hand stay in step with the code they describe: the CSV export's
columns (docs/operations.md), the CLI's commands (README.md) and the client's answer types
(docs/client.md). Each of these had fallen behind (allocation_id / block_from / block_to, the
blocks, allocations and archive commands, ChargeBatch / Allocation / Block).

And the pages' examples run as written against this process's app (no server; a few seconds
of CPU in all): README's first session and command line, docs/budgets.md's worked example and
docs/client.md's Python example print what the pages show; the command-line sessions of
docs/client.md and docs/budgets.md run in order, every command succeeding.
docs/quickstart.md runs against a live server in tests/client/test_quickstart.py (slow)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import privacy_ledger_client
import pytest
import typer.main
from fastapi.testclient import TestClient

from app import responses
from app.cli import cli, common
from app.config import Settings
from app.services.ledger import CSV_COLUMNS
from tests.cli.conftest import Cli
from tests.conftest import ADMIN_KEY

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


# --- the pages' examples, run as written -------------------------------------------------------

ID = re.compile(r"\b(?:ds|al|key|rsv)_[0-9a-f]{16}\b")


def _same_json(shown: Any, got: Any, where: str) -> None:
    """``got`` is the answer ``shown``: the same structure and values, floats to 1e-9 relative
    (the pages warn that a composed epsilon's last digits follow the CPU's exp and log)."""
    if isinstance(shown, float) and isinstance(got, float):
        assert math.isclose(shown, got, rel_tol=1e-9), (where, shown, got)
    elif isinstance(shown, dict) and isinstance(got, dict):
        assert list(shown) == list(got), (where, shown, got)
        for k in shown:
            _same_json(shown[k], got[k], f"{where}.{k}")
    elif isinstance(shown, list) and isinstance(got, list):
        assert len(shown) == len(got), (where, shown, got)
        for i, (s, g) in enumerate(zip(shown, got, strict=True)):
            _same_json(s, g, f"{where}[{i}]")
    else:
        assert shown == got, (where, shown, got)


def _ids_as_met(text: str, seen: dict[str, str]) -> str:
    """``text`` with each id replaced by its kind and the order in which it was first met, so
    that the page's random ids and the run's match where they name the same thing."""

    def name(match: re.Match[str]) -> str:
        token = match.group(0)
        return seen.setdefault(token, f"{token[:3]}#{len(seen)}")

    return ID.sub(name, text)


def test_budgets_md_worked_example_answers_as_shown(
    sqlite_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/budgets.md's curl session, each command sent as written to a fresh server and its
    answer put through the page's own ``python3 -c`` filter: the printed lines are the page's,
    but for the random ids."""
    text = (ROOT / "docs" / "budgets.md").read_text()
    match = re.search(r"## Worked example.*?```\n(.*?)```", text, re.DOTALL)
    assert match, "the worked example is gone from docs/budgets.md"
    shown_ids: dict[str, str] = {}
    got_ids: dict[str, str] = {}
    ran = 0
    for chunk in match.group(1).strip().split("\n\n"):
        command, *shown = chunk.splitlines()
        assert command.startswith("$ "), chunk
        if not command.startswith("$ curl "):
            assert re.fullmatch(r"\$ (URL|KEY)=\S+.*", command), command
            continue
        curl, _, pipe = command[2:].partition(" | ")
        words = shlex.split(curl.replace("$URL", "").replace("$KEY", ADMIN_KEY))
        method, headers, body, url = "GET", {}, None, None
        it = iter(words[1:])
        for word in it:
            if word == "-s":
                continue
            if word == "-X":
                method = next(it)
            elif word == "-H":
                name, _, value = next(it).partition(": ")
                headers[name] = value
            elif word == "-d":
                body = next(it)
            else:
                assert url is None and word.startswith("/v1/"), word
                url = word
        assert url is not None and headers["Authorization"] == f"Bearer {ADMIN_KEY}"
        answer = sqlite_client.request(method, url, content=body, headers=headers)
        python = shlex.split(pipe)
        assert python[:2] == ["python3", "-c"], pipe
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer.text))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(python[2], {})  # the page's filter, as the reader runs it
        (line,) = out.getvalue().splitlines()
        _same_json(
            json.loads(_ids_as_met("\n".join(shown), shown_ids)),
            json.loads(_ids_as_met(line, got_ids)),
            command[:80],
        )
        ran += 1
    assert ran == 11


def _cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The ``privacy-ledger`` command in this process against ``client``'s app (as
    tests/cli/conftest.py's ``run``)."""
    monkeypatch.setattr(common, "TRANSPORT", client._transport)
    monkeypatch.setattr(common.console, "width", 200)
    monkeypatch.setattr(common.err_console, "width", 200)
    return Cli(client)


def test_the_readmes_first_session_and_command_line_print_what_it_shows(
    sqlite_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README.md's curl session, then its command-line session, in order on a fresh server:
    each ``#   prints:`` line is what the command before it prints (``...``: elided), and the
    numbers the text after it quotes are the ones a server gives."""
    readme = (ROOT / "README.md").read_text()
    session = re.search(r"## A first session\n\n```sh\n(.*?)```", readme, re.DOTALL)
    assert session, "README's first session is gone"
    for command in re.split(r"\n(?=curl )", session.group(1).split("\n", 1)[1].strip()):
        words = shlex.split(command.replace("\\\n", " ").replace("$KEY", ADMIN_KEY))
        data = words[words.index("-d") + 1] if "-d" in words else None
        url = next(w for w in words if w.startswith("localhost:8000")).removeprefix(
            "localhost:8000"
        )
        answer = sqlite_client.request(
            "POST" if data else "GET",
            url,
            content=data,
            headers={"content-type": "application/json"},
        )
        assert answer.status_code in (200, 201), (command, answer.text)
    census = answer.json()["spent"]["epsilon"]

    run = _cli(sqlite_client, monkeypatch)
    block = re.search(r"## The command line\n.*?```sh\n(.*?)```", readme, re.DOTALL)
    assert block, "README's command-line session is gone"
    printed = ""
    checked = 0
    for line in block.group(1).splitlines():
        if line.startswith("#   prints: "):
            pattern = re.escape(line.removeprefix("#   prints: ")).replace(r"\.\.\.", r".+?")
            assert re.fullmatch(pattern, printed), (line, printed)
            checked += 1
            continue
        command = line.split("  #", 1)[0].strip()
        if not command.startswith("privacy-ledger "):
            continue
        words = shlex.split(command)[1:]
        if ">" in words:
            words = words[: words.index(">")]
        printed = run(*words).stdout.strip()
    assert checked == 2

    text = _words(readme)
    quoted = re.search(
        r"the same Gaussian spent ([\d.]+) on `census`, ([\d.]+) here\. An epsilon of ([\d.]+) "
        r"for the second charge would be refused \(exit 2; it would reach ([\d.]+), over the "
        r"budget of 1\)",
        text,
    )
    assert quoted, "README no longer quotes the spends after its command-line session"
    adaptive, fixed, second, refused = quoted.groups()
    assert f"{census:.6f}" == adaptive
    run("datasets", "create", "survey-b", "--epsilon", "1", "--delta", "1e-6", "--no-adaptive")
    charged = run("charge", "survey-b", "--mechanism", "gaussian", "--sigma", "8").stdout
    assert f"spent epsilon {fixed} " in charged
    over = run(
        "charge", "survey-b", "-m", "discrete_laplace", "--epsilon", second,
        "--sensitivity", "1", code=2,
    )  # fmt: skip
    assert f"would reach {refused}, above the budget 1" in over.stderr


def test_client_md_python_example_prints_what_it_shows(
    sqlite_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/client.md's Python example, run as written on a fresh server (its ``LedgerClient()``
    given this app's transport), prints the lines the page shows; and the steps the page says
    ``calibrate`` answers for DP-SGD on a fresh dataset are the ones it answers."""
    text = (ROOT / "docs" / "client.md").read_text()
    match = re.search(r"```python\n(import random\n.*?)```\n\n.*?```\n(.*?)```", text, re.DOTALL)
    assert match, "the Python example or its output is gone from docs/client.md"
    code, shown = match.groups()

    class Client(privacy_ledger_client.LedgerClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("transport", sqlite_client._transport)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(privacy_ledger_client, "LedgerClient", Client)
    monkeypatch.setenv("PRIVACY_LEDGER_URL", "http://testserver")
    monkeypatch.setenv("PRIVACY_LEDGER_API_KEY", ADMIN_KEY)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"__name__": "example"})
    lines = out.getvalue().splitlines()
    assert len(lines) == len(shown.splitlines()) == 4
    for want, got in zip(shown.splitlines(), lines, strict=True):
        numbers = r"-?\d+\.\d+(?:e-?\d+)?"
        assert re.sub(numbers, "#", want) == re.sub(numbers, "#", got), (want, got)
        for a, b in zip(re.findall(numbers, want), re.findall(numbers, got), strict=True):
            assert math.isclose(float(a), float(b), rel_tol=1e-9), (want, got)

    steps = re.search(
        r'calibrate\("patients", "subsampled_gaussian", "steps", sigma=([\d.]+), '
        r"sample_rate=([\d.]+)\)` answers the most steps that do \(([\d,]+) on a fresh dataset\)",
        _words(text),
    )
    assert steps, "client.md no longer quotes the DP-SGD steps calibrate answers"
    sigma, rate, most = steps.groups()
    with Client() as ledger:
        ledger.create_dataset("patients-fresh", 1.0, 1e-6)
        answer = ledger.calibrate(
            "patients-fresh", "subsampled_gaussian", "steps", sigma=float(sigma),
            sample_rate=float(rate),
        )  # fmt: skip
    assert answer.value == int(most.replace(",", ""))


def _shell(run: Cli, block: str, cwd: Path) -> dict[str, str]:
    """Run a page's ``sh`` block of ``privacy-ledger`` commands as a reader would, in ``cwd``:
    each command must succeed. Understood besides: ``# comments``, ``\\`` continuations,
    ``> FILE``, ``echo '...' > FILE`` and ``NAME=$(privacy-ledger ... | python3 -c '...')``
    (then ``"$NAME"``). Returns the variables set, and each command's output by its line."""
    env: dict[str, str] = {}
    outputs: dict[str, str] = {}
    for raw in block.replace("\\\n", " ").splitlines():
        assign = re.fullmatch(r"(\w+)=\$\((.*)\)\s*(?:#[^)]*)?", raw.strip())
        filter_code = None
        if assign:
            inner = shlex.split(assign.group(2))
            pipe = inner.index("|")
            assert inner[pipe + 1 : pipe + 3] == ["python3", "-c"], raw
            raw_words, filter_code = inner[:pipe], inner[pipe + 3]
        else:
            raw_words = shlex.split(raw, comments=True)
        if not raw_words:
            continue
        words = [env.get(w[1:], w) if w.startswith("$") else w for w in raw_words]
        target = None
        if ">" in words:
            words, target = words[: words.index(">")], words[words.index(">") + 1]
        if words[0] == "echo":
            assert target is not None, raw
            (cwd / target).write_text(" ".join(words[1:]) + "\n")
            continue
        assert words[0] == "privacy-ledger", raw
        result = run(*words[1:])
        output = result.stdout
        if filter_code is not None and assign:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.ExitStack() as stack:
                stack.callback(setattr, sys, "stdin", sys.stdin)
                sys.stdin = io.StringIO(output)
                exec(filter_code, {})
            env[assign.group(1)] = out.getvalue().strip()
        elif target is not None:
            (cwd / target).write_text(output)
        outputs[raw] = output
    return outputs


def test_the_pages_command_line_sessions_run_in_order(
    sqlite_client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/client.md's client-side session ("run in this order with an admin key ... they make
    a dataset of their own") and docs/budgets.md's, each command as written, every one
    succeeding; budgets.md's ``budget`` table shows the rows the page prints."""
    run = _cli(sqlite_client, monkeypatch)
    monkeypatch.chdir(tmp_path)
    client_md = (ROOT / "docs" / "client.md").read_text()
    sessions = re.findall(r"```sh\n(privacy-ledger datasets  .*?)```", client_md, re.DOTALL)
    assert len(sessions) == 1, "client.md's client-side session is gone"
    _shell(run, sessions[0], tmp_path)
    assert (tmp_path / "ledger.csv").read_text().startswith("id,seq,")

    budgets_md = (ROOT / "docs" / "budgets.md").read_text()
    match = re.search(
        r"## From the command line.*?```sh\n(.*?)```.*?After the charge above.*?```\n(.*?)```",
        budgets_md,
        re.DOTALL,
    )
    assert match, "budgets.md's command-line session or its budget table is gone"
    session, table = match.groups()
    first = session.split("privacy-ledger blocks", 1)[0]  # the table is read after the charge
    _shell(run, first, tmp_path)
    shown = run("budget", "pageviews").stdout
    for row in table.strip().splitlines():
        assert row in shown, (row, shown)
    _shell(run, "privacy-ledger blocks" + session.split("privacy-ledger blocks", 1)[1], tmp_path)
